package gpufleet_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
)

func TestJobRequestValidate(t *testing.T) {
	ok := func() gpufleet.JobRequest {
		return gpufleet.JobRequest{Command: []string{"python", "train.py"}, Resources: gpufleet.Resources{GPUs: 8}}
	}
	big := strings.Repeat("x", 300<<10)
	tests := map[string]struct {
		edit    func(r *gpufleet.JobRequest)
		wantErr string // empty: valid
	}{
		"plain": {edit: func(*gpufleet.JobRequest) {}},
		"model sizes the gpus": {edit: func(r *gpufleet.JobRequest) {
			r.Resources.GPUs, r.Model = 0, &gpufleet.ModelRequest{Name: "llama-3.1-8b"}
		}},
		"multi-line script":         {edit: func(r *gpufleet.JobRequest) { r.Command = []string{"sh", "-c", "set -e\n\techo hi\r\n"} }},
		"whole fleet":               {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUs = gpufleet.MaxFleetGPUs }},
		"no gpus":                   {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUs = 0 }, wantErr: "resources.gpus 0: expected 1 to 524288"},
		"2^31 gpus":                 {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUs = 1 << 31 }, wantErr: "resources.gpus 2147483648"},
		"2^32 gpus":                 {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUs = 1 << 32 }, wantErr: "resources.gpus 4294967296"},
		"negative gpus":             {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUs = -1 }, wantErr: "resources.gpus -1"},
		"model with negative gpus":  {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUs, r.Model = -1, &gpufleet.ModelRequest{Name: "m"} }, wantErr: "resources.gpus -1"},
		"more nodes than gpus":      {edit: func(r *gpufleet.JobRequest) { r.Resources.Nodes = 9 }, wantErr: "resources.nodes 9: expected 0 to 8"},
		"nodes not a divisor":       {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUs, r.Resources.Nodes = 6, 4 }, wantErr: "divisor"},
		"shared gang":               {edit: func(r *gpufleet.JobRequest) { r.Resources.Nodes, r.Resources.Sharing = 2, mig("1g.18gb") }, wantErr: "cannot span nodes"},
		"memory beyond any card":    {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUMemoryMinBytes = 1 << 50 }, wantErr: "resources.gpu_memory_min_bytes"},
		"negative memory":           {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUMemoryMinBytes = -1 }, wantErr: "resources.gpu_memory_min_bytes -1"},
		"bad capability":            {edit: func(r *gpufleet.JobRequest) { r.Resources.MinComputeCapability.Major = 100 }, wantErr: "resources.min_compute_capability"},
		"bad precision":             {edit: func(r *gpufleet.JobRequest) { r.Resources.Precision = "fp12" }, wantErr: `resources.precision "fp12"`},
		"bad interconnect":          {edit: func(r *gpufleet.JobRequest) { r.Resources.Interconnect = "pcie" }, wantErr: `resources.interconnect "pcie"`},
		"bad sharing built in code": {edit: func(r *gpufleet.JobRequest) { r.Resources.Sharing.Kind = "vgpu" }, wantErr: "resources.sharing"},
		"bad fraction built in code": {edit: func(r *gpufleet.JobRequest) {
			r.Resources.Sharing = gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 3}
		}, wantErr: "resources.sharing"},
		"bad preference":             {edit: func(r *gpufleet.JobRequest) { r.Resources.Prefer = "greenest" }, wantErr: `resources.prefer "greenest"`},
		"work counter":               {edit: func(r *gpufleet.JobRequest) { r.Work = &gpufleet.WorkCounter{Metric: `tokens=(\d+)`, Unit: "tokens"} }},
		"work without a group":       {edit: func(r *gpufleet.JobRequest) { r.Work = &gpufleet.WorkCounter{Metric: `tokens=\d+`} }, wantErr: "work.metric"},
		"work that does not compile": {edit: func(r *gpufleet.JobRequest) { r.Work = &gpufleet.WorkCounter{Metric: `tokens=(\d+`} }, wantErr: "work.metric"},
		"work unit with spaces":      {edit: func(r *gpufleet.JobRequest) { r.Work = &gpufleet.WorkCounter{Metric: `(\d+)`, Unit: "my tokens"} }, wantErr: `work.unit "my tokens"`},
		"huge work metric":           {edit: func(r *gpufleet.JobRequest) { r.Work = &gpufleet.WorkCounter{Metric: "(" + big + ")"} }, wantErr: "work.metric"},
		"joules per unit": {edit: func(r *gpufleet.JobRequest) {
			r.Resources.JoulesPerUnit = map[string]float64{"l4": 0.9, "h100-sxm-80gb": 0.3}
		}},
		"NaN joules":                {edit: func(r *gpufleet.JobRequest) { r.Resources.JoulesPerUnit = map[string]float64{"l4": math.NaN()} }, wantErr: `resources.joules_per_unit["l4"] NaN`},
		"zero joules":               {edit: func(r *gpufleet.JobRequest) { r.Resources.JoulesPerUnit = map[string]float64{"l4": 0} }, wantErr: `resources.joules_per_unit["l4"] 0`},
		"joules for no model":       {edit: func(r *gpufleet.JobRequest) { r.Resources.JoulesPerUnit = map[string]float64{" ": 1} }, wantErr: "resources.joules_per_unit"},
		"too many models":           {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUModels = make([]string, 65) }, wantErr: "resources.gpu_models: 65 entries"},
		"empty model name":          {edit: func(r *gpufleet.JobRequest) { r.Resources.GPUModels = []string{" "} }, wantErr: "resources.gpu_models[0]: empty"},
		"selector with NUL":         {edit: func(r *gpufleet.JobRequest) { r.Resources.NodeSelector = map[string]string{"rack": "r1\x00"} }, wantErr: "NUL"},
		"selector empty key":        {edit: func(r *gpufleet.JobRequest) { r.Resources.NodeSelector = map[string]string{"": "x"} }, wantErr: "empty label name"},
		"NaN cpus":                  {edit: func(r *gpufleet.JobRequest) { r.Resources.CPUs = math.NaN() }, wantErr: "resources.cpus NaN"},
		"too many cpus":             {edit: func(r *gpufleet.JobRequest) { r.Resources.CPUs = 5000 }, wantErr: "resources.cpus 5000"},
		"tiny host memory":          {edit: func(r *gpufleet.JobRequest) { r.Resources.MemoryBytes = 100 }, wantErr: "resources.memory_bytes 100"},
		"no command":                {edit: func(r *gpufleet.JobRequest) { r.Command = nil }, wantErr: "command: required"},
		"blank program":             {edit: func(r *gpufleet.JobRequest) { r.Command = []string{" "} }, wantErr: "command: required"},
		"NUL in command":            {edit: func(r *gpufleet.JobRequest) { r.Command = []string{"sh", "a\x00b"} }, wantErr: `command[1] "a\x00b": NUL at byte 1`},
		"escape in command":         {edit: func(r *gpufleet.JobRequest) { r.Command = []string{"sh", "\x1b[2J"} }, wantErr: "command[1]"},
		"huge command":              {edit: func(r *gpufleet.JobRequest) { r.Command = []string{"sh", big} }, wantErr: "command: more than 262144 bytes"},
		"many arguments":            {edit: func(r *gpufleet.JobRequest) { r.Command = make([]string, 5000); r.Command[0] = "x" }, wantErr: "command: 5000 arguments"},
		"huge env key":              {edit: func(r *gpufleet.JobRequest) { r.Env = map[string]string{strings.Repeat("K", 900): "v"} }, wantErr: "expected a variable name"},
		"huge env key quoted short": {edit: func(r *gpufleet.JobRequest) { r.Env = map[string]string{strings.Repeat("K", 900): "v"} }, wantErr: "(900 bytes)"},
		"huge env":                  {edit: func(r *gpufleet.JobRequest) { r.Env = map[string]string{"A": big} }, wantErr: "env: more than 262144 bytes"},
		"NUL in env":                {edit: func(r *gpufleet.JobRequest) { r.Env = map[string]string{"A": "\x00"} }, wantErr: "env A"},
		"reserved env":              {edit: func(r *gpufleet.JobRequest) { r.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "0"} }, wantErr: "set by gpufleet"},
		"gpufleet env":              {edit: func(r *gpufleet.JobRequest) { r.Env = map[string]string{"GPUFLEET_JOB_ID": "j"} }, wantErr: "set by gpufleet"},
		"bad name":                  {edit: func(r *gpufleet.JobRequest) { r.Name = "Train" }, wantErr: `name "Train"`},
		"long name":                 {edit: func(r *gpufleet.JobRequest) { r.Name = strings.Repeat("a", 64) }, wantErr: "name"},
		"bad team":                  {edit: func(r *gpufleet.JobRequest) { r.Team = "a b" }, wantErr: `team "a b"`},
		"bad priority":              {edit: func(r *gpufleet.JobRequest) { r.Priority = "urgent" }, wantErr: `priority "urgent"`},
		"NUL in request id":         {edit: func(r *gpufleet.JobRequest) { r.RequestID = "r\x00" }, wantErr: "request_id"},
		"long request id":           {edit: func(r *gpufleet.JobRequest) { r.RequestID = strings.Repeat("r", 129) }, wantErr: "request_id: 129 bytes"},
		"relative workdir":          {edit: func(r *gpufleet.JobRequest) { r.Workdir = "../etc" }, wantErr: "clean absolute path"},
		"unclean workdir":           {edit: func(r *gpufleet.JobRequest) { r.Workdir = "/a/../b" }, wantErr: "clean absolute path"},
		"year-long limit":           {edit: func(r *gpufleet.JobRequest) { r.TimeLimit = gpufleet.Duration(400 * 24 * time.Hour) }, wantErr: "time_limit"},
		"negative estimate":         {edit: func(r *gpufleet.JobRequest) { r.Estimate = -1 }, wantErr: "estimate"},
		"two-day grace":             {edit: func(r *gpufleet.JobRequest) { r.Grace = gpufleet.Duration(48 * time.Hour) }, wantErr: "grace"},
		"many retries":              {edit: func(r *gpufleet.JobRequest) { r.Retries = 101 }, wantErr: "retries 101: expected 0 to 100"},
		"bad sim load":              {edit: func(r *gpufleet.JobRequest) { r.SimLoad = "heavy" }, wantErr: `sim_load "heavy"`},
		"model batch":               {edit: func(r *gpufleet.JobRequest) { r.Model = &gpufleet.ModelRequest{Name: "m", Batch: -1} }, wantErr: "model.batch -1"},
		"model tp":                  {edit: func(r *gpufleet.JobRequest) { r.Model = &gpufleet.ModelRequest{Name: "m", TP: 1 << 20} }, wantErr: "model.tp"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := ok()
			tc.edit(&r)
			err := r.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("valid request refused: %v", err)
			case tc.wantErr == "":
			case !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %v, want ErrInvalid containing %q", err, tc.wantErr)
			case len(err.Error()) > 2*gpufleet.QuoteLimit+200:
				t.Fatalf("error of %d bytes quotes too much input", len(err.Error()))
			}
		})
	}
}

func mig(p string) gpufleet.Sharing { return gpufleet.Sharing{Kind: gpufleet.MIG, Profile: p} }

func TestTeamValidate(t *testing.T) {
	ok := gpufleet.Team{Name: "team-a", Quota: map[string]int{"h100-sxm-80gb": 16}, BorrowingLimit: -1, Weight: 1}
	tests := map[string]struct {
		edit    func(t *gpufleet.Team)
		wantErr string
	}{
		"valid":           {edit: func(*gpufleet.Team) {}},
		"huge weight":     {edit: func(t *gpufleet.Team) { t.Weight = 1e300 }, wantErr: "weight"},
		"zero weight":     {edit: func(t *gpufleet.Team) { t.Weight = 0 }, wantErr: "weight"},
		"NaN weight":      {edit: func(t *gpufleet.Team) { t.Weight = math.NaN() }, wantErr: "weight"},
		"negative quota":  {edit: func(t *gpufleet.Team) { t.Quota = map[string]int{"l4": -1} }, wantErr: "quota l4 -1"},
		"huge quota":      {edit: func(t *gpufleet.Team) { t.Quota = map[string]int{"l4": 1 << 40} }, wantErr: "quota l4"},
		"huge borrowing":  {edit: func(t *gpufleet.Team) { t.BorrowingLimit = 1 << 40 }, wantErr: "borrowing_limit"},
		"below -1":        {edit: func(t *gpufleet.Team) { t.BorrowingLimit = -2 }, wantErr: "borrowing_limit -2"},
		"bad name":        {edit: func(t *gpufleet.Team) { t.Name = strings.Repeat("x", 900) }, wantErr: "(900 bytes)"},
		"class with NUL":  {edit: func(t *gpufleet.Team) { t.Quota = map[string]int{"l4\x00": 1} }, wantErr: "NUL"},
		"too many quotas": {edit: func(t *gpufleet.Team) { t.Quota = manyQuotas(65) }, wantErr: "65 classes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			team := ok
			tc.edit(&team)
			err := team.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want ErrInvalid containing %q", err, tc.wantErr)
			}
		})
	}
}

func manyQuotas(n int) map[string]int {
	m := map[string]int{}
	for i := range n {
		m[strings.Repeat("c", i+1)] = 1
	}
	return m
}

func TestParseWorkCount(t *testing.T) {
	for in, want := range map[string]float64{"12": 12, "1,200": 1200, "1_000_000": 1e6, "2.5e3": 2500, " 7 ": 7, "0": 0} {
		if got, err := gpufleet.ParseWorkCount(in); err != nil || got != want {
			t.Errorf("ParseWorkCount(%q) = %g, %v; want %g", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "NaN", "Inf", "1e400", "12abc", ",", "0x1p3"} {
		if v, err := gpufleet.ParseWorkCount(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseWorkCount(%q) = %g, %v; want ErrInvalid", in, v, err)
		}
	}
}
