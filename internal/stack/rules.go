package stack

import "github.com/gpufleet/gpufleet"

// The compatibility rules, as data. Each table says where it comes from;
// docs/STACKS.md lists the sources with the words they were read in.
// Nothing here is fitted or guessed: a fact without a source is left out.

// Sources of the rules.
const (
	SourceToolkitDrivers = "NVIDIA CUDA Toolkit Release Notes, Table 3 \"CUDA Toolkit and Corresponding Driver Versions\" (Linux x86_64), docs.nvidia.com/cuda/cuda-toolkit-release-notes"
	SourceMinorCompat    = "NVIDIA CUDA Compatibility, minor version compatibility (CUDA 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580), docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
	SourceArchMatrix     = "NVIDIA \"CUDA Toolkit, Driver, and Architecture Matrix\", docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html; first toolkit per SM also in LLVM NVPTXTargetParser.def"
	SourceArchDrops      = "CUDA 12.0 release notes (Kepler sm_35/sm_37 removed); CUDA 13.0 release notes, Deprecated Architectures (Maxwell, Pascal, Volta removed)"
	SourceDriverBranch   = "NVIDIA architecture matrix, Last Driver Support (Kepler R470; Maxwell, Pascal, Volta R580); NVIDIA Blackwell software migration guide (\"requires a compatible driver (R570 or higher)\"); GPU Operator 22.9.0 release notes (H100 with R520)"
	SourceTorch          = "pytorch/pytorch RELEASE.md, Release Compatibility Matrix (stable and experimental CUDA wheels per release)"
	SourceFabricManager  = "NVIDIA/yum-packaging-fabric-manager README: \"the version of fabricmanager must match the NVIDIA driver installed\"; Fabric Manager User Guide: the service aborts on an incompatible driver stack"
)

// toolkitDriver is the driver a CUDA toolkit release ships with, which
// every feature of that release needs (SourceToolkitDrivers). "12.4.1" is
// 12.4 Update 1.
var toolkitDrivers = []struct{ toolkit, driver string }{
	{"11.0.1", "450.36.06"}, {"11.0.2", "450.51.05"}, {"11.0.3", "450.51.06"},
	{"11.1.0", "455.23"}, {"11.1.1", "455.32"},
	{"11.2.0", "460.27.03"}, {"11.2.1", "460.32.03"}, {"11.2.2", "460.32.03"},
	{"11.3.0", "465.19.01"}, {"11.3.1", "465.19.01"},
	{"11.4.0", "470.42.01"}, {"11.4.1", "470.57.02"}, {"11.4.2", "470.57.02"}, {"11.4.3", "470.82.01"}, {"11.4.4", "470.82.01"},
	{"11.5.0", "495.29.05"}, {"11.5.1", "495.29.05"}, {"11.5.2", "495.29.05"},
	{"11.6.0", "510.39.01"}, {"11.6.1", "510.47.03"}, {"11.6.2", "510.47.03"},
	{"11.7.0", "515.43.04"}, {"11.7.1", "515.48.07"},
	{"11.8.0", "520.61.05"},
	{"12.0.0", "525.60.13"}, {"12.0.1", "525.85.12"},
	{"12.1.0", "530.30.02"}, {"12.1.1", "530.30.02"},
	{"12.2.0", "535.54.03"}, {"12.2.1", "535.86.09"}, {"12.2.2", "535.104.05"},
	{"12.3.0", "545.23.06"}, {"12.3.1", "545.23.08"},
	{"12.4.0", "550.54.14"}, {"12.4.1", "550.54.15"},
	{"12.5.0", "555.42.02"}, {"12.5.1", "555.42.06"},
	{"12.6.0", "560.28.03"}, {"12.6.1", "560.35.03"}, {"12.6.2", "560.35.03"}, {"12.6.3", "560.35.05"},
	{"12.8.0", "570.26"}, {"12.8.1", "570.124.06"},
	{"12.9.0", "575.51.03"}, {"12.9.1", "575.57.08"},
	{"13.0.0", "580.65.06"}, {"13.0.1", "580.82.07"}, {"13.0.2", "580.95.05"},
}

// minorCompatDrivers is, per CUDA major version, the lowest driver that
// runs every toolkit of that major through minor version compatibility
// (without PTX JIT of code newer than the driver; SourceMinorCompat).
var minorCompatDrivers = map[int]string{11: "450.80.02", 12: "525.60.13", 13: "580"}

// archSupport is a compute capability's toolkit window: the first toolkit
// that compiles for it and the first that no longer does (SourceArchMatrix,
// SourceArchDrops), and the last driver branch that supports it.
type archSupport struct {
	cc                      string
	name                    string
	firstToolkit, dropped   string // "" when not known or not dropped
	lastDriver, firstDriver string // driver branches ("580"); "" when none stated
}

var archs = []archSupport{
	{cc: "3.5", name: "Kepler", dropped: "12.0", lastDriver: "470"},
	{cc: "3.7", name: "Kepler", dropped: "12.0", lastDriver: "470"},
	{cc: "5.0", name: "Maxwell", dropped: "13.0", lastDriver: "580"},
	{cc: "5.2", name: "Maxwell", dropped: "13.0", lastDriver: "580"},
	{cc: "6.0", name: "Pascal", dropped: "13.0", lastDriver: "580"},
	{cc: "6.1", name: "Pascal", dropped: "13.0", lastDriver: "580"},
	{cc: "7.0", name: "Volta", dropped: "13.0", lastDriver: "580"},
	{cc: "7.2", name: "Volta", dropped: "13.0", lastDriver: "580"},
	{cc: "7.5", name: "Turing", firstToolkit: "10.0"},
	{cc: "8.0", name: "Ampere", firstToolkit: "11.0"},
	{cc: "8.6", name: "Ampere", firstToolkit: "11.1"},
	{cc: "8.7", name: "Ampere (Orin)", firstToolkit: "11.4"},
	{cc: "8.9", name: "Ada", firstToolkit: "11.8"},
	{cc: "9.0", name: "Hopper", firstToolkit: "11.8", firstDriver: "520"},
	{cc: "10.0", name: "Blackwell", firstToolkit: "12.8", firstDriver: "570"},
	{cc: "10.3", name: "Blackwell Ultra", firstToolkit: "12.9", firstDriver: "570"},
	{cc: "12.0", name: "Blackwell (RTX)", firstToolkit: "12.8", firstDriver: "570"},
	{cc: "12.1", name: "Blackwell (GB10)", firstToolkit: "12.9", firstDriver: "570"},
}

// torchBuilds is, per PyTorch release, the CUDA versions of its official
// wheels (SourceTorch): "2.5.1+cu124" is a 12.4 build.
var torchBuilds = map[string][]string{
	"2.0": {"11.7", "11.8"}, "2.1": {"11.8", "12.1"}, "2.2": {"11.8", "12.1"}, "2.3": {"11.8", "12.1"},
	"2.4": {"11.8", "12.1", "12.4"}, "2.5": {"11.8", "12.1", "12.4"}, "2.6": {"11.8", "12.4", "12.6"},
	"2.7": {"11.8", "12.6", "12.8"}, "2.8": {"12.6", "12.8", "12.9"}, "2.9": {"12.6", "12.8", "13.0"},
}

// defect is a published defect of a component version range, on the
// compute capabilities given (all when empty).
type defect struct {
	component gpufleet.StackComponent
	versions  string // a constraint
	ccs       []string
	what      string
	source    string
}

// knownBad are the published defects.
var knownBad = []defect{
	{gpufleet.StackNCCL, "2.18.1", []string{"9.0"}, "LL128 can corrupt data where a NIC shares a PCI switch with one GPU (HGX H100), and allreduce with IB SHARP and several GPUs per process can corrupt data; NCCL_PROTO=^LL128 works around the first",
		"NCCL 2.18.1 release notes, Known Issues (docs.nvidia.com/deeplearning/nccl/release-notes/rel_2-18-1.html)"},
	{gpufleet.StackNCCL, "2.19", nil, "all-to-all connection setup can deadlock with cuMem on by default; NCCL_CUMEM_ENABLE=0 works around it",
		"NVIDIA/nccl issue #1116 (maintainer's answer); #1134 reports 2.18.6 without the hang"},
	{gpufleet.StackNCCL, ">=2.29.7,<2.30.7", nil, "multi-node InfiniBand jobs can hang; NCCL_PXN_DISABLE=1 works around it, 2.30.7 fixes it",
		"NVIDIA CUDA docs, troubleshooting (docs.nvidia.com/cuda/cuest/troubleshooting/index.html): hangs with NCCL 2.29.7 and above, fixed in 2.30.7"},
	{gpufleet.StackCUDAToolkit, "13.2.1", nil, "cuBLAS can ignore tensor-wide scaling in NVFP4 GEMMs (cublasLtMatmul) and return wrong results; the cuBLAS 13.4.1 patch fixes it",
		"CUDA 13.2 Update 1 release notes (docs.nvidia.com/cuda/archive/13.2.1/cuda-toolkit-release-notes)"},
}
