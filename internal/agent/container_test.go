package agent

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

func TestContainerCommand(t *testing.T) {
	podman := Engine{Runtime: RuntimePodman, Path: "/usr/bin/podman", OCIRuntime: "/usr/sbin/runc"}
	docker := Engine{Runtime: RuntimeDocker, Path: "/usr/bin/docker"}
	as := api.Assignment{AttemptID: "a-1", JobID: "j-1", Team: "team-a", Command: []string{"torchrun", "--nproc-per-node", "2", "train.py"},
		Workdir: "/work", NNodes: 2, Launch: gpufleet.Launch{Image: "nvcr.io/nvidia/pytorch:24.10-py3", ShmSize: 16 << 30,
			Mounts: []gpufleet.Mount{{Source: "/datasets", Target: "/data"}, {Source: "/scratch", Target: "/out", ReadWrite: true}}}}
	o := containerOpts{Env: []string{"A=1", "CUDA_VISIBLE_DEVICES=GPU-1"}, Devices: []string{"nvidia.com/gpu=GPU-1"},
		Ulimits: []string{"memlock=-1:-1"}, CPUMax: "400000 100000", Memory: 1 << 30, AuthFile: "/d/auth/config.json"}
	cs := containerCommand(podman, as, o)
	run := strings.Join(cs.Run, " ")
	for _, want := range []string{
		"/usr/bin/podman --runtime /usr/sbin/runc run --name gpufleet-a-1 --rm --init --sig-proxy=true --pull never",
		"--label gpufleet.attempt=a-1 --label gpufleet.job=j-1 --label gpufleet.team=team-a",
		"--security-opt no-new-privileges", "--env A=1 --env CUDA_VISIBLE_DEVICES=GPU-1", "--workdir /work",
		"--device nvidia.com/gpu=GPU-1", "--mount type=bind,source=/datasets,target=/data,readonly",
		"--mount type=bind,source=/scratch,target=/out --shm-size 17179869184b", "--network host",
		"--ulimit memlock=-1:-1 --cpus 4 --memory 1073741824b",
		"--entrypoint torchrun nvcr.io/nvidia/pytorch:24.10-py3 --nproc-per-node 2 train.py",
	} {
		if !strings.Contains(run, want) {
			t.Errorf("podman run lacks %q:\n%s", want, run)
		}
	}
	if strings.Contains(run, "--privileged") {
		t.Error("never --privileged")
	}
	if got := strings.Join(cs.Pull, " "); got != "/usr/bin/podman --runtime /usr/sbin/runc pull --authfile /d/auth/config.json nvcr.io/nvidia/pytorch:24.10-py3" {
		t.Errorf("pull: %s", got)
	}
	if got := strings.Join(cs.Remove, " "); got != "/usr/bin/podman --runtime /usr/sbin/runc rm --force --time 0 --ignore gpufleet-a-1" {
		t.Errorf("remove: %s", got)
	}
	if cs.Policy != gpufleet.PullIfNotPresent {
		t.Errorf("policy %q, want the default if-not-present", cs.Policy)
	}
	ds := containerCommand(docker, as, o)
	if got := strings.Join(ds.Pull, " "); got != "/usr/bin/docker --config /d/auth pull nvcr.io/nvidia/pytorch:24.10-py3" {
		t.Errorf("docker pull: %s", got)
	}
	if got := strings.Join(ds.Exists, " "); got != "/usr/bin/docker image inspect --format {{.Id}} nvcr.io/nvidia/pytorch:24.10-py3" {
		t.Errorf("docker exists: %s", got)
	}
	as.NNodes = 1
	if run := strings.Join(containerCommand(podman, as, containerOpts{}).Run, " "); strings.Contains(run, "--network host") {
		t.Error("a single-node job without host_network keeps its own network")
	}
}

func TestContainerEnv(t *testing.T) {
	got := containerEnv([]string{"PATH=/usr/bin", "HOME=/x", "A=1", "USER=u", "CUDA_VISIBLE_DEVICES=GPU-1", "PWD=/w", "LANG=C"})
	if !slices.Equal(got, []string{"A=1", "CUDA_VISIBLE_DEVICES=GPU-1"}) {
		t.Errorf("containerEnv = %v: the image keeps its own PATH, HOME and user", got)
	}
}

func TestUIDRange(t *testing.T) {
	r, err := ParseUIDRange("2000-2002")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "0-10", "999-2000", "5-3", "a-b", "2000", "1000-4294967295"} {
		if _, err := ParseUIDRange(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
	used := map[uint32]bool{}
	var got []uint32
	hint := uint32(0)
	for range 3 {
		id, ok := pickUID(r, used, hint)
		if !ok {
			t.Fatal("range exhausted early")
		}
		used[id], hint = true, id
		got = append(got, id)
	}
	if !slices.Equal(got, []uint32{2000, 2001, 2002}) {
		t.Errorf("picked %v", got)
	}
	if _, ok := pickUID(r, used, hint); ok {
		t.Error("every uid is held: want none")
	}
	delete(used, 2000)
	if id, _ := pickUID(r, used, 2002); id != 2000 {
		t.Errorf("after 2002 comes 2000 (wraps), got %d", id)
	}
	delete(used, 2001)
	if id, _ := pickUID(r, used, 2000); id != 2001 {
		t.Errorf("a freed uid is not reused at once when another is free: got %d", id)
	}
}

// TestContainerDevices: CDI names when the engine reads the specs itself,
// the specs' device nodes when only the agent does, the nodes under the
// device root with no spec; always only the assigned GPUs.
func TestContainerDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	dir := t.TempDir()
	devRoot, cdi := filepath.Join(dir, "dev"), filepath.Join(dir, "cdi")
	devs := []gpu.Device{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}, {Index: 2, UUID: "GPU-2", MIG: []gpu.MIGInstance{{UUID: "MIG-2a"}}}}
	if err := MakeSimDevices(devRoot, devs); err != nil {
		t.Fatal(err)
	}
	if err := WriteSimCDISpec(cdi, devRoot, devs); err != nil {
		t.Fatal(err)
	}
	reg, err := loadCDI([]string{filepath.Join(dir, "none"), cdi})
	if err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{"GPU-0": 0, "GPU-1": 1, "GPU-2": 2, "MIG-2a": 2}
	got := containerDevices(reg, []string{"GPU-1"}, idx, devRoot, false)
	want := []string{devRoot + "/nvidia1:/dev/nvidia1", devRoot + "/nvidiactl:/dev/nvidiactl", devRoot + "/nvidia-modeset:/dev/nvidia-modeset", devRoot + "/nvidia-uvm:/dev/nvidia-uvm"}
	if !slices.Equal(got, want) {
		t.Errorf("from the agent's spec: %v, want %v", got, want)
	}
	if got := containerDevices(reg, []string{"MIG-2a"}, idx, devRoot, true); len(got) == 0 || got[0] != devRoot+"/nvidia2:/dev/nvidia2" {
		t.Errorf("a MIG instance reaches its GPU's node: %v", got)
	}
	// As if the spec were in /etc/cdi: CDI names, the engine resolves them.
	for name := range reg.dir {
		reg.dir[name] = "/etc/cdi"
	}
	if got := containerDevices(reg, []string{"GPU-0", "GPU-2"}, idx, devRoot, false); !slices.Equal(got, []string{"nvidia.com/gpu=GPU-0", "nvidia.com/gpu=GPU-2"}) {
		t.Errorf("native CDI: %v", got)
	}
	// No spec: the device root's nodes.
	got = containerDevices(nil, []string{"GPU-0"}, idx, devRoot, false)
	if len(got) != 4 || got[0] != devRoot+"/nvidia0:/dev/nvidia0" || slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "nvidia1") }) {
		t.Errorf("without CDI: %v", got)
	}
}

func TestWriteRegistryAuth(t *testing.T) {
	dir := t.TempDir()
	if err := writeRegistryAuth(dir, api.RegistryAuth{Registry: "nvcr.io", Username: "$oauthtoken", Password: "s3cr3t"}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, authDir, authFile)
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("auth file %v %v, want 0600", fi, err)
	}
	var cfg struct {
		Auths map[string]struct{ Auth string } `json:"auths"`
	}
	data, _ := os.ReadFile(p)
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if b, _ := base64.StdEncoding.DecodeString(cfg.Auths["nvcr.io"].Auth); string(b) != "$oauthtoken:s3cr3t" {
		t.Errorf("auth %q", b)
	}
	if s := (api.RegistryAuth{Registry: "nvcr.io", Username: "u", Password: "s3cr3t"}).String(); strings.Contains(s, "s3cr3t") {
		t.Errorf("String() shows the password: %s", s)
	}
}

// TestRunnerKeepsNoPasswordAndReportsPulls: a start's registry login goes
// to the attempt's 0600 file, not to state.json; an image pull's progress
// is the starting attempt's reason, and its start and end are events the
// reports carry until delivered.
func TestRunnerKeepsNoPasswordAndReportsPulls(t *testing.T) {
	data := t.TempDir()
	now := time.Unix(1000, 0)
	r := testRunner(t, data, func() time.Time { return now })
	r.Start(api.Assignment{AttemptID: "a-1", JobID: "j-1", GPUs: []string{"GPU-0"}, Command: []string{"true"},
		Launch: gpufleet.Launch{Image: "nvcr.io/x:1"}, RegistryAuth: &api.RegistryAuth{Registry: "nvcr.io", Username: "u", Password: "s3cr3t"}})
	state, _ := os.ReadFile(filepath.Join(data, "state.json"))
	if strings.Contains(string(state), "s3cr3t") {
		t.Fatal("the registry password is in state.json")
	}
	if _, err := os.Stat(filepath.Join(data, "attempts", "a-1", authDir, authFile)); err != nil {
		t.Fatalf("no auth file: %v", err)
	}
	// This runner has no engine: the attempt fails (a real agent would run
	// it). Its pull progress is read the same way; check it on its own.
	r.mu.Lock()
	a := &attempt{As: api.Assignment{AttemptID: "a-2", Launch: gpufleet.Launch{Image: "nvcr.io/x:1"}}, Launched: true, State: gpufleet.AttemptStarting}
	r.attempts["a-2"] = a
	dir := r.attemptDir("a-2")
	os.MkdirAll(dir, 0o755)
	start := now.Add(-3 * time.Second)
	writeJSONAtomic(filepath.Join(dir, pullFileName), pullRecord{Image: "nvcr.io/x:1", State: "pulling", StartedAt: start, Layers: 2}, 0o644)
	r.pullProgress(a, dir)
	if a.Reason != "pulling image nvcr.io/x:1: 3s, 2 layers so far" || len(a.Events) != 1 || a.Events[0].Detail != "pulling image nvcr.io/x:1" {
		t.Errorf("while pulling: reason %q, events %+v", a.Reason, a.Events)
	}
	end := now
	writeJSONAtomic(filepath.Join(dir, pullFileName), pullRecord{Image: "nvcr.io/x:1", State: "pulled", StartedAt: start, FinishedAt: &end, Layers: 5}, 0o644)
	r.pullProgress(a, dir)
	r.pullProgress(a, dir) // once per change
	if len(a.Events) != 2 || a.Events[1].Detail != "pulled image nvcr.io/x:1 in 3s (5 layers)" || a.Events[1].Kind != api.EventImagePull {
		t.Errorf("after the pull: %+v", a.Events)
	}
	r.mu.Unlock()
	var rep api.AttemptReport
	for _, x := range r.Reports() {
		if x.AttemptID == "a-2" {
			rep = x
		}
	}
	if len(rep.Events) != 2 {
		t.Fatalf("report events %+v", rep.Events)
	}
	r.Delivered([]api.AttemptReport{rep})
	for _, x := range r.Reports() {
		if x.AttemptID == "a-2" && len(x.Events) != 0 {
			t.Errorf("delivered events are sent again: %+v", x.Events)
		}
	}
}

func TestOwnCgroupV2(t *testing.T) {
	cases := map[string]string{
		"0::/system.slice/gpufleet-agent.service\n":                          "/system.slice/gpufleet-agent.service",
		"12:devices:/x\n1:name=systemd:/y\n0::/system.slice/a.service/agent": "/system.slice/a.service/agent",
		"0::/\n":              "/",
		"4:memory:/only-v1\n": "",
	}
	for in, want := range cases {
		got, ok := ownCgroupV2([]byte(in))
		if got != want || ok != (want != "") {
			t.Errorf("ownCgroupV2(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestKeptUnderTmp(t *testing.T) {
	base, err := os.MkdirTemp("/tmp", "gpufleet-keep-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	scripts := filepath.Join(base, "scripts")
	os.MkdirAll(scripts, 0o755)
	dev := filepath.Join(base, "dev")
	os.MkdirAll(dev, 0o755)
	as := api.Assignment{Command: []string{filepath.Join(scripts, "run.sh"), "x"}, Workdir: base}
	got := keptUnderTmp(dev, as)
	if !slices.Equal(got, []string{dev, base, scripts}) {
		t.Errorf("kept %v", got)
	}
	as = api.Assignment{Command: []string{"sh", "-c", "true"}, Workdir: "/srv/work"}
	if got := keptUnderTmp("/dev", as); len(got) != 0 {
		t.Errorf("nothing under /tmp to keep, got %v", got)
	}
	if got := keptUnderTmp(filepath.Join(base, "missing"), api.Assignment{Command: []string{"true"}}); len(got) != 0 {
		t.Errorf("a directory that does not exist is not kept: %v", got)
	}
}
