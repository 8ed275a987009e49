#!/usr/bin/env bash
# Runs BenchmarkOutageStart (5 replicas of 100 jobs starting together after
# a 100-minute outage: about 60,000 slots to record missed) for an older revision
# and for the working tree, alternating, ROUNDS times each, and prints each
# round and the medians side by side: the miss claims that reached Redis
# per slot, Redis's CPU for the whole start (all of it, and net of an idle
# twin's), per slot, and how long after the start the last miss claim went.
# The older revision runs the working tree's scheduler/bench_test.go (built
# from a temporary git worktree), so both report the same figures.
#
#   bench/ab-outage.sh 6b37516            # 5 rounds each, about 3 minutes
#   ROUNDS=7 bench/ab-outage.sh 6b37516
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/ab-outage.sh <older revision>}
rounds=${ROUNDS:-5}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" 2>/dev/null || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/old" "$old"
cp scheduler/bench_test.go "$tmp/old/scheduler/bench_test.go"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./scheduler)
go test -c -o "$tmp/new.test" ./scheduler
metrics="slots miss-claims/slot redis-cpu-ms redis-net-ms redis-net-us/slot last-claim-s"
cd scheduler
for _ in $(seq "$rounds"); do
  for v in old new; do
    if ! "$tmp/$v.test" -test.run '^$' -test.bench 'OutageStart' -test.benchtime 1x -test.timeout 30m >"$tmp/$v.log" 2>&1; then
      echo "$v: the benchmark failed:" >&2
      cat "$tmp/$v.log" >&2
      exit 1
    fi
    grep '^Benchmark' "$tmp/$v.log" |
      awk -v v="$v" -v metrics="$metrics" '{ for (i = 1; i <= NF; i++) m[$i] = $(i-1)
        n = split(metrics, names, " "); line = v; for (k = 1; k <= n; k++) line = line " " names[k] " " m[names[k]]; print line }'
  done
done | tee "$tmp/rounds"
echo "BenchmarkOutageStart; machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
for v in old new; do
  label="working tree"
  [ "$v" = old ] && label=$old
  for metric in $metrics; do
    grep "^$v " "$tmp/rounds" | awk -v m="$metric" '{ for (i = 2; i < NF; i += 2) if ($i == m) print $(i+1) }' | sort -n |
      awk -v v="$v" -v l="$label" -v m="$metric" '{ x[NR] = $1 } END { if (NR == 0) exit; med = (NR % 2) ? x[(NR+1)/2] : (x[NR/2] + x[NR/2+1]) / 2; printf "  %s (%s)  %-20s median %10.3f   (min %.3f, max %.3f)\n", v, l, m, med, x[1], x[NR] }'
  done
done
