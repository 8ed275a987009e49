#!/usr/bin/env bash
# Runs BenchmarkDispatch with 5 replicas for an older revision and for the
# working tree, alternating, ROUNDS times each, and prints each round and the
# medians side by side: dispatch p50 and p99, Redis's CPU per slot (all of
# it, and in scripts), the longest command, the replicas' CPU per slot, the
# share of runs started, the process's RSS (BenchmarkScale only), the
# commands Redis ran per slot (those scripts call among them: a count, which
# the machine's load does not change) and the allocations per tick.
# The older revision is built from a temporary git worktree. BENCH runs
# another benchmark cell instead (a -test.bench pattern). OLD_ENV and
# NEW_ENV are settings (VAR=value ...) that each side runs with: with HEAD as
# the older revision, they compare two settings on one version.
#
#   bench/ab-dispatch.sh 7f66bca            # 5 rounds each, about 2 minutes
#   ROUNDS=9 ROUTING=race bench/ab-dispatch.sh HEAD~3   # default: spread
#   BENCH='Scale/jobs=10000/replicas=5$' bench/ab-dispatch.sh 7f66bca
#   BENCH='Scale/jobs=10000$/replicas=5$' NEW_ENV=BENCH_REDIS_FIFO=1 bench/ab-dispatch.sh HEAD
#   SAME_BENCH=1 BENCH='Scale/jobs=10000$/replicas=20$' bench/ab-dispatch.sh 74f2ec0
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/ab-dispatch.sh <older revision>}
rounds=${ROUNDS:-5}
routing=${ROUTING:-spread}
bench=${BENCH:-Dispatch/replicas=5/routing=$routing}
old_env=${OLD_ENV:-}
new_env=${NEW_ENV:-}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" 2>/dev/null || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/old" "$old"
# SAME_BENCH=1: the older revision runs the working tree's benchmark file,
# so that both report the same figures (when it compiles there).
[ -n "${SAME_BENCH:-}" ] && cp scheduler/bench_test.go "$tmp/old/scheduler/bench_test.go"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./scheduler)
go test -c -o "$tmp/new.test" ./scheduler
cd scheduler
for _ in $(seq "$rounds"); do
  for v in old new; do
    settings=$old_env
    [ "$v" = new ] && settings=$new_env
    # shellcheck disable=SC2086 # settings is a list of VAR=value words
    env $settings "$tmp/$v.test" -test.run '^$' -test.bench "$bench" -test.benchtime 1x -test.timeout 30m | grep '^Benchmark' |
      awk -v v="$v" '{ for (i = 1; i <= NF; i++) m[$i] = $(i-1)
        printf "%s p50-ms %s p99-ms %s redis-cpu-us/slot %s redis-script-us/slot %s slowest-cmd-ms %s go-cpu-us/slot %s cmds-over-5ms %s started-%% %s rss-mb %s redis-calls/slot %s go-allocs/tick %s\n", v,
          m["p50-ms"], m["p99-ms"], m["redis-cpu-us/slot"], m["redis-script-us/slot"], m["slowest-cmd-ms"], m["go-cpu-us/slot"], m["cmds-over-5ms"], m["started-%"], m["rss-mb"], m["redis-calls/slot"], m["go-allocs/tick"] }'
  done
done | tee "$tmp/rounds"
echo "$bench; machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
for v in old new; do
  for col in 3 5 7 9 11 13 15 17 19 21 23; do
    grep "^$v " "$tmp/rounds" | awk -v c="$col" '{ print $c }' | sort -n |
      awk -v v="$v" -v m="$(grep "^$v " "$tmp/rounds" | head -1 | awk -v c="$col" '{ print $(c-1) }')" '{ x[NR] = $1 } END { med = (NR % 2) ? x[(NR+1)/2] : (x[NR/2] + x[NR/2+1]) / 2; printf "  %s (%s)  %-20s median %8.3f   (min %.3f, max %.3f)\n", v, (v == "old" ? "'"$old${old_env:+ $old_env}"'" : "working tree'"${new_env:+ $new_env}"'"), m, med, x[1], x[NR] }'
  done
done
