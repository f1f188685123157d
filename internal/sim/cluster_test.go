package sim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

func TestPhillyClusterYAML(t *testing.T) {
	f, err := os.Open(filepath.Join(traceDir, "clusters/philly.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spec, err := ParseClusterSpec(f)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := BuildCluster(spec, catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, n := range cl.Nodes {
		for _, g := range n.GPUs {
			count[g.Model]++
		}
	}
	want := map[string]int{"v100-sxm2-16gb": 192, "p100-pcie-16gb": 128, "k80": 64}
	if diff := cmp.Diff(want, count); diff != "" {
		t.Errorf("GPUs per model (-want +got):\n%s", diff)
	}
	if g := cl.Nodes[0].GPUs[7]; g.NVLinkDomain != "v100-000-nvl0" || cl.Nodes[5].Rack != "v100-rack01" {
		t.Errorf("topology: gpu %+v rack %q", g, cl.Nodes[5].Rack)
	}
	if cl.Nodes[30].GPUs[0].NVLinkDomain != "" {
		t.Errorf("P100 PCIe GPUs must have no NVLink domain")
	}
}

func TestClusterSpecYAMLMatchesJSON(t *testing.T) {
	yaml := `# a comment
node_groups:
- name: v100   # trailing comment
  count: 2
  gpu: "v100-sxm2-16gb"
  gpus_per_node: 8
  nvlink_domain_gpus: 8
teams:
  - name: vc1
    quota: {v100-sxm2-16gb: 8}
    weight: 2
  - name: 'vc2'
    borrowing_limit: 0
`
	js := `{"node_groups": [{"name": "v100", "count": 2, "gpu": "v100-sxm2-16gb", "gpus_per_node": 8, "nvlink_domain_gpus": 8}],
 "teams": [{"name": "vc1", "quota": {"v100-sxm2-16gb": 8}, "weight": 2}, {"name": "vc2", "borrowing_limit": 0}]}`
	a, err := ParseClusterSpec(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseClusterSpec(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, a); diff != "" {
		t.Errorf("YAML and JSON specs differ (-json +yaml):\n%s", diff)
	}
	cl, err := BuildCluster(a, catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Teams) != 2 || cl.Teams[0].Weight != 2 || cl.Teams[1].BorrowingLimit != 0 || cl.Teams[1].Weight != 1 || cl.Teams[0].BorrowingLimit != -1 {
		t.Errorf("teams = %+v", cl.Teams)
	}
}

func TestClusterSpecErrors(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"unknown field":  {in: "node_groups:\n  - name: a\n    count: 1\n    gpu: t4\n    gpus_per_node: 1\n    colour: red\n", want: "colour"},
		"unknown gpu":    {in: `{"node_groups": [{"name": "a", "count": 1, "gpu": "v99", "gpus_per_node": 1}]}`, want: "v99"},
		"bad indent":     {in: "node_groups:\n  - name: a\n      count: 1\n", want: "line 3"},
		"no node groups": {in: "teams: []\n", want: "no node_groups"},
		"zero count":     {in: `{"node_groups": [{"name": "a", "count": 0, "gpu": "t4", "gpus_per_node": 1}]}`, want: "positive"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec, err := ParseClusterSpec(strings.NewReader(tc.in))
			if err == nil {
				_, err = BuildCluster(spec, catalog.Default())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestClusterStacks reads node groups' stacks and named stacks from YAML,
// and refuses an unknown component or a version that does not parse.
func TestClusterStacks(t *testing.T) {
	spec, err := ParseClusterSpec(strings.NewReader(`node_groups:
  - name: h
    count: 2
    gpu: h100-sxm-80gb
    gpus_per_node: 8
    stack: {driver: "550.54.15", cuda: "12.4"}
stacks:
  prod-550: {driver: "550.54.15"}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := BuildCluster(spec, catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if c.Nodes[1].Stack[gpufleet.StackCUDA] != "12.4" || c.Stacks["prod-550"][gpufleet.StackDriver] != "550.54.15" {
		t.Fatalf("nodes %+v, stacks %+v", c.Nodes[1].Stack, c.Stacks)
	}
	for _, bad := range []string{`{"node_groups": [{"name": "h", "count": 1, "gpu": "l4", "gpus_per_node": 1, "stack": {"pytorch": "2.5"}}]}`,
		`{"node_groups": [{"name": "h", "count": 1, "gpu": "l4", "gpus_per_node": 1}], "stacks": {"p": {"driver": "five"}}}`} {
		spec, err := ParseClusterSpec(strings.NewReader(bad))
		if err == nil {
			_, err = BuildCluster(spec, catalog.Default())
		}
		if !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("%s: %v, want an invalid-input error", bad, err)
		}
	}
}
