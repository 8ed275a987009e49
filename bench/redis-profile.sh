#!/usr/bin/env bash
# Where the bench's Redis spends its CPU: BenchmarkDispatch's 5 replicas of
# 100 jobs due every second, spread routing, with perf sampling Redis over
# the counted ticks (60 by default, for enough samples), then the share of
# Redis's samples spent in (under) each of a few of its functions. Debian's
# redis-server exports its own functions' names (it is linked -rdynamic), not
# Lua's, so scripts show as a whole, and the commands they call apart.
# perf's sampling costs Redis CPU of its own: read the shares, not the run's
# Redis figures. Needs perf (Debian: apt-get install linux-perf) and the
# right to profile Redis (root, or kernel.perf_event_paranoid of 1 or less).
#
#   bench/redis-profile.sh              # 3 rounds, about 5 minutes
#   ROUNDS=5 TICKS=120 bench/redis-profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "perf is missing: install it (Debian: apt-get install linux-perf)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rounds=${ROUNDS:-3}
fns=(evalGenericCommand scriptCall mgetCommand existsCommand readQueryFromClient handleClientsWithPendingWrites serverCron
  cronUpdateMemoryStats epoll_wait)
labels=("scripts (claim, finish, renew, heartbeat...), with the commands they call"
  "  of which: the commands the scripts call"
  "spread routing's reads of records (hedgers)"
  "backstop checks"
  "reading and running commands (includes the lines above)"
  "writing replies"
  "Redis's cron (an idle Redis pays it too)"
  "  of which: its memory stats (/proc/self/stat, jemalloc)"
  "waiting for and waking on events")
# perf attaches to the Redis the bench starts itself (a redis-server on the PATH), not to a shared
# one or a container's.
unset REDIS_ADDR REDISTEST_BACKEND
go test -c -o "$work/scheduler.test" ./scheduler
for ((i = 1; i <= rounds; i++)); do
  if ! (cd scheduler && BENCH_TICKS=${TICKS:-60} BENCH_REDIS_PERF="$work/perf.data" "$work/scheduler.test" \
    -test.run '^$' -test.bench '^BenchmarkDispatch$/^replicas=5$/^routing=spread$' -test.benchtime 1x -test.timeout 60m) >"$work/log" 2>&1; then
    cat "$work/log" >&2; echo "round $i: the bench failed" >&2; exit 1
  fi
  grep '^Benchmark' "$work/log" >&2
  if ! perf report -i "$work/perf.data" --children --sort symbol -g none --stdio >"$work/report" 2>"$work/perf.err"; then
    cat "$work/perf.err" >&2; echo "round $i: perf report failed" >&2; exit 1
  fi
  grep -m1 '^# Samples' "$work/report" >&2 || true
  # The largest inclusive share perf gives each function (an inlined copy
  # may be listed apart), one line per function: "<function> <share>"; a
  # function perf did not sample is said on stderr, and counts 0.
  for f in "${fns[@]}"; do
    awk -v f="$f" '$3 == "[.]" && $4 == f { v = $1; sub("%", "", v); if (v + 0 > m) m = v + 0; seen = 1 }
      END { if (!seen) print "round '"$i"': no sample under " f >"/dev/stderr"; print f, m + 0 }' "$work/report"
  done >>"$work/shares"
done
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), Redis $(redis-server --version | awk '{ sub("v=", "", $3); print $3 }')"
echo "median of $rounds rounds (min–max): share of Redis's perf samples under each function, those it calls included"
for i in "${!fns[@]}"; do
  awk -v f="${fns[$i]}" '$1 == f { print $2 }' "$work/shares" | sort -n |
    awk -v f="${fns[$i]}" -v l="${labels[$i]}" '{ v[NR] = $1 } END { med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
      printf "  %-31s %5.1f%% (%4.1f–%4.1f)   %s\n", f, med, v[1], v[NR], l }'
done
