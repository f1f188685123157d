package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/gpufleet/gpufleet/internal/gpu"
)

// The NVIDIA driver's device nodes: /dev/nvidiaN for GPU N (major 195,
// minor N), the control nodes every CUDA process opens, and MIG's
// capability nodes (NVIDIA driver README, "Device nodes"; MIG User Guide,
// "Device nodes and capabilities").
const (
	nvidiaMajor = 195
	nvidiaCtl   = "nvidiactl" // 195:255
	nvidiaMode  = "nvidia-modeset"
	nvidiaCaps  = "nvidia-caps" // directory of MIG capability nodes
)

// controlNodes are the device nodes besides a GPU's own that CUDA opens:
// every job gets those that exist.
var controlNodes = []string{nvidiaCtl, "nvidia-uvm", "nvidia-uvm-tools", nvidiaMode}

// gpuNodes returns the device node paths under devRoot that an attempt on
// the given GPU indexes may open: each GPU's /dev/nvidiaN, the control
// nodes, and for MIG the capability nodes (all of them: the driver's
// per-instance capability minors are not read yet, docs/ISOLATION.md).
// Only nodes that exist are listed.
func gpuNodes(devRoot string, indexes []int, mig bool) []string {
	var out []string
	exists := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode()&os.ModeDevice != 0
	}
	for _, i := range slices.Compact(slices.Sorted(slices.Values(indexes))) {
		if p := filepath.Join(devRoot, "nvidia"+strconv.Itoa(i)); exists(p) {
			out = append(out, p)
		}
	}
	for _, n := range controlNodes {
		if p := filepath.Join(devRoot, n); exists(p) {
			out = append(out, p)
		}
	}
	if mig {
		caps, _ := filepath.Glob(filepath.Join(devRoot, nvidiaCaps, "nvidia-cap*"))
		for _, p := range caps {
			if exists(p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// MakeSimDevices creates device nodes for simulated GPUs under devRoot,
// as the NVIDIA driver numbers them: nvidiaN (195:N), nvidiactl (195:255),
// nvidia-modeset (195:254) and nvidia-uvm (a dynamic major, here 511:0).
// No driver serves them, so opening one fails with ENXIO, while a device
// cgroup that denies it fails the open with EPERM first: tests tell the
// two apart. It needs CAP_MKNOD (root).
func MakeSimDevices(devRoot string, devs []gpu.Device) error {
	if err := os.MkdirAll(devRoot, 0o755); err != nil {
		return err
	}
	type node struct {
		name         string
		major, minor uint32
	}
	nodes := []node{{nvidiaCtl, nvidiaMajor, 255}, {nvidiaMode, nvidiaMajor, 254}, {"nvidia-uvm", 511, 0}}
	for _, d := range devs {
		nodes = append(nodes, node{"nvidia" + strconv.Itoa(d.Index), nvidiaMajor, uint32(d.Index)})
	}
	for _, n := range nodes {
		p := filepath.Join(devRoot, n.name)
		_ = os.Remove(p)
		dev := int((n.major << 8) | (n.minor & 0xff) | ((n.minor &^ 0xff) << 12))
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, dev); err != nil {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
	}
	return nil
}

// CDI, the Container Device Interface (github.com/cncf-tags/container-
// device-interface, SPEC.md): a JSON or YAML spec per vendor kind lists
// devices by name with the device nodes, mounts and environment a
// container needs; engines resolve "nvidia.com/gpu=NAME". `nvidia-ctk cdi
// generate` writes one for the node's GPUs, named by index and by UUID.
type cdiSpec struct {
	Version string      `json:"cdiVersion" yaml:"cdiVersion"`
	Kind    string      `json:"kind" yaml:"kind"`
	Devices []cdiDevice `json:"devices" yaml:"devices"`
	Edits   cdiEdits    `json:"containerEdits" yaml:"containerEdits"`
}

type cdiDevice struct {
	Name  string   `json:"name" yaml:"name"`
	Edits cdiEdits `json:"containerEdits" yaml:"containerEdits"`
}

type cdiEdits struct {
	Env         []string    `json:"env,omitempty" yaml:"env,omitempty"`
	DeviceNodes []cdiNode   `json:"deviceNodes,omitempty" yaml:"deviceNodes,omitempty"`
	Hooks       []yaml.Node `json:"hooks,omitempty" yaml:"hooks,omitempty"`
}

type cdiNode struct {
	Path     string `json:"path" yaml:"path"`
	HostPath string `json:"hostPath,omitempty" yaml:"hostPath,omitempty"`
}

// CDIKind is the device kind gpufleet asks CDI for.
const CDIKind = "nvidia.com/gpu"

// cdiEngineDirs are where podman and docker read CDI specs themselves.
var cdiEngineDirs = []string{"/etc/cdi", "/var/run/cdi"}

// WriteSimCDISpec writes the CDI spec of simulated GPUs to
// dir/gpufleet-sim.json: one device per GPU and MIG instance, named by
// UUID (MIG instances reach their parent GPU's node), with the control
// nodes for all, the host paths under devRoot.
func WriteSimCDISpec(dir, devRoot string, devs []gpu.Device) error {
	spec := cdiSpec{Version: "0.6.0", Kind: CDIKind}
	for _, n := range []string{nvidiaCtl, nvidiaMode, "nvidia-uvm"} {
		spec.Edits.DeviceNodes = append(spec.Edits.DeviceNodes, cdiNode{Path: "/dev/" + n, HostPath: filepath.Join(devRoot, n)})
	}
	for _, d := range devs {
		node := cdiNode{Path: "/dev/nvidia" + strconv.Itoa(d.Index), HostPath: filepath.Join(devRoot, "nvidia"+strconv.Itoa(d.Index))}
		spec.Devices = append(spec.Devices, cdiDevice{Name: d.UUID, Edits: cdiEdits{DeviceNodes: []cdiNode{node}}})
		for _, m := range d.MIG {
			spec.Devices = append(spec.Devices, cdiDevice{Name: m.UUID, Edits: cdiEdits{DeviceNodes: []cdiNode{node}}})
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, "gpufleet-sim.json"), append(data, '\n'), 0o644)
}

// cdiRegistry is the CDI devices of kind nvidia.com/gpu found in some
// directories, by device name, with the spec-wide edits.
type cdiRegistry struct {
	devices map[string]cdiDevice
	common  map[string]cdiEdits // per device name: its spec's edits
	dir     map[string]string   // per device name: the directory its spec is in
}

// loadCDI reads every .json, .yaml and .yml spec of kind nvidia.com/gpu
// in dirs; a later directory's device of the same name wins (as CDI's
// own priority). An unreadable spec is an error naming it.
func loadCDI(dirs []string) (*cdiRegistry, error) {
	reg := &cdiRegistry{devices: map[string]cdiDevice{}, common: map[string]cdiEdits{}, dir: map[string]string{}}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if e.IsDir() || (ext != ".json" && ext != ".yaml" && ext != ".yml") {
				continue
			}
			p := filepath.Join(d, e.Name())
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			var spec cdiSpec
			if ext == ".json" {
				err = json.Unmarshal(data, &spec)
			} else {
				err = yaml.Unmarshal(data, &spec)
			}
			if err != nil {
				return nil, fmt.Errorf("CDI spec %s: %w", p, err)
			}
			if spec.Kind != CDIKind {
				continue
			}
			for _, dev := range spec.Devices {
				reg.devices[dev.Name], reg.common[dev.Name], reg.dir[dev.Name] = dev, spec.Edits, d
			}
		}
	}
	return reg, nil
}

// containerDevices is how a container gets exactly the attempt's GPUs
// (names: the assigned UUIDs; index: their GPUs' indexes): by CDI name
// when every one is in a spec the engine reads itself, so that the spec's
// hooks run; else the device nodes the specs list, host:container; else,
// with no spec, /dev/nvidiaN and the control nodes under devRoot. Never
// the node's other devices and never --privileged.
func containerDevices(reg *cdiRegistry, names []string, indexes map[string]int, devRoot string, mig bool) []string {
	if reg != nil {
		native, all := true, true
		for _, n := range names {
			if _, ok := reg.devices[n]; !ok {
				all = false
			} else if !slices.Contains(cdiEngineDirs, reg.dir[n]) {
				native = false
			}
		}
		if all && native {
			out := make([]string, len(names))
			for i, n := range names {
				out[i] = CDIKind + "=" + n
			}
			return out
		}
		if all {
			var out []string
			add := func(e cdiEdits) {
				for _, dn := range e.DeviceNodes {
					v := cmpOr(dn.HostPath, dn.Path) + ":" + dn.Path
					if !slices.Contains(out, v) {
						out = append(out, v)
					}
				}
			}
			for _, n := range names {
				add(reg.devices[n].Edits)
				add(reg.common[n])
			}
			return out
		}
	}
	var idx []int
	for _, n := range names {
		idx = append(idx, indexes[n])
	}
	var out []string
	for _, p := range gpuNodes(devRoot, idx, mig) {
		out = append(out, p+":"+"/dev/"+strings.TrimPrefix(p, devRoot+"/"))
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
