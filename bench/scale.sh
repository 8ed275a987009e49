#!/usr/bin/env bash
# How the cost of a tick grows: BenchmarkScale, 10 / 100 / 1,000 / 10,000
# jobs due in the same tick (rows) by 1 / 5 / 20 replicas (columns), all
# replicas in one process, spread routing, 5 ticks a cell. For each cell: p50
# and p99 dispatch delay, Redis CPU per slot, the longest single Redis
# command in the ticks (SLOWLOG), Go CPU per slot (every replica together)
# and the process's RSS.
#
# One round by default; with ROUNDS=N each cell shows the median of N rounds
# and its range, as "median (min–max)". CELLS narrows the cells: a pattern
# of jobs=J/replicas=R as go test -bench takes it (each part unanchored:
# jobs=10 matches jobs=10000 too, so end a part with $).
#
# BENCH_REDIS_NICE=-10 runs the bench's Redis at that nice level (root or
# CAP_SYS_NICE): the replicas share the machine's cores with Redis, and when
# they keep them busy the kernel preempts Redis mid-command, which SLOWLOG
# counts as the command's time; with Redis ahead of them, as on a host of
# its own, the longest command is what Redis spent on it. BENCH_REDIS_FIFO=1
# goes further: Redis in the real-time class SCHED_FIFO (chrt), which no
# replica preempts at any nice level.
#
#   bench/scale.sh                                        # about 7 minutes
#   ROUNDS=5 CELLS='jobs=10000$/replicas=5$' bench/scale.sh   # one cell, 5 rounds
#   BENCH_REDIS_NICE=-10 ROUNDS=5 CELLS='jobs=10000$/replicas=5$' bench/scale.sh
#   BENCH_REDIS_FIFO=1 ROUNDS=5 CELLS='jobs=10000$/replicas=5$' bench/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-1}
cells=${CELLS:-}
out=$(mktemp)
trap 'rm -f "$out" "$out.test"' EXIT
go test -c -o "$out.test" ./scheduler
for ((i = 1; i <= rounds; i++)); do
  (cd scheduler && "$out.test" -test.run '^$' -test.bench "Scale/$cells" -test.benchtime 1x -test.timeout 60m) | tee -a /dev/stderr | grep '^BenchmarkScale' >>"$out" || true
done

echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
echo "$rounds round(s), 5 ticks per cell, replicas in one process, routing spread, Redis at nice ${BENCH_REDIS_NICE:-0}${BENCH_REDIS_FIFO:+, SCHED_FIFO $BENCH_REDIS_FIFO}"
echo
printf "| jobs per tick | figure | 1 replica | 5 replicas | 20 replicas |\n|---|---|---|---|---|\n"
for jobs in 10 100 1000 10000; do
  grep -q "jobs=$jobs/" "$out" || continue
  for metric in started-% p50-ms p99-ms redis-cpu-us/slot redis-net-us/slot slowest-cmd-ms cmds-over-5ms go-cpu-us/slot rss-mb; do
    row="| $jobs | $metric"
    for replicas in 1 5 20; do
      v=$({ grep "jobs=$jobs/replicas=$replicas-" "$out" || true; } | awk -v m="$metric" '{ for (i = 1; i <= NF; i++) if ($i == m) print $(i-1) }' | sort -g |
        awk '{ v[NR] = $1 } END {
          if (NR == 0) exit
          if (NR == 1) { print v[1]; exit }
          med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
          printf "%.4g (%.4g–%.4g)\n", med, v[1], v[NR] }')
      row="$row | ${v:--}"
    done
    echo "$row |"
  done
done
