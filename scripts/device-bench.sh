#!/bin/sh
# device-bench.sh: the real path of `gpufleet bench` on a GPU machine,
# against what PyTorch measures on the same GPU in the same run
# (docs/BENCH.md#on-a-real-gpu). Run it on the GPU machine from the
# repository root, with a gpufleet binary built for linux with cgo:
#
#   go build -o gpufleet ./cmd/gpufleet && scripts/device-bench.sh ./gpufleet [OUT_DIR]
#
# It finds cuBLASLt and NCCL where PyTorch's wheels put them, runs every
# microbenchmark (full sizes) with JSON to OUT_DIR, then PyTorch's
# device-to-device copy and bf16 8192^3 product on GPU 0 with the same
# method (CUDA events, warm-up, median of 20 runs, random data), and
# prints the two side by side with the ratio. It changes no setting of
# the card.
#
# Not here: the all-reduce across nodes (gpufleet bench allreduce, NCCL's
# ncclCommInitRank with rank 0's unique id, docs/BENCH.md#across-nodes)
# needs two nodes with GPUs; NCCL refuses one GPU as two ranks. Its check
# is two cordoned agents on two such machines and that one command.
set -eu
bin=${1:?usage: scripts/device-bench.sh GPUFLEET_BINARY [OUT_DIR]}
out=${2:-${OUT:-./device-bench-out}}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$out/nvidia-smi.csv" 2>&1 || true

# cuBLASLt and NCCL from PyTorch's wheels, linked into one directory.
libs=$(mktemp -d)
python3 - "$libs" <<'PY'
import glob, os, sys, site
dst = sys.argv[1]
for pat in ("nvidia/cublas/lib/libcublasLt.so*", "nvidia/nccl/lib/libnccl.so*", "nvidia/cu13/lib/libcublasLt.so*", "nvidia/cu13/lib/libnccl.so*"):
    for root in site.getsitepackages():
        for f in glob.glob(os.path.join(root, pat)):
            link = os.path.join(dst, os.path.basename(f))
            if not os.path.exists(link):
                os.symlink(f, link)
print("libraries:", sorted(os.listdir(dst)))
PY

echo "== gpufleet bench (full set, every GPU)"
"$bin" bench --cuda-lib-dir "$libs" -o json >"$out/gpufleet-bench.json" 2>"$out/gpufleet-bench.log" || echo "gpufleet bench exited $? (see $out/gpufleet-bench.log)"
tail -5 "$out/gpufleet-bench.log"

echo "== gpufleet bench --level long (memory patterns and watched stress: not on the CUDA backend yet)"
"$bin" bench --cuda-lib-dir "$libs" --level long -o json >"$out/gpufleet-bench-long.json" 2>"$out/gpufleet-bench-long.log" || echo "gpufleet bench --level long exited $? (see $out/gpufleet-bench-long.log)"
grep -i "not measured" "$out/gpufleet-bench-long.log" | head -5

echo "== PyTorch on GPU 0, same method"
python3 - "$out" <<'PY'
import json, statistics, sys, torch
out = sys.argv[1]
dev = torch.device("cuda:0")
def timed(fn, runs=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms) / 1e3
n = 4 << 30
src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=dev)
dst = torch.empty_like(src)
t = timed(lambda: dst.copy_(src))
assert torch.equal(dst[:1 << 20], src[:1 << 20])
copy = 2 * n / t
del src, dst
k = 8192
A = torch.randn(k, k, device=dev, dtype=torch.bfloat16)
B = torch.randn(k, k, device=dev, dtype=torch.bfloat16)
t = timed(lambda: A @ B)
gemm = 2 * k ** 3 / t
json.dump({"copy_bytes_per_s": copy, "gemm_bf16_flops": gemm, "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}, open(out + "/torch.json", "w"))
PY

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
t = json.load(open(out + "/torch.json"))
try:
    g = json.load(open(out + "/gpufleet-bench.json"))["figures"]
except Exception as e:
    print("no gpufleet figures:", e); sys.exit(1)
def ours(name):
    for f in g:
        if f["gpu"] == 0 and f["name"] == name and f.get("peer") is None:
            return f["value"]
print(f'{"figure":12} {"gpufleet":>14} {"pytorch":>14} {"ratio":>7}   ({t["device"]}, torch {t["torch"]})')
for name, key, unit, scale in (("copy", "copy_bytes_per_s", "TB/s", 1e12), ("gemm-bf16", "gemm_bf16_flops", "TFLOP/s", 1e12)):
    o, p = ours(name), t[key]
    print(f'{name:12} {o / scale:>9.1f} {unit:4} {p / scale:>9.1f} {unit:4} {o / p:>7.3f}' if o else f"{name:12} missing")
PY
