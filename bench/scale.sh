#!/usr/bin/env bash
# How the cost of a tick grows: BenchmarkScale, 10 / 100 / 1,000 / 10,000
# jobs due in the same tick (rows) by 1 / 5 / 20 replicas (columns), all
# replicas in one process, spread routing, 5 ticks a cell, one round. For
# each cell: p50 and p99 dispatch delay, Redis CPU per slot, the longest
# single Redis command in the ticks (SLOWLOG), Go CPU per slot (every
# replica together) and the process's RSS.
#
#   bench/scale.sh        # about 5 minutes
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out" "$out.test"' EXIT
go test -c -o "$out.test" ./scheduler
(cd scheduler && "$out.test" -test.run '^$' -test.bench Scale -test.benchtime 1x -test.timeout 30m) | tee /dev/stderr | grep '^BenchmarkScale' >"$out" || true

echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
echo "one round, 5 ticks per cell, replicas in one process, routing spread"
echo
printf "| jobs per tick | figure | 1 replica | 5 replicas | 20 replicas |\n|---|---|---|---|---|\n"
for jobs in 10 100 1000 10000; do
  for metric in started-% p50-ms p99-ms redis-cpu-us/slot slowest-cmd-ms go-cpu-us/slot rss-mb; do
    row="| $jobs | $metric"
    for replicas in 1 5 20; do
      v=$(grep "jobs=$jobs/replicas=$replicas-" "$out" | awk -v m="$metric" '{ for (i = 1; i <= NF; i++) if ($i == m) print $(i-1) }')
      row="$row | ${v:--}"
    done
    echo "$row |"
  done
done
