#!/usr/bin/env bash
# gpu-check.sh: check the NVML backend on a machine with NVIDIA GPUs, with no Go toolchain there.
#
# Build on a development machine (linux/amd64, cgo for go-nvml):
#   CGO_ENABLED=1 GOOS=linux GOARCH=amd64 go build -o gpufleet ./cmd/gpufleet
#   CGO_ENABLED=1 GOOS=linux GOARCH=amd64 go build -o nvmldump ./internal/gpu/nvml/nvmldump
# then copy both binaries and this script to the GPU machine and run:
#   ./gpu-check.sh ./gpufleet ./nvmldump [SECONDS]
#
# In one call it: dumps what the NVML backend discovers and samples (JSON) next to
# `nvidia-smi -q`; runs the agent with the NVML backend against a throwaway local server for
# SECONDS (default 60) and scrapes its /metrics; measures the agent's CPU and memory; and prints a
# comparison of the figures both tools report. It only reads: it never changes clocks, power
# limits, MIG layout or persistence mode. Output goes to ./gpu-check-out/.
set -uo pipefail
bin=${1:?usage: gpu-check.sh GPUFLEET_BINARY NVMLDUMP_BINARY [SECONDS]}
dump=${2:?usage: gpu-check.sh GPUFLEET_BINARY NVMLDUMP_BINARY [SECONDS]}
secs=${3:-60}
out=${OUT:-./gpu-check-out}
mkdir -p "$out"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

echo "== nvidia-smi"
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1 || echo "nvidia-smi -q failed (see $out/nvidia-smi-q.txt)"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,power.draw,power.limit,temperature.gpu,clocks.sm,clocks.mem,utilization.gpu,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,driver_version,vbios_version \
  --format=csv,noheader,nounits > "$out/nvidia-smi.csv" 2>&1 || true

echo "== NVML backend snapshot (two samples, 1 s apart)"
"$dump" -interval 1s > "$out/nvml-backend.json" 2> "$out/nvml-backend.err"
echo "exit $? (2 means NVML unavailable)" >> "$out/nvml-backend.err"

echo "== agent with --backend nvml for ${secs}s"
admin=gpu-check-admin-token-0123456789
"$bin" server --listen 127.0.0.1:0 --data-dir "$work/server" --admin-token "$admin" > "$work/server.out" 2> "$out/server.log" &
for _ in $(seq 50); do [ -s "$work/server/server.url" ] && break; sleep 0.2; done
url=$(cat "$work/server/server.url")
jt=$(GPUFLEET_SERVER=$url GPUFLEET_TOKEN=$admin "$bin" join-tokens create --ttl 1h -o json | sed -n 's/.*"token": "\([^"]*\)".*/\1/p')
"$bin" agent --server "$url" --join-token "$jt" --name gpu-check --data-dir "$work/agent" --backend nvml \
  --metrics-listen 127.0.0.1:9499 > "$out/agent.log" 2>&1 &
apid=$!
sleep 5
t0=$(awk '{print $14+$15}' /proc/$apid/stat 2>/dev/null || echo 0)
sleep "$secs"
t1=$(awk '{print $14+$15}' /proc/$apid/stat 2>/dev/null || echo 0)
curl -s http://127.0.0.1:9499/metrics > "$out/agent-metrics.txt" || true
GPUFLEET_SERVER=$url GPUFLEET_TOKEN=$admin "$bin" nodes -o json > "$out/nodes.json" 2>&1 || true
hz=$(getconf CLK_TCK)
rss=$(awk '/VmHWM/ {print $2}' /proc/$apid/status 2>/dev/null || echo "?")
echo "agent CPU: $(( (t1 - t0) * 100 / hz )) centi-seconds over ${secs}s; peak RSS ${rss} kB" | tee "$out/agent-overhead.txt"

echo "== comparison (nvidia-smi vs gpufleet)"
python3 - "$out" <<'PY' || echo "(python3 missing: compare $out/nvidia-smi.csv with $out/nvml-backend.json by hand)"
import csv, json, sys, os
out = sys.argv[1]
try:
    snap = json.load(open(os.path.join(out, "nvml-backend.json")))
except Exception as e:
    print("no backend snapshot:", e); sys.exit(0)
devs = {d["uuid"]: d for d in snap.get("devices", [])}
samples = {s["uuid"]: s for s in snap.get("samples", [])}
rows = list(csv.reader(open(os.path.join(out, "nvidia-smi.csv"))))
def num(v):
    try: return float(v)
    except: return None
print("%-5s %-28s %-24s %12s %12s %10s %10s %8s %8s" % ("gpu", "nvidia-smi name", "gpufleet model", "mem MiB smi", "mem MiB nvml", "W smi", "W nvml", "C smi", "C nvml"))
for r in rows:
    if len(r) < 17: continue
    r = [x.strip() for x in r]
    d, s = devs.get(r[1], {}), samples.get(r[1], {})
    mem = d.get("memory_bytes"); pw = s.get("power_watts"); tc = s.get("temperature_c")
    print("%-5s %-28s %-24s %12s %12s %10s %10s %8s %8s" % (r[0], r[2][:28], d.get("model", "MISSING")[:24], r[4],
          "%.0f" % (mem / 2**20) if mem else "-", r[6], "%.1f" % pw if pw is not None else "absent", r[8], "%.0f" % tc if tc is not None else "absent"))
absent = sorted({k for s in samples.values() for k, v in s.items() if v is None})
print("readings the backend reported absent:", ", ".join(absent) or "none")
PY
echo "== files in $out"
ls -l "$out"
