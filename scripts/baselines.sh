#!/usr/bin/env bash
# baselines.sh: the Philly baseline table and the knob sweep of docs/PERFORMANCE.md
# ("Philly: information-fair baselines", "Constants: a sweep with a held-out half").
#
#   go build -o /tmp/gf-base ./cmd/gpufleet
#   scripts/baselines.sh run   [OUT]   # every replay the table needs, one at a time (about 1-3 min each)
#   scripts/baselines.sh table [OUT]   # the tables, markdown, from OUT/*.json
#   scripts/baselines.sh sweep [OUT]   # the knob sweep: first half of Philly, second half, openb
#   scripts/baselines.sh sweep-table [OUT]
#   scripts/baselines.sh splits [OUT]  # issue 38's table: every policy on Philly's tuning and
#   scripts/baselines.sh splits-table [OUT]  # held-out halves at 1x and 4x, openb and dlrm contended
#
# GF is the binary (default /tmp/gf-base), OUT the directory for the JSON reports (default
# /tmp/baselines). A replay whose JSON exists is not run again: delete it to redo it. Replays run
# one at a time (the development machine has 2 cores, shared): each prints its progress on stderr
# into OUT/NAME.err. The ETA pass is off (--ablate eta): decisions do not depend on it.
set -euo pipefail
mode=${1:-run}
OUT=${2:-/tmp/baselines}
GF=${GF:-/tmp/gf-base}
POLICIES=${POLICIES:-"fifo bestfit backfill hetero-easy las hrrn srtf slurm drf themis gandiva-fair gpufleet"}
# What `run` replays (set one empty to skip it): estimate errors, restart overheads, and the
# offered loads (--time-scale) replayed with noisy estimates and a 90 s restart overhead.
ESTS=${ESTS-"0.5 0"}
RESTARTS=${RESTARTS-"90s 0"}
LOADS=${LOADS-"0.5 0.8 1.5"}
PHILLY="--trace traces/philly-gavel/philly_gavel.csv.gz --format philly-gavel --cluster traces/clusters/philly.yaml"
OPENB="--trace traces/alibaba-openb-2023/openb_pod_list_default.csv --format openb --nodes traces/alibaba-openb-2023/openb_node_list_all_node.csv"
# The sweep's time split of Philly: the first and second half of its 15,264 jobs by arrival
# time (the median arrival is 3,360,300 s, day 38.9, from the first; 7,632 jobs on each side).
FIRST=${FIRST:-"0,3360300"}
SECOND=${SECOND:-"3360300,1e9"}
# The splits of issue 38's table. Philly's halves by time: days 0-62.6 from the first arrival
# (the policy's constants were chosen there) and 62.6-126 (held out), each at the trace's
# arrival rate and at 4x (--time-scale 4). Contended fleets where the real ones never queue:
# openb on every eighth node of its list (192 nodes) at 500x its arrival rate, dlrm on 300 of
# its 440 nodes (traces/clusters/dlrm-contended.yaml).
TUNE=${TUNE:-"0,62.6d"}
HELD=${HELD:-"62.6d,126d"}
SPLITS=${SPLITS-"held-1x held-4x openb dlrm tune-1x tune-4x"}
SEEDS=${SEEDS:-1}
DLRM="--trace traces/alibaba-dlrm-2025/disaggregated_DLRM_trace.csv --format dlrm --cluster traces/clusters/dlrm-contended.yaml"
mkdir -p "$OUT"

# run NAME ARGS...: one replay into OUT/NAME.json, unless it is there.
run() {
	local name=$1
	shift
	[ -s "$OUT/$name.json" ] && return 0
	echo "$(date -u +%H:%M:%S) $name" >&2
	if "$GF" sim --ablate eta -o json "$@" >"$OUT/$name.json.tmp" 2>"$OUT/$name.err"; then
		mv "$OUT/$name.json.tmp" "$OUT/$name.json"
	else
		echo "  failed: see $OUT/$name.err" >&2
		rm -f "$OUT/$name.json.tmp"
	fi
}

# row NAME LABEL: one markdown row from OUT/NAME.json.
row() {
	local f="$OUT/$1.json"
	if [ ! -s "$f" ]; then
		echo "| $2 | (not run) |"
		return
	fi
	jq -r --arg name "$2" '
		def e: if . == null then "-" elif . < 10000 then (. * 100 | round / 100 | tostring)
			else . as $x | ($x | log10 | floor) as $p | (($x / pow(10; $p)) * 100 | round / 100 | tostring) + "e" + ($p | tostring) end;
		def r3: if . == null then "-" else (. * 1000 | round / 1000 | tostring) end;
		"| \($name) | \(.avg_jct_s | e) | \(.p50_jct_s | e) | \(.p99_jct_s | e) | \(.jain_fairness | r3) | \(.makespan_s | e) | \(.gpu_allocation_ratio | r3) | \(.preemptions) | \(.max_job_stops) | \(.completed)/\(.jobs) | \(.sim_wall_s | round) |"' "$f"
}

header() {
	echo "| $1 | avg JCT (s) | p50 JCT | p99 JCT | Jain | makespan | GPU alloc | preemptions | max stops of one job | completed | wall (s) |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
}

main() {
case $mode in
run)
	for est in $ESTS; do
		for rs in $RESTARTS; do
			for p in $POLICIES; do
				run "philly-$p-e$est-r$rs" $PHILLY --policy "$p" --estimate-error "$est" --restart-overhead "$rs"
			done
		done
	done
	for load in $LOADS; do
		for p in $POLICIES; do
			run "philly-$p-load$load" $PHILLY --policy "$p" --estimate-error 0.5 --restart-overhead 90s --time-scale "$load"
		done
	done
	;;
table)
	for est in 0 0.5; do
		for rs in 0 90s; do
			echo
			echo "Estimates $([ "$est" = 0 ] && echo exact || echo "noisy (sigma $est)"), restart overhead $rs:"
			echo
			header policy
			for p in $POLICIES; do row "philly-$p-e$est-r$rs" "$p"; done
		done
	done
	for load in 0.5 0.8 1.0 1.5; do
		echo
		echo "Offered load $load x the trace's (--time-scale $load), noisy estimates, restart overhead 90s:"
		echo
		header policy
		for p in $POLICIES; do
			if [ "$load" = 1.0 ]; then row "philly-$p-e0.5-r90s" "$p"; else row "philly-$p-load$load" "$p"; fi
		done
	done
	;;
sweep)
	# One knob at a time around the defaults, gpufleet, noisy estimates, restart 90s.
	for v in "" starvation-slowdown=10 starvation-slowdown=40 starvation-min-run=1h starvation-min-run=24h \
		fair-share-clamp=1.5 fair-share-clamp=4 max-preemptions-per-day=-1 max-preemptions=-1; do
		name=${v:-default}
		set=()
		[ -n "$v" ] && set=(--set "$v")
		run "sweep-first-$name" $PHILLY --policy gpufleet --estimate-error 0.5 --window "$FIRST" "${set[@]}"
		run "sweep-second-$name" $PHILLY --policy gpufleet --estimate-error 0.5 --window "$SECOND" "${set[@]}"
		run "sweep-openb-$name" $OPENB --policy gpufleet --estimate-error 0.5 "${set[@]}"
	done
	# The strongest baselines on the same halves, for scale.
	for p in hetero-easy hrrn las; do
		run "sweep-first-$p" $PHILLY --policy "$p" --estimate-error 0.5 --window "$FIRST"
		run "sweep-second-$p" $PHILLY --policy "$p" --estimate-error 0.5 --window "$SECOND"
	done
	;;
sweep-table)
	for half in first second openb; do
		echo
		echo "gpufleet, $half, noisy estimates (sigma 0.5), restart overhead 90s:"
		echo
		header knob
		for v in default starvation-slowdown=10 starvation-slowdown=40 starvation-min-run=1h starvation-min-run=24h \
			fair-share-clamp=1.5 fair-share-clamp=4 max-preemptions-per-day=-1 max-preemptions=-1 hetero-easy hrrn las; do
			[ -s "$OUT/sweep-$half-$v.json" ] && row "sweep-$half-$v" "$v"
		done
	done
	;;
splits)
	awk 'NR == 1 || (NR - 2) % 8 == 0' traces/alibaba-openb-2023/openb_node_list_all_node.csv >"$OUT/openb-eighth.csv"
	for seed in $SEEDS; do
		for split in $SPLITS; do
			for p in $POLICIES; do
				n="split-$split-$p-s$seed"
				a=(--policy "$p" --estimate-error 0.5 --seed "$seed")
				case $split in
				tune-1x) run "$n" $PHILLY "${a[@]}" --window "$TUNE" ;;
				tune-4x) run "$n" $PHILLY "${a[@]}" --window "$TUNE" --time-scale 4 ;;
				held-1x) run "$n" $PHILLY "${a[@]}" --window "$HELD" ;;
				held-4x) run "$n" $PHILLY "${a[@]}" --window "$HELD" --time-scale 4 ;;
				openb) run "$n" --trace traces/alibaba-openb-2023/openb_pod_list_default.csv --format openb \
					--nodes "$OUT/openb-eighth.csv" "${a[@]}" --time-scale 500 ;;
				dlrm) run "$n" $DLRM "${a[@]}" ;;
				esac
			done
		done
	done
	;;
splits-table)
	# One row per split and policy: the mean over the seeds run, the range of average JCT
	# and makespan across them, and each figure against the best policy's mean.
	python3 - "$OUT" $POLICIES <<'PY'
import glob, json, os, statistics as st, sys
out, pols = sys.argv[1], sys.argv[2:]
def e(x): return "-" if x is None else ("%.3g" % x)
for split in ["tune-1x", "tune-4x", "held-1x", "held-4x", "openb", "dlrm"]:
    rows = {}
    for p in pols:
        rs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/split-{split}-{p}-s*.json")) if os.path.getsize(f)]
        if rs:
            rows[p] = rs
    if not rows:
        continue
    m = lambda rs, k: st.mean(r[k] for r in rs)
    best = {k: min(m(rs, k) for rs in rows.values()) for k in ["avg_jct_s", "p99_jct_s", "makespan_s"]}
    seeds = max(len(rs) for rs in rows.values())
    print(f"\n{split}, noisy estimates (sigma 0.5), restart overhead 90 s, mean of {seeds} seed(s):\n")
    print("| policy | avg JCT (s) | / best | range over seeds | p99 JCT | / best | makespan | / best | range over seeds | Jain | GPU alloc | preemptions | seeds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p, rs in rows.items():
        a, q, mk = m(rs, "avg_jct_s"), m(rs, "p99_jct_s"), m(rs, "makespan_s")
        rng = lambda k: f"{e(min(r[k] for r in rs))}-{e(max(r[k] for r in rs))}"
        print(f"| {p} | {e(a)} | {a/best['avg_jct_s']:.3f} | {rng('avg_jct_s')} | {e(q)} | {q/best['p99_jct_s']:.3f} | {e(mk)} | {mk/best['makespan_s']:.3f} | {rng('makespan_s')} | "
              f"{m(rs, 'jain_fairness'):.3f} | {m(rs, 'gpu_allocation_ratio'):.3f} | {m(rs, 'preemptions'):.0f} | {len(rs)} |")
PY
	;;
*)
	echo "usage: $0 run|table|sweep|sweep-table|splits|splits-table [OUT]" >&2
	exit 2
	;;
esac
}

# All in one function, read whole before it runs: editing this file while a
# long run goes on does not change what that run does.
main "$@"
exit
