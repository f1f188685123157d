package sim

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

const traceDir = "../../traces"

func readTraceFile(t testing.TB, rel, format string) *Trace {
	t.Helper()
	f, err := os.Open(filepath.Join(traceDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := Read(f, format, ReadOptions{Name: filepath.Base(rel)})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestReadRealTraces(t *testing.T) {
	tests := map[string]struct {
		file, format      string
		wantJobs, skipped int
		check             func(t *testing.T, tr *Trace)
	}{
		"openb default: 8,152 pods, 1,088 without GPUs": {
			file: "alibaba-openb-2023/openb_pod_list_default.csv", format: "openb",
			wantJobs: 8152 - 1088, skipped: 1088,
			check: func(t *testing.T, tr *Trace) {
				classes := map[gpufleet.Priority]int{}
				shared, constrained := 0, 0
				for _, j := range tr.Jobs {
					classes[j.Class]++
					if j.Sharing.Kind == gpufleet.TimeSlice {
						shared++
					}
					if len(j.GPUModels) > 0 {
						constrained++
					}
				}
				if shared != 3078 {
					t.Errorf("time-sliced pods = %d, want 3,078 (README: gpu_milli < 1000)", shared)
				}
				if constrained != 0 {
					t.Errorf("pods with gpu_spec = %d, want 0 in the default file", constrained)
				}
				if classes[gpufleet.Production]+classes[gpufleet.Training]+classes[gpufleet.Batch] != len(tr.Jobs) {
					t.Errorf("classes %v do not cover every job", classes)
				}
			},
		},
		"openb gpuspec33: 2,388 pods with a GPU-type constraint": {
			file: "alibaba-openb-2023/openb_pod_list_gpuspec33.csv", format: "openb",
			wantJobs: 8152 - 1088, skipped: 1088,
			check: func(t *testing.T, tr *Trace) {
				constrained := 0
				for _, j := range tr.Jobs {
					if len(j.GPUModels) > 0 {
						constrained++
					}
				}
				if constrained != 2388 {
					t.Errorf("constrained pods = %d, want 2,388", constrained)
				}
				if _, ok := tr.Models["G2"]; !ok {
					t.Errorf("opaque models %v lack G2", tr.Models)
				}
			},
		},
		"philly-gavel: 15,264 jobs in 15 VCs, gzip": {
			file: "philly-gavel/philly_gavel.csv.gz", format: "philly-gavel",
			wantJobs: 15264,
			check: func(t *testing.T, tr *Trace) {
				teams := map[string]bool{}
				for _, j := range tr.Jobs {
					teams[j.Team] = true
					if len(j.DurationOn) != 3 {
						t.Fatalf("job %s has durations %v, want v100, p100, k80", j.ID, j.DurationOn)
					}
				}
				if len(teams) != 15 {
					t.Errorf("teams = %d, want 15", len(teams))
				}
				j := tr.Jobs[0] // 0e4a51,0.0,Transformer,1 GPU, 17465.9 / 30948.4 / 96905.7
				if j.DurationOn["v100-sxm2-16gb"] != 17465.9 || j.DurationOn["k80"] != 96905.7 || j.Team != "0e4a51" {
					t.Errorf("first job = %+v", j)
				}
			},
		},
		"dlrm: 7,386 GPU instances, 16,485 CPU instances skipped": {
			file: "alibaba-dlrm-2025/disaggregated_DLRM_trace.csv", format: "dlrm",
			wantJobs: 7386, skipped: 16485,
			check: func(t *testing.T, tr *Trace) {
				for _, j := range tr.Jobs {
					if j.Class != gpufleet.Production || j.Preemptible || j.Duration < 1 {
						t.Fatalf("job %+v: want non-preemptible production with a duration", j)
					}
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tr := readTraceFile(t, tc.file, tc.format)
			if len(tr.Jobs) != tc.wantJobs || tr.Skipped != tc.skipped || tr.BadLines != 0 {
				t.Errorf("jobs %d skipped %d bad %d, want %d, %d, 0", len(tr.Jobs), tr.Skipped, tr.BadLines, tc.wantJobs, tc.skipped)
			}
			if tc.check != nil {
				tc.check(t, tr)
			}
		})
	}
}

func TestOpenbNodes(t *testing.T) {
	f, err := os.Open(filepath.Join(traceDir, "alibaba-openb-2023/openb_node_list_all_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spec, cpuOnly, err := ParseOpenbNodes(f, ReadOptions{Name: "nodes"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := BuildCluster(spec, catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Nodes) != 1523-310 || cpuOnly != 310 || cl.GPUs() != 6212 {
		t.Errorf("nodes %d cpu-only %d gpus %d, want 1,213, 310, 6,212", len(cl.Nodes), cpuOnly, cl.GPUs())
	}
	if g := cl.Models["G2"]; g.ID != "G2" || g.Name != "G2" || g.MemoryBytes != 0 {
		t.Errorf("G2 = %+v, want an opaque model", g)
	}
	if cl.Nodes[0].Name == "" || !strings.HasPrefix(cl.Nodes[0].Name, "openb-node-") {
		t.Errorf("first node %q keeps no trace name", cl.Nodes[0].Name)
	}
}

func TestMalformedLinesNameFileAndLine(t *testing.T) {
	tests := map[string]struct {
		format, input string
		wantLine      int
		wantMsg       string
	}{
		"openb bad qos": {
			format:   "openb",
			input:    "name,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time,scheduled_time\np1,1,1000,,LS,0,10,0\np2,1,1000,,XX,0,10,0\n",
			wantLine: 3, wantMsg: "qos",
		},
		"openb deletion before start": {
			format:   "openb",
			input:    "name,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time,scheduled_time\np1,1,1000,,LS,5,4,5\n",
			wantLine: 2, wantMsg: "out of order",
		},
		"philly short row": {
			format:   "philly-gavel",
			input:    "vc,arrival_s,job_type,gpus,total_steps,duration_s_v100,duration_s_p100,duration_s_k80,single_gpu_s_v100,single_gpu_s_p100,single_gpu_s_k80\na,0,x,1,1,1,1,1,1,1,1\na,0,x\n",
			wantLine: 3, wantMsg: "fields",
		},
		"dlrm negative gpu": {
			format:   "dlrm",
			input:    "instance_sn,app_name,gpu_request,creation_time,scheduled_time,deletion_time\ni1,a,1,,,\ni2,a,-1,,,\n",
			wantLine: 3, wantMsg: "gpu_request",
		},
		"csv missing column": {
			format: "csv", input: "submit_s,gpus\n0,1\n", wantLine: 1, wantMsg: "duration_s",
		},
		"csv unparsable number": {
			format: "csv", input: "submit_s,duration_s,gpus\n0,10,1\n\n1,ten,1\n", wantLine: 4, wantMsg: "duration_s",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.input), tc.format, ReadOptions{Name: "t.csv"})
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("err = %v, want a *LineError wrapping ErrInvalid", err)
			}
			if le.File != "t.csv" || le.Line != tc.wantLine || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %v, want t.csv:%d and %q", err, tc.wantLine, tc.wantMsg)
			}
			tr, err := Read(strings.NewReader(tc.input), tc.format, ReadOptions{Name: "t.csv", SkipBadLines: true})
			if tc.wantLine == 1 {
				if err == nil {
					t.Errorf("a bad header must fail even with SkipBadLines")
				}
				return
			}
			if err != nil || tr.BadLines != 1 {
				t.Errorf("with SkipBadLines: err %v, bad lines %v, want nil and 1", err, tr)
			}
		})
	}
}

func TestGzipDetected(t *testing.T) {
	plain := "submit_s,duration_s,gpus,team,sharing,duration_s_k80\n0,10,1,a,timeslice:0.5,40\n5,20,2,b,,\n"
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(plain))
	zw.Close()
	for name, in := range map[string][]byte{"plain": []byte(plain), "gzip": buf.Bytes()} {
		tr, err := Read(bytes.NewReader(in), "csv", ReadOptions{Name: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(tr.Jobs) != 2 || tr.Jobs[0].Sharing.Fraction != 0.5 || tr.Jobs[0].DurationFor("k80") != 40 || tr.Jobs[1].DurationFor("k80") != 20 {
			t.Errorf("%s: jobs %+v", name, tr.Jobs)
		}
	}
}

func FuzzParseOpenb(f *testing.F) {
	f.Add("name,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time,scheduled_time\np1,1,500,G2|T4,BE,0,10,\n")
	fuzzReader(f, "openb")
}

func FuzzParsePhillyGavel(f *testing.F) {
	f.Add("vc,arrival_s,job_type,gpus,total_steps,duration_s_v100,duration_s_p100,duration_s_k80,single_gpu_s_v100,single_gpu_s_p100,single_gpu_s_k80\na,0,x,4,1,,2,3,4,5,6\n")
	fuzzReader(f, "philly-gavel")
}

func FuzzParseDLRM(f *testing.F) {
	f.Add("instance_sn,app_name,gpu_request,creation_time,scheduled_time,deletion_time\ni1,a,1,,,\ni2,a,1,5,6,100\n")
	fuzzReader(f, "dlrm")
}

func FuzzParseCSV(f *testing.F) {
	f.Add("id,submit_s,duration_s,gpus,nodes,team,priority,gpu_model,sharing,estimate_s,preemptible\nj,0,10,2,1,a,batch,t4|a10,exclusive,12,true\n")
	f.Add("id,submit_s,duration_s,gpus,retries,fails,fail_after_s\nj,0,100,1,2,3,10\nk,1,50,2,0,1,\n")
	fuzzReader(f, "csv")
}

// fuzzReader checks that a reader never panics and that what it accepts is
// well formed.
func fuzzReader(f *testing.F, format string) {
	f.Fuzz(func(t *testing.T, in string) {
		for _, opt := range []ReadOptions{{Name: "fuzz"}, {Name: "fuzz", SkipBadLines: true}, {Name: "fuzz", KeepInvalid: true}} {
			tr, err := Read(strings.NewReader(in), format, opt)
			if err != nil {
				if len(err.Error()) > 2048 {
					t.Fatalf("a %d-byte error: it quotes its input whole", len(err.Error()))
				}
				continue
			}
			for _, j := range tr.Jobs {
				if j.Submit < 0 || !(j.Duration >= 1) || j.ID == "" || j.checkTimes() != nil ||
					j.Retries < 0 || j.Retries > gpufleet.MaxRetries || j.Fails < 0 || j.Fails > maxFails {
					t.Fatalf("accepted a bad job %+v", j)
				}
				if j.Invalid != "" {
					continue // kept under KeepInvalid, for the scheduler to fail
				}
				if j.GPUs < 1 {
					t.Fatalf("accepted a bad job %+v", j)
				}
				if err := j.check(); err != nil {
					t.Fatalf("accepted job %s that the shared validation refuses: %v", j.ID, err)
				}
			}
		}
	})
}

func FuzzParseOpenbNodes(f *testing.F) {
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn1,96000,786432,8,V100M32\nn2,96000,786432,8,V100M32\nn3,64000,262144,0,\n")
	f.Fuzz(func(t *testing.T, in string) {
		spec, _, err := ParseOpenbNodes(strings.NewReader(in), ReadOptions{Name: "fuzz"})
		if err != nil {
			return
		}
		for _, g := range spec.NodeGroups {
			if g.Count < 1 || g.GPUsPerNode < 1 {
				t.Fatalf("accepted node group %+v", g)
			}
		}
	})
}

func FuzzParseClusterSpec(f *testing.F) {
	f.Add("node_groups:\n  - name: a\n    count: 2\n    gpu: t4\n    gpus_per_node: 2\nteams:\n  - name: x\n    quota: {t4: 2}\n")
	f.Add(`{"node_groups": [{"name": "v", "count": 1, "gpu": "k80", "gpus_per_node": 8}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		spec, err := ParseClusterSpec(strings.NewReader(in))
		if err != nil {
			return
		}
		if len(spec.NodeGroups) > 0 && spec.NodeGroups[0].Count > 1000 {
			return
		}
		_, _ = BuildCluster(spec, catalog.Default())
	})
}
