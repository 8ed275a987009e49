#!/usr/bin/env bash
# What bench/ab-claims.sh and bench/ab-locks.sh share (sourced, not run):
# ab_redis_time runs one benchmark that reports Redis's time per call
# (redis-us/<call>, from INFO commandstats) for an older revision and for
# the working tree, alternating, ROUNDS times each, and prints the medians
# side by side with their ranges.
#
#   ab_redis_time OLD PACKAGE BENCHMARK ROUNDS COPY CALL...
# OLD: the older revision; PACKAGE: its directory (slotstore); BENCHMARK:
# the benchmark's name; COPY: "copy" runs the working tree's
# PACKAGE/bench_test.go in the older revision too (the same benchmark on
# both sides), "own" its own; CALL...: the redis-us/ figures to print.
ab_redis_time() {
  local old=$1 pkg=$2 bench=$3 rounds=$4 copy=$5
  shift 5
  work=$(mktemp -d)
  trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  git worktree add -q --detach "$work/old" "$old"
  if [ "$copy" = copy ]; then
    cp "$pkg/bench_test.go" "$work/old/$pkg/bench_test.go"
  fi
  (cd "$work/old" && go test -c -o "$work/old.test" "./$pkg")
  go test -c -o "$work/new.test" "./$pkg"
  local i side m row cell
  for ((i = 1; i <= rounds; i++)); do
    for side in old new; do
      (cd "$pkg" && "$work/$side.test" -test.run '^$' -test.bench "^$bench\$" -test.benchtime 50x) |
        grep "^$bench" | sed "s/^/$side /" | tee -a "$work/out" >&2
    done
  done
  echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), Redis $(redis-server --version | awk '{ sub("v=", "", $3); print $3 }')"
  printf '%-30s %-26s %-26s\n' "median of $rounds (min–max)" "$old" "working tree"
  for m in "$@"; do
    row=$(printf '%-30s' "redis-us/$m")
    for side in old new; do
      cell=$(grep "^$side " "$work/out" | awk -v m="redis-us/$m" '{ for (i = 1; i <= NF; i++) if ($i == m) print $(i-1) }' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR == 0) { printf "none"; exit } med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.2f (%.2f–%.2f)", med, v[1], v[NR] }')
      row+=$(printf ' %-26s' "$cell")
    done
    echo "$row"
  done
}
