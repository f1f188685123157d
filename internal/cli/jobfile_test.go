package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

func TestParseJobFile(t *testing.T) {
	tests := map[string]struct {
		name, in string
		want     api.SubmitRequest
	}{
		"yaml with human forms": {
			name: "job.yaml",
			in: `name: nb
resources:
  gpus: 1
  gpu_memory_min: 40GiB
  min_compute_capability: 8.0
  sharing: timeslice:0.25
  cpus: 8
  memory: 64GiB
command: [python, "-c", "print(1)"]
env:
  PORT: 8000
  DEBUG: true
time_limit: 4h
estimate: 5400
grace: 1.5
preemptible: true
retries: 2
`,
			want: api.SubmitRequest{Name: "nb", Resources: gpufleet.Resources{GPUs: 1, GPUMemoryMinBytes: 40 << 30, MinComputeCapability: gpufleet.ComputeCapability{Major: 8, Minor: 0}, Sharing: gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 0.25},
				CPUs: 8, MemoryBytes: 64 << 30},
				Command: []string{"python", "-c", "print(1)"}, Env: map[string]string{"PORT": "8000", "DEBUG": "true"},
				TimeLimit: gpufleet.Duration(4 * time.Hour), Estimate: gpufleet.Duration(time.Hour + 30*time.Minute), Grace: gpufleet.Duration(1500 * time.Millisecond), Preemptible: true, Retries: 2},
		},
		"json with the contract key, as a number and as a string": {
			name: "job.json",
			in:   "{\n\t\"resources\": {\"gpus\": 2, \"gpu_memory_min_bytes\": \"141GB\"},\n\t\"command\": [\"x\"],\n\t\"time_limit\": 60\n}\n",
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2, GPUMemoryMinBytes: 141e9}, Command: []string{"x"}, TimeLimit: gpufleet.Duration(time.Minute)},
		},
		"isolation and overhead, human and plain": {
			name: "job.yaml",
			in:   "resources:\n  gpus: 1\n  isolation: hard\n  overhead: <= 5%\n",
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, Isolation: gpufleet.IsolationHard, Overhead: ptrTo(gpufleet.OverheadLimit(0.05))}},
		},
		"overhead as a ratio": {
			name: "job.yaml",
			in:   "resources: {gpus: 1, overhead: 0.03, isolation: soft}\n",
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, Isolation: gpufleet.IsolationSoft, Overhead: ptrTo(gpufleet.OverheadLimit(0.03))}},
		},
		"json sniffed without an extension": {
			name: "stdin",
			in:   `{"resources": {"gpus": 1, "gpu_memory_min_bytes": 1024}}`,
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, GPUMemoryMinBytes: 1024}},
		},
		"model with an inline config": {
			name: "job.yaml",
			in: `resources: {gpus: 1}
model:
  mode: inference
  batch: 4
  config:
    model_type: llama
    hidden_size: 4096
    rope_scaling: {factor: 8.0, type: llama3}
    tie_word_embeddings: false
    eos_token_id: [1, 2]
`,
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Model: &api.ModelRequest{Mode: "inference", Batch: 4,
				Config: map[string]any{"model_type": "llama", "hidden_size": float64(4096), "rope_scaling": map[string]any{"factor": float64(8), "type": "llama3"},
					"tie_word_embeddings": false, "eos_token_id": []any{float64(1), float64(2)}}}},
		},
		"work counter and energy figures": {
			name: "job.yaml",
			in: `name: decode
resources:
  gpus: 1
  prefer: efficient
  joules_per_unit: {l4: 0.9, h100-sxm-80gb: 0.3}
work:
  metric: 'tokens=(\d+)'
  unit: tokens
`,
			want: api.SubmitRequest{Name: "decode", Resources: gpufleet.Resources{GPUs: 1, Prefer: gpufleet.Efficient,
				JoulesPerUnit: map[string]float64{"l4": 0.9, "h100-sxm-80gb": 0.3}},
				Work: &gpufleet.WorkCounter{Metric: `tokens=(\d+)`, Unit: "tokens"}},
		},
		"anchors resolve": {
			name: "job.yaml",
			in:   "x-env: &e {A: b}\n",
		},
		"nulls are absent": {
			name: "job.yaml",
			in:   "name: ~\nresources:\n  gpus: 3\n  sharing:\nmodel: null\n",
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 3}},
		},
	}
	for name, tc := range tests {
		if name == "anchors resolve" {
			continue // covered below: x-env is not a field
		}
		t.Run(name, func(t *testing.T) {
			got, err := parseJobFile(strings.NewReader(tc.in), tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	got, err := parseJobFile(strings.NewReader("env: &e {A: b}\nresources:\n  gpus: 1\n  node_selector: *e\n"), "a.yaml")
	if err != nil || got.Resources.NodeSelector["A"] != "b" || got.Env["A"] != "b" {
		t.Errorf("anchors: %+v %v", got, err)
	}
}

func TestJobFileErrorsNameFieldAndLine(t *testing.T) {
	tests := map[string]struct {
		name, in string
		want     string
	}{
		"unknown top-level key":   {"job.yaml", "name: x\ngpus: 4\n", `job.yaml:2: unknown field "gpus" (known: `},
		"unknown nested key":      {"job.yaml", "resources:\n  gpus: 1\n  gpu: h100\n", `job.yaml:3: unknown field "gpu" in resources`},
		"unknown model key":       {"job.yaml", "model:\n  name: x\n  batchsize: 4\n", `job.yaml:3: unknown field "batchsize" in model`},
		"unknown json key":        {"job.json", "{\n  \"resources\": {\n    \"gpus\": 1,\n    \"gpu_count\": 2\n  }\n}", `job.json:4: unknown field "gpu_count" in resources`},
		"bad sharing":             {"job.yaml", "resources:\n  sharing: mig:big\n", `job.yaml:2: resources.sharing "mig:big": expected mig:PROFILE`},
		"bad priority":            {"job.yaml", "\n\npriority: high\n", `job.yaml:3: priority "high": expected production`},
		"bad size":                {"job.yaml", "resources:\n  gpu_memory_min: lots\n", `job.yaml:2: resources.gpu_memory_min_bytes "lots"`},
		"bad duration":            {"job.yaml", "time_limit: forever\n", `job.yaml:1: time_limit "forever"`},
		"string for an integer":   {"job.yaml", "resources:\n  gpus: four\n", `job.yaml:2: resources.gpus: expected an integer, got "four"`},
		"float for an integer":    {"job.yaml", "retries: 1.5\n", `job.yaml:1: retries: expected an integer`},
		"scalar for a list":       {"job.yaml", "command: python train.py\n", `job.yaml:1: command: expected a list`},
		"yes is not a bool":       {"job.yaml", "preemptible: yes\n", `job.yaml:1: preemptible: expected true or false, got "yes"`},
		"key and alias both":      {"job.yaml", "resources:\n  gpu_memory_min: 1GiB\n  gpu_memory_min_bytes: 5\n", `job.yaml:3: resources.gpu_memory_min_bytes given twice (first on line 2)`},
		"duplicate key":           {"job.yaml", "name: a\nname: b\n", `job.yaml:2: name given twice`},
		"yaml syntax":             {"job.yaml", "resources:\n  gpus: [1\n", `job.yaml:`},
		"two documents":           {"job.yaml", "name: a\n---\nname: b\n", "one job per file"},
		"not a mapping":           {"job.yaml", "- a\n- b\n", "job.yaml:1: job: expected a mapping of fields"},
		"empty":                   {"job.yaml", "# nothing\n", "empty job file"},
		"json trailing data":      {"job.json", `{"name": "a"} {}`, "job.json:1: unexpected data after the JSON value"},
		"json syntax":             {"job.json", "{\n\"name\": }", "job.json:2: invalid JSON"},
		"merge key":               {"job.yaml", "resources: &b {gpus: 1}\nmodel:\n  <<: *b\n", "job.yaml:3: YAML merge keys (<<) are not supported"},
		"null in a list":          {"job.yaml", "command: [a, ~]\n", "command[1]: null in a list"},
		"env value not a scalar":  {"job.yaml", "env:\n  A: [1]\n", "job.yaml:2: env.A: expected a plain value"},
		"model mode":              {"job.yaml", "model:\n  name: llama-3.1-8b\n  mode: serve\n", `job.yaml:3: model.mode: "serve": expected inference or training`},
		"model kv precision":      {"job.yaml", "model:\n  kv_precision: int3\n", `job.yaml:2: model.kv_precision: "int3": expected bf16, fp16, fp8, int8 or fp32`},
		"model engine":            {"job.yaml", "model: {engine: ollama}\n", `job.yaml:1: model.engine: "ollama": expected vllm, trtllm or sglang`},
		"compute capability form": {"job.yaml", "resources: {min_compute_capability: nine}\n", `resources.min_compute_capability "nine": expected MAJOR.MINOR`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := parseJobFile(strings.NewReader(tc.in), tc.name)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, gpufleet.ErrInvalid) {
				t.Errorf("error %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestSubmitReportsJobFileErrors(t *testing.T) {
	srv, _ := startFake(t)
	path := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(path, []byte("resources:\n  gpus: 1\n  gpu: h100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "submit", path, "--server", srv.URL, "--token", fakeAdmin)
	if code == 0 || !strings.Contains(errOut, path+`:3: unknown field "gpu" in resources`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestExampleJobFilesParse parses examples/jobs/*.yaml and the YAML blocks
// of docs/JOBS.md, and checks the docs quote the examples faithfully.
func TestExampleJobFilesParse(t *testing.T) {
	files, err := filepath.Glob("../../examples/jobs/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v %v", files, err)
	}
	docs, err := os.ReadFile("../../docs/JOBS.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n# (examples/jobs/[^\n]+)\n(.*?)```").FindAllSubmatch(docs, -1)
	quoted := map[string]string{}
	for _, b := range blocks {
		quoted[filepath.Base(string(b[1]))] = string(b[2])
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			req, err := parseJobFile(bytes.NewReader(data), f)
			if err != nil {
				t.Fatal(err)
			}
			if req.Resources.GPUs == 0 || len(req.Command) == 0 || req.Priority == "" || req.Model == nil {
				t.Errorf("example is missing essentials: %+v", req)
			}
			// The API accepts what the file turns into.
			body, _ := json.Marshal(req)
			if _, err := api.DecodeSubmitRequest(bytes.NewReader(body)); err != nil {
				t.Errorf("API rejects the parsed example: %v", err)
			}
			doc, ok := quoted[filepath.Base(f)]
			if !ok {
				t.Fatalf("docs/JOBS.md does not quote %s", f)
			}
			if !strings.Contains(string(data), doc) {
				t.Errorf("docs/JOBS.md quotes %s differently:\n%s", f, doc)
			}
		})
	}
}

// maxErrorBytes bounds a parser's error: it quotes at most about
// gpufleet.QuoteLimit bytes of its input, plus its own words.
const maxErrorBytes = 2048

func FuzzParseJobFile(f *testing.F) {
	for _, path := range []string{"../../examples/jobs/train-gang.yaml", "../../examples/jobs/inference-service.yaml", "../../examples/jobs/notebook-mig.yaml"} {
		if data, err := os.ReadFile(path); err == nil {
			f.Add("job.yaml", string(data))
		}
	}
	for _, s := range []string{
		`{"resources":{"gpus":1,"gpu_memory_min_bytes":"80GiB"},"time_limit":3600}`,
		"a: &a [*a]\n", "resources: {gpus: 0x10}\n", "env: {A: 1e3}\n", "{\"model\":{\"config\":{\"a\":[1,{\"b\":null}]}}}",
		"time_limit: -1\n", "resources:\n  gpu_memory_min: 1e30TB\n", "name: [", "\ufeff{}",
	} {
		f.Add("job.yaml", s)
		f.Add("job.json", s)
	}
	f.Fuzz(func(t *testing.T, name, in string) {
		req, err := parseJobFile(strings.NewReader(in), name)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			if len(err.Error()) > maxErrorBytes {
				t.Fatalf("a %d-byte error: it quotes its input whole", len(err.Error()))
			}
			return
		}
		// What parses is a valid API request, and parsing its JSON gives it back.
		body, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := api.DecodeSubmitRequest(bytes.NewReader(body)); err != nil {
			t.Fatalf("API rejects %s: %v", body, err)
		}
		again, err := parseJobFile(bytes.NewReader(body), "again.json")
		if err != nil {
			t.Fatalf("re-parsing %s: %v", body, err)
		}
		body2, _ := json.Marshal(again)
		if !bytes.Equal(body, body2) {
			t.Fatalf("round trip changed the request:\n%s\n%s", body, body2)
		}
	})
}
