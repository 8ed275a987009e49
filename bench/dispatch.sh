#!/usr/bin/env bash
# Runs BenchmarkDispatch (100 jobs due every second, 10 ticks) ROUNDS times
# with 1 replica, then ROUNDS times with 5, and prints the median of each
# figure with its range.
#
#   bench/dispatch.sh             # 7 rounds, about 3 minutes
#   ROUNDS=3 bench/dispatch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-7}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench Dispatch -benchtime 1x -count "$rounds" ./scheduler | tee /dev/stderr | grep '^BenchmarkDispatch' >"$out"

echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
echo "median of $rounds rounds (100 jobs due per tick, 10 ticks per round, replicas and Redis on this machine):"
for replicas in 1 5; do
  for metric in p50-ms p99-ms max-ms claim-trips/tick/replica check-trips/tick/replica go-cpu-ms/tick redis-cpu-ms/tick go-allocs/tick; do
    grep "replicas=$replicas-" "$out" | awk -v m="$metric" '{ for (i = 1; i <= NF; i++) if ($i == m) print $(i-1) }' | sort -n |
      awk -v r="$replicas" -v m="$metric" '{ v[NR] = $1 } END { med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "  replicas=%d  %-26s %9.3f   (min %.3f, max %.3f)\n", r, m, med, v[1], v[NR] }'
  done
done
