package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufleet/gpufleet/catalog"
)

func phillyCluster(tb testing.TB) *Cluster {
	tb.Helper()
	f, err := os.Open(filepath.Join(traceDir, "clusters/philly.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	spec, err := ParseClusterSpec(f)
	if err != nil {
		tb.Fatal(err)
	}
	cl, err := BuildCluster(spec, catalog.Default())
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

func openbCluster(tb testing.TB) *Cluster {
	tb.Helper()
	f, err := os.Open(filepath.Join(traceDir, "alibaba-openb-2023/openb_node_list_all_node.csv"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	spec, _, err := ParseOpenbNodes(f, ReadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	cl, err := BuildCluster(spec, catalog.Default())
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// The engine's own cost, with the trivial fake scheduler, on the full traces.
func BenchmarkEnginePhillyFake(b *testing.B) {
	tr := readTraceFile(b, "philly-gavel/philly_gavel.csv.gz", "philly-gavel")
	cl := phillyCluster(b)
	for b.Loop() {
		if _, err := Run(tr, cl, fakeConfig()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEngineOpenbFake(b *testing.B) {
	tr := readTraceFile(b, "alibaba-openb-2023/openb_pod_list_gpuspec33.csv", "openb")
	cl := openbCluster(b)
	for b.Loop() {
		if _, err := Run(tr, cl, fakeConfig()); err != nil {
			b.Fatal(err)
		}
	}
}
