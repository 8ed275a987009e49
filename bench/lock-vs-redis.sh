#!/usr/bin/env bash
# Compares slotcron's Obtain+Release with redis-benchmark's single commands on
# one fresh redis-server, in interleaved rounds, and prints medians and
#   ratio = (2 x one-command latency) / (Obtain+Release latency)
# Our floor is two round trips, so the target is ratio >= 0.85.
#
#   bench/lock-vs-redis.sh            # 5 rounds of 20000 operations each
#   ROUNDS=9 N=50000 bench/lock-vs-redis.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
n=${N:-20000}

for tool in redis-server redis-cli redis-benchmark go; do
  command -v "$tool" >/dev/null || { echo "lock-vs-redis: $tool is not installed" >&2; exit 1; }
done

work=$(mktemp -d)
port=""
for p in $(shuf -i 20000-60000 -n 50); do
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "lock-vs-redis: no free port" >&2; exit 1; }
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log"
trap 'kill "$(cat "$work/redis.pid")" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

go test -c -o "$work/locking.test" ./locking
# A script of the same shape as ours: a token-checked GET.
sha=$(redis-cli -p "$port" SCRIPT LOAD "if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end return 0")

# gobench NAME: mean ns/op of one Go benchmark, in microseconds
gobench() {
  REDIS_ADDR="127.0.0.1:$port" "$work/locking.test" -test.run '^$' -test.bench "$1" -test.benchtime "${n}x" |
    awk '/ns\/op/ { printf "%.1f\n", $3 / 1000 }'
}
# rb ARGS...: redis-benchmark's mean latency with one client, in microseconds
rb() {
  redis-benchmark -p "$port" -n "$n" -c 1 -r 1000000 --csv "$@" |
    awk -F'"' 'NR == 2 { printf "%.1f\n", $6 * 1000 }'
}

: >"$work/ours"; : >"$work/set"; : >"$work/eval"; : >"$work/base"
for i in $(seq "$rounds"); do
  gobench '^BenchmarkObtainRelease/serial$' >>"$work/ours"
  rb SET 'lvr:__rand_int__' v NX PX 10000 >>"$work/set"
  rb EVALSHA "$sha" 1 'lvr:__rand_int__' token >>"$work/eval"
  gobench '^BenchmarkBaselineSetNX$' >>"$work/base"
  echo "round $i/$rounds done" >&2
done

median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ours=$(median "$work/ours"); set1=$(median "$work/set"); eval1=$(median "$work/eval"); base=$(median "$work/base")

echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
echo "one fresh redis-server on 127.0.0.1:$port; median of $rounds interleaved rounds of $n operations, one client"
printf '  %-44s %8s us\n' "redis-benchmark SET NX PX (one command)" "$set1"
printf '  %-44s %8s us\n' "redis-benchmark EVALSHA (one command)" "$eval1"
printf '  %-44s %8s us\n' "go-redis SET NX PX + DEL (two commands)" "$base"
printf '  %-44s %8s us\n' "slotcron Obtain + Release (two scripts)" "$ours"
awk -v s="$set1" -v e="$eval1" -v o="$ours" -v b="$base" 'BEGIN {
  printf "ratio = 2 x SET NX PX / Obtain+Release = %.2f\n", 2 * s / o
  printf "ratio = 2 x EVALSHA   / Obtain+Release = %.2f\n", 2 * e / o
  printf "go-redis two commands / Obtain+Release = %.2f (client overhead removed)\n", b / o
  printf "target: ratio >= 0.85\n"
}'
