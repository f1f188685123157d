package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
)

// run executes the CLI in-process and returns stdout, stderr and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

func TestVersion(t *testing.T) {
	out, _, code := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "gpufleet v") {
		t.Fatalf("version: code %d, out %q", code, out)
	}
	if flag, _, code := run(t, "--version"); code != 0 || flag != out || !strings.HasPrefix(flag, "gpufleet "+gpufleet.Version+" (") {
		t.Errorf("--version: code %d, %q; version: %q", code, flag, out)
	}
	out, _, _ = run(t, "version", "-o", "json")
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil || v["version"] == "" {
		t.Fatalf("version -o json: %v %q", err, out)
	}
}

func TestCatalogJSONHasContractKeys(t *testing.T) {
	out, errOut, code := run(t, "catalog", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var gpus []map[string]any
	if err := json.Unmarshal([]byte(out), &gpus); err != nil {
		t.Fatal(err)
	}
	if len(gpus) < 30 {
		t.Fatalf("got %d GPUs, want the 30 of the catalog", len(gpus))
	}
	keys := []string{"id", "name", "vendor", "architecture", "memory_bytes", "memory_bandwidth_bytes_per_s",
		"peak_flops", "tdp_watts", "interconnect", "interconnect_bandwidth_bytes_per_s", "price_per_hour_usd", "source"}
	for _, g := range gpus {
		for _, k := range keys {
			if _, ok := g[k]; !ok {
				t.Errorf("%v: missing key %q", g["id"], k)
			}
		}
	}
	// A precision a card lacks is null, never 0.
	for _, g := range gpus {
		if g["id"] == "v100-sxm2-16gb" {
			pf := g["peak_flops"].(map[string]any)
			if v, ok := pf["bf16"]; !ok || v != nil {
				t.Errorf("v100 bf16 = %v (present %v), want null", v, ok)
			}
		}
	}
}

func TestCatalogTable(t *testing.T) {
	out, _, code := run(t, "catalog")
	if code != 0 {
		t.Fatal(code)
	}
	for _, want := range []string{"ID", "MEMORY", "BANDWIDTH", "h100-sxm-80gb", "80 GiB", "3.35 TB/s", "989.5", "k80"} {
		if !strings.Contains(out, want) {
			t.Errorf("catalog table lacks %q", want)
		}
	}
}

func TestCatalogShow(t *testing.T) {
	tests := map[string]struct {
		args     []string
		wantCode int
		wantOut  []string
		wantErr  []string
	}{
		"by id":                  {args: []string{"catalog", "show", "h100-sxm-80gb"}, wantOut: []string{"Hopper", "mig 1g.10gb", "source"}},
		"by NVML name":           {args: []string{"catalog", "show", "NVIDIA H100 80GB HBM3"}, wantOut: []string{"h100-sxm-80gb"}},
		"unknown id suggests":    {args: []string{"catalog", "show", "h100-sxm"}, wantCode: ExitNotFound, wantErr: []string{"unknown GPU", "did you mean h100-sxm-80gb"}},
		"flags after subcommand": {args: []string{"catalog", "show", "l4", "-o", "json"}, wantOut: []string{`"id": "l4"`}},
		"flags before command":   {args: []string{"-o", "json", "catalog", "show", "l4"}, wantOut: []string{`"id": "l4"`}},
		"bad output format":      {args: []string{"catalog", "-o", "xml"}, wantCode: ExitUsage, wantErr: []string{"-o/--output", "table, wide, json, yaml, name or jsonpath=TEMPLATE"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, errOut, code := run(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.wantCode, errOut)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q: %s", w, errOut)
				}
			}
		})
	}
}

func TestCatalogOverrideFileAppliesToEveryCommand(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "prices.json")
	if err := os.WriteFile(f, []byte(`[{"id": "h200-sxm-141gb", "price_per_hour_usd": 3.5}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "catalog", "show", "h200-sxm-141gb", "--catalog", f, "-o", "json")
	if code != 0 || !strings.Contains(out, `"price_per_hour_usd": 3.5`) {
		t.Fatalf("catalog show with override: code %d, %s %s", code, out, errOut)
	}
	out, errOut, code = run(t, "--catalog", f, "plan", "--model", "llama-3.1-8b", "--gpu", "h200-sxm-141gb", "-o", "json")
	if code != 0 {
		t.Fatalf("plan with override: %s", errOut)
	}
	var p struct {
		Candidates []struct {
			Price *float64 `json:"price_per_hour_usd"`
			Cost  *float64 `json:"cost_per_million_tokens_usd"`
		}
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.Candidates[0].Price == nil || *p.Candidates[0].Price != 3.5 || p.Candidates[0].Cost == nil {
		t.Errorf("plan did not use the overridden price: %+v", p.Candidates[0])
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`[{"id": "h200-sxm-141gb", "prize": 3}]`), 0o600)
	_, errOut, code = run(t, "catalog", "--catalog", bad)
	if code == 0 || !strings.Contains(errOut, "prize") {
		t.Errorf("unknown override key: code %d, stderr %q; want an error naming it", code, errOut)
	}
}

// TestPlanJSONContract checks every key scripts rely on, in both modes.
func TestPlanJSONContract(t *testing.T) {
	candidateKeys := []string{"gpu", "gpus", "tp", "pp", "dp", "fits", "precision_native", "precision_fallback",
		"bound", "prefill_bound", "memory_per_gpu", "max_batch", "output_tokens_per_s", "time_to_first_token_s",
		"time_per_output_token_s", "training_tokens_per_s", "mfu", "step_time_s", "train_time_s", "train_cost_usd",
		"train_energy_joules", "cost_per_million_tokens_usd", "joules_per_token", "notes"}
	memKeys := []string{"weights_bytes", "kv_cache_bytes", "activations_bytes", "gradients_bytes", "optimizer_bytes",
		"overhead_bytes", "total_bytes", "capacity_bytes"}
	modelKeys := []string{"name", "params_total", "params_active", "layers", "hidden_size", "kv_cache_bytes_per_token"}
	for _, mode := range []string{"inference", "training"} {
		t.Run(mode, func(t *testing.T) {
			out, errOut, code := run(t, "plan", "--model", "llama-3.1-8b", "--mode", mode, "--gpu", "h100-sxm-80gb,l4", "-o", "json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var p map[string]any
			if err := json.Unmarshal([]byte(out), &p); err != nil {
				t.Fatal(err)
			}
			m := p["model"].(map[string]any)
			for _, k := range modelKeys {
				if _, ok := m[k]; !ok {
					t.Errorf("model lacks %q", k)
				}
			}
			for _, c := range p["candidates"].([]any) {
				cm := c.(map[string]any)
				for _, k := range candidateKeys {
					if _, ok := cm[k]; !ok {
						t.Errorf("candidate lacks %q", k)
					}
				}
				mem := cm["memory_per_gpu"].(map[string]any)
				for _, k := range memKeys {
					if _, ok := mem[k]; !ok {
						t.Errorf("memory_per_gpu lacks %q", k)
					}
				}
				if _, isList := cm["notes"].([]any); !isList && cm["notes"] != nil {
					t.Errorf("notes is %T, want an array", cm["notes"])
				}
				// Fields of the other mode are null.
				other := "training_tokens_per_s"
				if mode == "training" {
					other = "time_to_first_token_s"
				}
				if cm[other] != nil {
					t.Errorf("%s: %s = %v, want null", mode, other, cm[other])
				}
			}
			rec := p["recommendation"].(map[string]any)
			for _, k := range []string{"gpu", "gpus", "scaling", "reason"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("recommendation lacks %q", k)
				}
			}
			if s := rec["scaling"]; s != "vertical" && s != "horizontal" {
				t.Errorf("scaling = %v", s)
			}
		})
	}
}

func TestPlanErrorsNameTheField(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"no model":                {args: []string{"plan"}, wantErr: "--model: required"},
		"unknown model":           {args: []string{"plan", "--model", "llama-9"}, wantErr: "neither a file nor a built-in model"},
		"bad mode":                {args: []string{"plan", "--model", "llama-3.1-8b", "--mode", "serve"}, wantErr: "--mode \"serve\": expected inference or training"},
		"bad precision":           {args: []string{"plan", "--model", "llama-3.1-8b", "--precision", "fp3"}, wantErr: "--precision"},
		"bad batch":               {args: []string{"plan", "--model", "llama-3.1-8b", "--batch", "lots"}, wantErr: "--batch \"lots\""},
		"unknown gpu":             {args: []string{"plan", "--model", "llama-3.1-8b", "--gpu", "h100"}, wantErr: ""},
		"misspelt gpu":            {args: []string{"plan", "--model", "llama-3.1-8b", "--gpu", "h10-sxm"}, wantErr: "did you mean"},
		"tp not dividing gpus":    {args: []string{"plan", "--model", "llama-3.1-8b", "--gpus", "6", "--tp", "4"}, wantErr: "tp 4 does not divide gpus 6"},
		"zero stage out of range": {args: []string{"plan", "--model", "llama-3.1-8b", "--mode", "training", "--zero", "4"}, wantErr: "--zero \"4\""},
		"bad tokens":              {args: []string{"plan", "--model", "llama-3.1-8b", "--mode", "training", "--tokens", "many"}, wantErr: "--tokens \"many\""},
		"bad rack power":          {args: []string{"plan", "--model", "llama-3.1-8b", "--rack-power", "lots"}, wantErr: "--rack-power"},
		"negative rack cooling":   {args: []string{"plan", "--model", "llama-3.1-8b", "--rack-cooling", "-2kW"}, wantErr: "--rack-cooling"},
		"rack units":              {args: []string{"plan", "--model", "llama-3.1-8b", "--rack-units", "-1"}, wantErr: "--rack-units \"-1\""},
		"bad engine":              {args: []string{"plan", "--model", "llama-3.1-8b", "--engine", "ollama"}, wantErr: "--engine"},
		"headroom too large":      {args: []string{"plan", "--model", "llama-3.1-8b", "--memory-headroom", "95%"}, wantErr: "--memory-headroom \"95%\""},
		"headroom not a share":    {args: []string{"plan", "--model", "llama-3.1-8b", "--memory-headroom", "lots"}, wantErr: "--memory-headroom \"lots\""},
		"server without a bound":  {args: []string{"plan", "--model", "llama-3.1-8b", "--scenario", "server"}, wantErr: "--tpot-target-ms"},
		"unknown scenario":        {args: []string{"plan", "--model", "llama-3.1-8b", "--scenario", "batch"}, wantErr: "--scenario \"batch\""},
		"two tpot targets":        {args: []string{"plan", "--model", "llama-3.1-8b", "--latency-target-ms", "20", "--tpot-target-ms", "30"}, wantErr: "give one"},
		"cp for inference":        {args: []string{"plan", "--model", "llama-3.1-8b", "--cp", "2"}, wantErr: "cp 2"},
		"server scenario":         {args: []string{"plan", "--model", "llama-3.1-8b", "--scenario", "server", "--tpot-target-ms", "30", "--ttft-target-ms", "500"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, errOut, code := run(t, tc.args...)
			if tc.wantErr == "" { // "h100" is an alias and must work
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				return
			}
			if code == 0 || !strings.Contains(errOut, tc.wantErr) {
				t.Fatalf("exit %d, stderr %q; want an error containing %q", code, errOut, tc.wantErr)
			}
		})
	}
}

func TestPlanReadsConfigFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my-model")
	os.MkdirAll(dir, 0o755)
	cfg := `{"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
	  "num_key_value_heads": 4, "intermediate_size": 8192, "vocab_size": 32000, "max_position_embeddings": 4096}`
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600)
	out, errOut, code := run(t, "plan", "--model", filepath.Join(dir, "config.json"), "--gpu", "l4", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `"name": "my-model"`) {
		t.Errorf("model name should come from the directory: %s", out[:200])
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "llama"}`), 0o600)
	_, errOut, code = run(t, "plan", "--model", filepath.Join(dir, "config.json"))
	if code == 0 || !strings.Contains(errOut, "hidden_size") {
		t.Errorf("missing field: exit %d, stderr %q; want it named", code, errOut)
	}
}

func TestCompletion(t *testing.T) {
	out, _, code := run(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "gpufleet") {
		t.Fatalf("completion bash: exit %d", code)
	}
	out, _, _ = run(t, "__complete", "catalog", "show", "h1")
	if !strings.Contains(out, "h100-sxm-80gb") || !strings.Contains(out, "h200-sxm-141gb") {
		t.Errorf("completing catalog ids: %s", out)
	}
}

// FuzzFlagFile: a server's --config file never stops the command with a
// panic; what it refuses wraps ErrInvalid and quotes little of it.
func FuzzFlagFile(f *testing.F) {
	for _, s := range []string{"listen: 127.0.0.1:7080\ntick: 100ms\n", "spare: [h100-sxm-80gb=1, l4=2]\n", "heartbeat: {a: 1}\n",
		"unknown: 1\n", "- a\n- b\n", "a: &x [*x]\n", "", "tick: 99999999999999999999h\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		file, err := parseFlagFile(strings.NewReader(in), "fuzz.yaml")
		if err == nil {
			cmd := newServerCmd(&env{stdout: io.Discard, stderr: io.Discard})
			err = applyFlagValues(cmd, file, func(string) (string, bool) { return "", false }, "fuzz.yaml")
		}
		if err != nil && (!errors.Is(err, gpufleet.ErrInvalid) || len(err.Error()) > 3*gpufleet.QuoteLimit+300) {
			t.Fatalf("error %.300q (%d bytes)", err, len(err.Error()))
		}
	})
}

// FuzzClientConfig: the client's contexts file parses or is refused.
func FuzzClientConfig(f *testing.F) {
	f.Add("current: prod\ncontexts:\n  prod: {server: http://a:7080, token: gpf_x}\n")
	f.Add("current: x\n")
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := parseClientConfig(strings.NewReader(in), "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if _, ok := cfg.Contexts[cfg.Current]; cfg.Current != "" && !ok {
			t.Fatalf("current context %q accepted without its entry", cfg.Current)
		}
	})
}

func TestServerEnergyFlagsNameTheField(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "intensity.csv")
	if err := os.WriteFile(bad, []byte("hour,g_co2e_per_kwh\n2026-01-01T00:00:00Z,-3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pue", "0.9"}, "--pue 0.9"},
		{[]string{"--grid-intensity", "-1"}, "--grid-intensity -1"},
		{[]string{"--grid-intensity-file", bad}, "line 2: g_co2e_per_kwh"},
		{[]string{"--grid-intensity-file", bad + ".missing"}, "--grid-intensity-file"},
	} {
		args := append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		if _, errOut, code := run(t, args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error containing %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestPowerEnforcementFlagsAreChecked: serve's and sim's --power-caps,
// --over-budget and --over-budget-after refuse what they do not take,
// naming the flag, before anything runs.
func TestPowerEnforcementFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--power-caps", "maybe"}, "--power-caps"},
		{[]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--over-budget", "kill"}, "--over-budget"},
		{[]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--over-budget-after", "-1s"}, "--over-budget-after"},
		{[]string{"sim", "--trace", "x.csv", "--format", "csv", "--cluster", "c.yaml", "--over-budget", "kill"}, "--over-budget"},
	} {
		if _, errOut, code := run(t, tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error containing %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestPlanFacilityCheck(t *testing.T) {
	out, errOut, code := run(t, "plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--gpus", "16", "--rack-power", "17.3kW", "--rack-units", "42")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Facility check", "2 x 8 GPUs", "10.2kW", "1/1", "power", "20.4kW"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = run(t, "plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb")
	if strings.Contains(out, "Facility check") {
		t.Errorf("a plan without a rack prints the facility check:\n%s", out)
	}
}

// TestUnknownSubcommandsFail: every command that groups others refuses an
// argument that names none of them, with a non-zero exit, as the root does.
func TestUnknownSubcommandsFail(t *testing.T) {
	var groups [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, s := range c.Commands() {
			p := append(append([]string{}, path...), s.Name())
			if s.Annotations[groupAnnotation] != "" {
				groups = append(groups, p)
			}
			walk(s, p)
		}
	}
	walk(newRoot(&env{}), nil)
	if len(groups) < 2 {
		t.Fatalf("found %d command groups: %v", len(groups), groups)
	}
	for _, g := range append(groups, nil) {
		_, errOut, code := run(t, append(g, "no-such-command")...)
		if code == 0 || !strings.Contains(errOut, `unknown command "no-such-command"`) {
			t.Errorf("gpufleet %s no-such-command: exit %d, %q", strings.Join(g, " "), code, errOut)
		}
		if g != nil {
			if out, _, code := run(t, g...); code != 0 || !strings.Contains(out, "Available Commands") {
				t.Errorf("gpufleet %s: exit %d, want its help", strings.Join(g, " "), code)
			}
		}
	}
}

// TestValueCompletion: flags with a fixed vocabulary complete it, in every
// command that has them; a comma list completes its last element.
func TestValueCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "submit", "--priority", ""}, "production\ninteractive\ntraining\nbatch\n"},
		{[]string{"__complete", "submit", "--gpu-model", "l4,"}, "l4,h100-sxm-80gb\n"},
		{[]string{"__complete", "procure", "--gpu-model", ""}, "h200-sxm-141gb\n"},
		{[]string{"__complete", "submit", "--isolation", ""}, "hard\nsoft\nany\n"},
		{[]string{"__complete", "audit", "--fail-on", ""}, "high\nmedium\nlow\n"},
	} {
		out, _, code := run(t, tc.args...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want %q in\n%s", tc.args, code, tc.want, out)
		}
	}
}

// TestFlagValuesFromEnvAndFile: a repeatable flag takes every item of a
// comma-separated variable or of a --config list, one value each; the
// command line beats the environment, which beats the file.
func TestFlagValuesFromEnvAndFile(t *testing.T) {
	tests := map[string]struct {
		args   []string
		env    map[string]string
		file   string
		labels []string
		listen string
	}{
		"environment list":        {env: map[string]string{"GPUFLEET_LABEL": "rack=r1, block=b1", "GPUFLEET_LISTEN": ":9"}, labels: []string{"rack=r1", "block=b1"}, listen: ":9"},
		"file list":               {file: "label: [rack=r2, block=b2]\nlisten: ':8'\n", labels: []string{"rack=r2", "block=b2"}, listen: ":8"},
		"file scalar":             {file: "label: rack=r3\n", labels: []string{"rack=r3"}},
		"environment beats file":  {env: map[string]string{"GPUFLEET_LABEL": "rack=e"}, file: "label: [rack=f]\n", labels: []string{"rack=e"}},
		"command line beats both": {args: []string{"--label", "rack=c", "--label", "block=c"}, env: map[string]string{"GPUFLEET_LABEL": "rack=e"}, labels: []string{"rack=c", "block=c"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var labels []string
			var listen string
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			cmd.Flags().StringArrayVar(&labels, "label", nil, "")
			cmd.Flags().StringVar(&listen, "listen", "", "")
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			file, err := parseFlagFile(strings.NewReader(tc.file), "test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			if err := applyFlagValues(cmd, file, lookup, "test.yaml"); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(labels, tc.labels) || listen != tc.listen {
				t.Errorf("labels %q listen %q, want %q %q", labels, listen, tc.labels, tc.listen)
			}
		})
	}
}
