#!/usr/bin/env bash
# Runs BenchmarkDispatch (100 jobs due every second, 10 ticks) ROUNDS times
# for each of: 1 and 5 replicas, routing race and spread; and, in the same
# rounds, BenchmarkDispatchFloor (the same work done by two plain SETs a
# slot, the least a protocol could cost Redis: what slotcron's claim and
# finish add is the difference). The rounds of the six cases interleave (go
# test -count runs each case's rounds in turn, so this runs -count 1, ROUNDS
# times). Prints the median of each figure with its range, case by case.
#
#   bench/dispatch.sh             # 7 rounds, about 12 minutes
#   ROUNDS=3 bench/dispatch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-7}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -c -o "$out.test" ./scheduler
for ((i = 1; i <= rounds; i++)); do
  (cd scheduler && "$out.test" -test.run '^$' -test.bench 'Dispatch|DispatchFloor' -test.benchtime 1x) | grep '^BenchmarkDispatch' | tee -a "$out" >&2
done
rm -f "$out.test"

echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
echo "median of $rounds rounds (100 jobs due per tick, 10 ticks per round, replicas and Redis on this machine):"
# median METRIC PATTERN: the median (and range) of METRIC over the lines of
# $out that match PATTERN.
median() {
  grep -- "$2" "$out" | awk -v m="$1" '{ for (i = 1; i <= NF; i++) if ($i == m) print $(i-1) }' | sort -n |
    awk -v m="$1" '{ v[NR] = $1 } END { if (NR == 0) exit; med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "  %-26s %9.3f   (min %.3f, max %.3f)\n", m, med, v[1], v[NR] }'
}
for replicas in 1 5; do
  for routing in race spread; do
    echo "replicas=$replicas routing=$routing"
    for metric in started-% p50-ms p99-ms max-ms redis-cpu-us/slot redis-idle-us/slot redis-net-us/slot redis-script-us/slot redis-calls/slot redis-cpu-ms/tick go-cpu-ms/tick min-share-% max-share-% claim-trips/tick/replica check-trips/tick/replica go-allocs/tick; do
      median "$metric" "^BenchmarkDispatch/replicas=$replicas/routing=$routing-"
    done
  done
  echo "replicas=$replicas floor: two plain SETs a slot, an even share each (BenchmarkDispatchFloor)"
  for metric in redis-cpu-us/slot redis-idle-us/slot redis-net-us/slot redis-calls/slot; do
    median "$metric" "^BenchmarkDispatchFloor/replicas=$replicas-"
  done
done
