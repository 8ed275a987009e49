#!/usr/bin/env bash
# Runs BenchmarkDispatch with 5 replicas for an older revision and for the
# working tree, alternating, ROUNDS times each, and prints each round and the
# medians side by side. The older revision is built from a temporary git
# worktree.
#
#   bench/ab-dispatch.sh 7f66bca            # 5 rounds each, about 2 minutes
#   ROUNDS=9 bench/ab-dispatch.sh HEAD~3
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/ab-dispatch.sh <older revision>}
rounds=${ROUNDS:-5}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" 2>/dev/null || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/old" "$old"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./scheduler)
go test -c -o "$tmp/new.test" ./scheduler
cd scheduler
for _ in $(seq "$rounds"); do
  for v in old new; do
    "$tmp/$v.test" -test.run '^$' -test.bench 'Dispatch/replicas=5' -test.benchtime 1x | grep '^BenchmarkDispatch' |
      awk -v v="$v" '{ for (i = 1; i <= NF; i++) if ($i == "p50-ms" || $i == "p99-ms") m[$i] = $(i-1); printf "%s p50-ms %s p99-ms %s\n", v, m["p50-ms"], m["p99-ms"] }'
  done
done | tee "$tmp/rounds"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
for v in old new; do
  for col in 3 5; do
    grep "^$v " "$tmp/rounds" | awk -v c="$col" '{ print $c }' | sort -n |
      awk -v v="$v" -v m="$([ "$col" = 3 ] && echo p50-ms || echo p99-ms)" '{ x[NR] = $1 } END { med = (NR % 2) ? x[(NR+1)/2] : (x[NR/2] + x[NR/2+1]) / 2; printf "  %s (%s)  %s median %.3f   (min %.3f, max %.3f)\n", v, (v == "old" ? "'"$old"'" : "working tree"), m, med, x[1], x[NR] }'
  done
done
