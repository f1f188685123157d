#!/usr/bin/env bash
# baselines.sh: the Philly baseline table and the knob sweep of docs/PERFORMANCE.md
# ("Philly: information-fair baselines", "Constants: a sweep with a held-out half").
#
#   go build -o /tmp/gf-base ./cmd/gpufleet
#   scripts/baselines.sh run   [OUT]   # every replay the table needs, one at a time (about 1-3 min each)
#   scripts/baselines.sh table [OUT]   # the tables, markdown, from OUT/*.json
#   scripts/baselines.sh sweep [OUT]   # the knob sweep: first half of Philly, second half, openb
#   scripts/baselines.sh sweep-table [OUT]
#
# GF is the binary (default /tmp/gf-base), OUT the directory for the JSON reports (default
# /tmp/baselines). A replay whose JSON exists is not run again: delete it to redo it. Replays run
# one at a time (the development machine has 2 cores, shared): each prints its progress on stderr
# into OUT/NAME.err. The ETA pass is off (--ablate eta): decisions do not depend on it.
set -euo pipefail
mode=${1:-run}
OUT=${2:-/tmp/baselines}
GF=${GF:-/tmp/gf-base}
POLICIES=${POLICIES:-"fifo bestfit backfill hetero-easy las hrrn srtf slurm gpufleet"}
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
*)
	echo "usage: $0 run|table|sweep|sweep-table [OUT]" >&2
	exit 2
	;;
esac
}

# All in one function, read whole before it runs: editing this file while a
# long run goes on does not change what that run does.
main "$@"
exit
