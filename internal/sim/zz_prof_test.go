package sim

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufleet/gpufleet/internal/scheduler"
)

func BenchmarkZZOpenbReal(b *testing.B) {
	tr := readTraceFile(b, "alibaba-openb-2023/openb_pod_list_default.csv", "openb")
	cl := openbCluster(b)
	pc, _ := scheduler.PolicyConfig("gpufleet")
	for b.Loop() {
		if _, err := Run(tr, cl, Config{Policy: pc}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestZZLoad(t *testing.T) {
	cl := phillyCluster(t)
	for _, eff := range []float64{0.8, 1.0} {
		f, _ := os.Open(filepath.Join(traceDir, "philly-gavel/philly_gavel.csv.gz"))
		tr, err := Read(f, "philly-gavel", ReadOptions{ScalingEfficiency: eff})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(tr, cl, Config{Schedule: func(scheduler.Input) scheduler.Output { return scheduler.Output{} }, LoadPeriod: 50 * 86400})
		if err != nil {
			t.Fatal(err)
		}
		ld := res.Report.OfferedLoad
		t.Logf("eff %.2f: overall %.3f cap %.1f speeds %v", eff, ld.Overall, ld.CapacityRefGPUs, ld.Speeds)
		for _, p := range ld.Periods {
			t.Logf("  %+v", p)
		}
		// work share of jobs by gpus and scaled
		var tot, scaledW, measured float64
		byG := map[int]float64{}
		last := 0.0
		for _, j := range tr.Jobs {
			w := float64(j.GPUs) * j.DurationOn["v100-sxm2-16gb"]
			tot += w
			byG[j.GPUs] += w
			last = max(last, j.Submit)
			_ = scaledW
			_ = measured
		}
		t.Logf("total work %.4g V100-s, last arrival %.0f d, byG %v", tot, last/86400, byG)
	}
}

func TestZZSpeeds(t *testing.T) {
	tr := readTraceFile(t, "philly-gavel/philly_gavel.csv.gz", "philly-gavel")
	for _, m := range []string{"p100-pcie-16gb", "k80"} {
		var sv, sm, mean float64
		var sv1, sm1 float64
		for _, j := range tr.Jobs {
			g := float64(j.GPUs)
			sv += g * j.DurationOn["v100-sxm2-16gb"]
			sm += g * j.DurationOn[m]
			mean += j.DurationOn["v100-sxm2-16gb"] / j.DurationOn[m]
			if j.GPUs == 1 {
				sv1 += j.DurationOn["v100-sxm2-16gb"]
				sm1 += j.DurationOn[m]
			}
		}
		t.Logf("%s: work-weighted %.3f, mean of ratios %.3f, 1-gpu work-weighted %.3f", m, sv/sm, mean/float64(len(tr.Jobs)), sv1/sm1)
	}
}

func BenchmarkZZPhilly(b *testing.B) {
	tr := readTraceFile(b, "philly-gavel/philly_gavel.csv.gz", "philly-gavel")
	tr.Jobs = tr.Jobs[:5000]
	cl := phillyCluster(b)
	pc, _ := scheduler.PolicyConfig(os.Getenv("POL"))
	for b.Loop() {
		res, err := Run(tr, cl, Config{Policy: pc})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("avg %.3g cycles %d", *res.Report.AvgJCTS, res.Report.Cycles)
	}
}

func TestZZTune(t *testing.T) {
	if os.Getenv("POL") == "" {
		t.Skip()
	}
	tr := readTraceFile(t, "philly-gavel/philly_gavel.csv.gz", "philly-gavel")
	if n, _ := strconv.Atoi(os.Getenv("N")); n > 0 {
		tr.Jobs = tr.Jobs[:n]
	}
	cl := phillyCluster(t)
	for _, pol := range strings.Split(os.Getenv("POL"), ",") {
		name, opts, _ := strings.Cut(pol, ":")
		pc, _ := scheduler.PolicyConfig(name)
		pc.ETA = false
		for _, o := range strings.Split(opts, "+") {
			switch {
			case o == "nohet":
				pc.HeterogeneityPreference = false
			case o == "nofs":
				pc.FairShare = false
			case o == "nobf":
				pc.Backfill = false
			case strings.HasPrefix(o, "slack="):
				pc.SizeSlack, _ = strconv.ParseFloat(o[6:], 64)
			}
		}
		res, err := Run(tr, cl, Config{Policy: pc})
		if err != nil {
			t.Fatal(err)
		}
		r := res.Report
		if os.Getenv("TEAMS") != "" {
			for _, k := range slices.Sorted(maps.Keys(r.ByTeam)) {
				v := r.ByTeam[k]
				t.Logf("   %s jobs %d avgslow %.3g avgjct %.3g avgwait %.3g", k, v.Jobs, *v.AvgSlowdown, *v.AvgJCTS, *v.AvgWaitS)
			}
		}
		t.Logf("%-30s avg %.3g p50 %.3g p99 %.3g jain %.3f mk %.3g", pol, *r.AvgJCTS, *r.P50JCTS, *r.P99JCTS, *r.JainFairness, r.MakespanS)
	}
}
