#!/bin/sh
# A stand-in for a serving benchmark, for trying `gpufleet bench workload`
# on the simulated GPUs of `gpufleet dev` (docs/BENCH.md#workload). On a real
# fleet, run your own benchmark instead (vLLM's benchmark_serving.py,
# trtllm-bench, your training loop) and point --metric at the line where it
# prints its throughput.
#
# Simulated GPUs run no kernels, so this script stands in for one: a
# memory-bound decode of an 8B-parameter bf16 model (16 GB of weights read
# per step) at batch 32, at 80% of the GPU's datasheet memory bandwidth,
# which is what decode reaches on real cards (planner/constants.go,
# memEfficiency). It reads the model it got from BENCH_GPU_MODEL, which
# gpufleet sets for every workload bench job, prints its throughput every
# second for SECONDS_TO_RUN (default 30) seconds, and exits.
set -eu
case "${BENCH_GPU_MODEL:?run it through gpufleet bench workload}" in
	# Datasheet memory bandwidth in GB/s, from gpufleet catalog.
	h200-sxm-141gb) bw=4800 ;;
	h100-sxm-80gb) bw=3350 ;;
	a100-sxm-80gb) bw=2039 ;;
	l40s) bw=864 ;;
	l4) bw=300 ;;
	*) echo "sim-decode: no bandwidth for $BENCH_GPU_MODEL in this stand-in" >&2; exit 2 ;;
esac
n=0
while [ "$n" -lt "${SECONDS_TO_RUN:-30}" ]; do
	awk -v bw="$bw" -v n="$n" 'BEGIN { srand(n); printf "decode throughput: %.1f tokens/s\n", bw * 0.8 / 16 * 32 * (0.99 + 0.02 * rand()) }'
	sleep 1
	n=$((n + 1))
done
