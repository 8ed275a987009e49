#!/usr/bin/env bash
# Runs locking's BenchmarkLockRedisTime (Redis's time per Obtain and per
# Release of a free key, from INFO commandstats) for an older revision and
# for the working tree, alternating, ROUNDS times each, and prints the
# medians side by side with their ranges: what a change to the lock scripts
# costs Redis. The working tree's bench_test.go is copied into the older
# revision, so the two sides run the same benchmark.
#
#   bench/ab-locks.sh 012fd0c          # 7 rounds each, about a minute
#   ROUNDS=9 bench/ab-locks.sh HEAD~2
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/ab-locks.sh OLDER-REVISION}
rounds=${ROUNDS:-7}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/old" "$old"
cp locking/bench_test.go "$work/old/locking/bench_test.go"
(cd "$work/old" && go test -c -o "$work/old.test" ./locking)
go test -c -o "$work/new.test" ./locking
for ((i = 1; i <= rounds; i++)); do
  for side in old new; do
    (cd locking && "$work/$side.test" -test.run '^$' -test.bench '^BenchmarkLockRedisTime$' -test.benchtime 50x) |
      grep '^BenchmarkLockRedisTime' | sed "s/^/$side /" | tee -a "$work/out" >&2
  done
done
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), Redis $(redis-server --version | awk '{ sub("v=", "", $3); print $3 }')"
printf '%-30s %-26s %-26s\n' "median of $rounds (min–max)" "$old" "working tree"
for m in obtain release; do
  row=$(printf '%-30s' "redis-us/$m")
  for side in old new; do
    cell=$(grep "^$side " "$work/out" | awk -v m="redis-us/$m" '{ for (i = 1; i <= NF; i++) if ($i == m) print $(i-1) }' | sort -n |
      awk '{ v[NR] = $1 } END { med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.2f (%.2f–%.2f)", med, v[1], v[NR] }')
    row+=$(printf ' %-26s' "$cell")
  done
  echo "$row"
done
