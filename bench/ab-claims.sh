#!/usr/bin/env bash
# Runs slotstore's BenchmarkClaimBatch (Redis's time per won, lost and
# contested claim, per finish and per peek, from INFO commandstats) for an
# older revision and for the working tree, alternating, ROUNDS times each,
# and prints the medians side by side with their ranges: what a change to
# the claim or finish scripts costs Redis.
#
#   bench/ab-claims.sh 81b0187          # 5 rounds each, about a minute
#   ROUNDS=9 bench/ab-claims.sh HEAD~2
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/ab-claims.sh OLDER-REVISION}
rounds=${ROUNDS:-5}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/old" "$old"
(cd "$work/old" && go test -c -o "$work/old.test" ./slotstore)
go test -c -o "$work/new.test" ./slotstore
for ((i = 1; i <= rounds; i++)); do
  for side in old new; do
    (cd slotstore && "$work/$side.test" -test.run '^$' -test.bench '^BenchmarkClaimBatch$' -test.benchtime 50x) |
      grep '^BenchmarkClaimBatch' | sed "s/^/$side /" | tee -a "$work/out" >&2
  done
done
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), Redis $(redis-server --version | awk '{ sub("v=", "", $3); print $3 }')"
printf '%-30s %-26s %-26s\n' "median of $rounds (min–max)" "$old" "working tree"
for m in won-claim lost-claim won-contested-claim lost-contested-claim finish peek; do
  row=$(printf '%-30s' "redis-us/$m")
  for side in old new; do
    cell=$(grep "^$side " "$work/out" | awk -v m="redis-us/$m" '{ for (i = 1; i <= NF; i++) if ($i == m) print $(i-1) }' | sort -n |
      awk '{ v[NR] = $1 } END { med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.2f (%.2f–%.2f)", med, v[1], v[NR] }')
    row+=$(printf ' %-26s' "$cell")
  done
  echo "$row"
done
