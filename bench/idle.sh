#!/usr/bin/env bash
# What an idle worker costs: one worker with 10 jobs, each due once an hour
# (none due during the measurement), on a local Redis, measured over
# SECONDS_IDLE (default 60) seconds after a 10s warm-up: its RSS (max and at
# the end, from /proc) and its CPU time (the sum of its threads' schedstat,
# in ns), as a share of one core. Threads that end during the window are
# not counted (a Go process keeps its threads). The issue's budget: under 30 MB RSS and 0.2% of a core.
#
#   bench/idle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
idle=${SECONDS_IDLE:-60}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --save "" --appendonly no --dir "$work" >/dev/null &
go build -o "$work/idle" ./bench/idle
{
  echo "redis:"
  echo "  addrs: [\"127.0.0.1:$port\"]"
  echo "http:"
  echo "  listen: \"127.0.0.1:0\""
  echo "jobs:"
  for i in $(seq 0 9); do
    echo "  - name: idle-$i"
    echo "    schedule: \"0 $((i * 5)) * * * *\""
  done
} >"$work/config.yaml"
# No slot in the window: the next one of each job must be after the measurement.
for i in $(seq 0 9); do
  due=$(( (i * 5 - $(date +%-M) + 60) % 60 ))
  if [ "$due" -le $(( (idle + 15) / 60 + 1 )) ]; then
    sed -i "s/\"0 $((i * 5)) \* \* \* \*\"/\"0 $(( (i * 5 + 30) % 60 )) * * * *\"/" "$work/config.yaml"
  fi
done
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$work/idle" run -config "$work/config.yaml" 2>"$work/log" &
pid=$!
sleep 10
# CPU time in ns, every thread of the process (schedstat's first field).
cpu() { cat /proc/"$pid"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f", s }'; }
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$pid/status"; }
c0=$(cpu); t0=$(date +%s.%N); maxrss=$(rss)
end=$((SECONDS + idle))
while [ $SECONDS -lt $end ]; do
  sleep 1
  r=$(rss); [ "$r" -gt "$maxrss" ] && maxrss=$r
done
c1=$(cpu); t1=$(date +%s.%N); last=$(rss)
if grep -q '"msg":"job started"' "$work/log"; then
  echo "a job ran during the measurement: not idle" >&2
  exit 1
fi
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(go version | awk '{ print $3 }')"
awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v max="$maxrss" -v last="$last" 'BEGIN {
  wall = t1 - t0; cpu = (c1 - c0) / 1e9
  printf "idle worker, 10 jobs, %.0fs: CPU %.4fs = %.4f%% of one core; RSS max %.1f MB, at the end %.1f MB\n", wall, cpu, 100 * cpu / wall, max / 1024, last / 1024
}'
