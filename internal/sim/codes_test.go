package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestReplayCodes replays, for every reason code the scheduler gives a
// user, a small trace that produces it: wait codes as jobs are told at
// submission, stop codes as stops decided, fail codes as jobs ended.
// invalid_request needs a row the validation refuses, kept with
// ReadOptions.KeepInvalid (a poison row, as the server's store may hold).
func TestReplayCodes(t *testing.T) {
	const v100 = `{"node_groups": [{"name": "n", "count": 1, "gpu": "v100-sxm2-16gb", "gpus_per_node": 8}]}`
	const quota = `{"node_groups": [{"name": "n", "count": 1, "gpu": "v100-sxm2-16gb", "gpus_per_node": 8}],
		"teams": [{"name": "a", "quota": {"v100-sxm2-16gb": 4}, "borrowing_limit": 0}, {"name": "b"}]}`
	const domains = `{"node_groups": [{"name": "n", "count": 1, "gpu": "h100-sxm-80gb", "gpus_per_node": 8, "nvlink_domain_gpus": 4}]}`
	const racked = `{"node_groups": [{"name": "n", "count": 2, "gpu": "v100-sxm2-16gb", "gpus_per_node": 8, "nodes_per_rack": 1}]}`
	const mixed = `{"node_groups": [{"name": "v", "count": 1, "gpu": "v100-sxm2-16gb", "gpus_per_node": 8},
		{"name": "k", "count": 1, "gpu": "k80", "gpus_per_node": 8}]}`
	tests := []struct {
		code, policy, cluster, trace string
		cfg                          func(*Config)
		opt                          ReadOptions
	}{
		{code: scheduler.ReasonUnplaceable, cluster: v100, trace: "id,submit_s,duration_s,gpus,gpu_model\nj,0,10,1,a100-sxm4-80gb\n"},
		{code: scheduler.ReasonQuotaExceeded, cluster: quota, trace: "id,submit_s,duration_s,gpus,team\nj,0,10,8,a\n"},
		{code: scheduler.ReasonQuota, cluster: quota, trace: "id,submit_s,duration_s,gpus,team\nj,0,100,4,a\nk,1,10,4,a\n"},
		{code: scheduler.ReasonCapacity, cluster: v100, trace: "id,submit_s,duration_s,gpus\nj,0,100,8\nk,1,10,1\n"},
		{code: scheduler.ReasonTopology, cluster: domains, trace: "id,submit_s,duration_s,gpus,interconnect\nj,0,100,3,\nk,0,100,3,\nl,1,10,2,nvlink\n"},
		{code: scheduler.ReasonOrder, policy: "fifo", cluster: v100, trace: "id,submit_s,duration_s,gpus\nj,0,100,4\nk,1,10,8\nl,2,10,1\n"},
		{code: scheduler.ReasonReservation, policy: "backfill", cluster: v100, trace: "id,submit_s,duration_s,gpus\nj,0,1000,4\nk,1,10,8\nl,2,5000,4\n"},
		{code: scheduler.ReasonPreempting, cluster: v100, trace: "id,submit_s,duration_s,gpus,priority,preemptible\nj,0,1000,8,batch,true\nk,10,10,8,production,\n"},
		{code: scheduler.ReasonCycleLimit, cluster: v100, trace: "id,submit_s,duration_s,gpus\nj,0,10,1\nk,0,10,1\n",
			cfg: func(c *Config) { c.Policy.MaxPlacementsPerCycle = 1 }},
		{code: scheduler.ReasonSlowerModel, cluster: mixed, trace: "id,submit_s,duration_s,gpus,duration_s_v100-sxm2-16gb,duration_s_k80\n" +
			"j,0,3600,8,3600,13500\nk,10,36000,1,36000,135000\n"},
		{code: string(scheduler.PreemptPriority), cluster: v100, trace: "id,submit_s,duration_s,gpus,priority,preemptible\nj,0,1000,8,batch,true\nk,10,10,8,production,\n"},
		{code: string(scheduler.PreemptReclaim), cluster: quota, trace: "id,submit_s,duration_s,gpus,team,preemptible\nj,0,10000,8,b,true\nk,10,10,4,a,\n"},
		{code: string(scheduler.PreemptStarvation), cluster: v100, trace: "id,submit_s,duration_s,gpus,preemptible\n" +
			"long,0,1000000,4,true\nwide,1,100,8,\nshort1,2,200,4,true\n",
			cfg: func(c *Config) { c.Policy.StarvationMinRun = 0 }},
		{code: string(scheduler.StopUpgrade), cluster: `{"node_groups": [{"name": "v", "count": 1, "gpu": "v100-sxm2-16gb", "gpus_per_node": 8},
			{"name": "p", "count": 1, "gpu": "p100-pcie-16gb", "gpus_per_node": 8}]}`,
			trace: "id,submit_s,duration_s,gpus,preemptible,duration_s_v100-sxm2-16gb,duration_s_p100-pcie-16gb\n" +
				"fill,0,1000,8,,1000,1250\nlong,1,36000,1,true,36000,48000\n"},
		{code: string(scheduler.StopDrain), cluster: v100, trace: "id,submit_s,duration_s,gpus\nj,0,100000,8\n",
			cfg: func(c *Config) { c.DrainMTBF, c.RepairTime = 3600, 600 }},
		{code: string(scheduler.StopTimeLimit), cluster: v100, trace: "id,submit_s,duration_s,gpus,time_limit_s\nj,0,1000,1,100\n"},
		{code: string(scheduler.StopCancel), cluster: v100, trace: "id,submit_s,duration_s,gpus,cancel_s\nj,0,1000,1,100\n"},
		{code: scheduler.ReasonRackPower, cluster: racked, trace: "id,submit_s,duration_s,gpus\nj,0,100,8\n",
			cfg: func(c *Config) { c.RackBudget = 0.5 }},
		{code: scheduler.ReasonStackMismatch, cluster: `{"node_groups": [{"name": "n", "count": 1, "gpu": "h100-sxm-80gb", "gpus_per_node": 8,
			"stack": {"driver": "535.104.05", "cuda": "12.2"}}], "stacks": {"prod": {"driver": "550.54.15"}}}`,
			trace: "id,submit_s,duration_s,gpus,stack,requires\nok,0,10,1,,cuda:>=12.2\nnew,0,10,1,,cuda:>=12.4\npinned,0,10,1,prod,\n"},
		{code: scheduler.ReasonIsolation, cluster: `{"node_groups": [{"name": "v", "count": 1, "gpu": "a100-sxm-80gb", "gpus_per_node": 8,
			"labels": {"virtualization": "vgpu:A100-80C"}}, {"name": "b", "count": 1, "gpu": "a100-sxm-80gb", "gpus_per_node": 2}]}`,
			trace: "id,submit_s,duration_s,gpus,isolation\nj,0,100,2,hard\nk,1,10,1,hard\nl,2,10,1,soft\n"},
		{code: scheduler.ReasonRuntimeMissing, cluster: `{"node_groups": [{"name": "p", "count": 1, "gpu": "a100-sxm-80gb", "gpus_per_node": 8},
			{"name": "c", "count": 1, "gpu": "h100-sxm-80gb", "gpus_per_node": 8, "labels": {"runtime": "podman"}}]}`,
			trace: "id,submit_s,duration_s,gpus,gpu_model,runtime\nok,0,10,1,h100-sxm-80gb,container\nnever,0,10,1,a100-sxm-80gb,container\nproc,0,10,1,a100-sxm-80gb,\n"},
		{code: string(scheduler.StopNodeLost), cluster: v100, trace: "id,submit_s,duration_s,gpus\nj,0,100000,8\n",
			cfg: func(c *Config) { c.NodeMTBF, c.RepairTime = 3600, 600 }},
		{code: scheduler.FailInvalid, cluster: v100, trace: "id,submit_s,duration_s,gpus,nodes\nok,0,10,1,\nbad,0,10,6,4\n",
			opt: ReadOptions{KeepInvalid: true}},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			policy := tc.policy
			if policy == "" {
				policy = "gpufleet"
			}
			pc, err := scheduler.PolicyConfig(policy)
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Policy: pc}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			tr, err := Read(strings.NewReader(tc.trace), "csv", tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(tr, mustCluster(t, tc.cluster), cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := res.Report
			if r.WaitReasons[tc.code] == 0 && r.Stops[tc.code] == 0 && r.Ended[tc.code] == 0 {
				t.Errorf("no %s: waits %v, stops %v, ended %v", tc.code, r.WaitReasons, r.Stops, r.Ended)
			}
			covered[tc.code] = true
		})
	}
	for _, c := range slices.Concat(scheduler.WaitCodes(), scheduler.StopCodes(), scheduler.FailCodes()) {
		if !covered[c] {
			t.Errorf("no replay for code %s", c)
		}
	}
}
