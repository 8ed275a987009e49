#!/usr/bin/env bash
# What Redis spends on each command that a slot's claim and finish make, on
# this machine: each is run 10,000 times in one Lua script (as the claim and
# finish scripts call them), on a Redis of its own, and timed by INFO
# commandstats (each on keys set up as a slot finds them). The sum is the
# floor of Redis's time per slot for slotcron's protocol (a winning claim and
# its finish), before the scripts' own Lua code and the network: for
# protocol 2 (this version: a record is a string, a job's state one hash,
# its ring of ended slots another)
# and, side by side, protocol 1 (earlier versions: a record was a hash, and
# the lease, fence, high-water mark, running set and history were keys of
# their own). Medians of ROUNDS rounds (default 5).
#
#   bench/redis-floor.sh
set -euo pipefail
rounds=${ROUNDS:-5}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --daemonize yes --logfile "$dir/log" >/dev/null
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
R() { redis-cli -p "$port" "$@"; }

# us_per_call SETUP SCRIPT: Redis's µs per loop iteration of SCRIPT (10,000
# iterations), run after SETUP (not timed) on an empty Redis.
us_per_call() {
  R flushall >/dev/null
  [ -n "$1" ] && R eval "$1" 0 >/dev/null
  R config resetstat >/dev/null
  R eval "$2" 0 >/dev/null
  R info commandstats | awk -F'usec=' '/^cmdstat_eval:/ { split($2, a, ","); printf "%.2f\n", a[1] / 10000 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'; }

declare -a names setups scripts
add() { names+=("$1"); setups+=("$2"); scripts+=("$3"); }
loop() { echo "for i=1,10000 do $1 end"; }
rec="'sc:{job'..i..'}:slot:1795468959'"
key() { echo "'sc:{job'..i..'}:$1'"; }
add "loop and key name only (subtracted)" "" "$(loop "local k = $rec")"

# Protocol 2: the record (a string), the job's state (a hash) and its ring
# of the 32 slots that ended last (a hash), as a job that runs every second
# finds them: its last run ended, its ring full.
ring=$(loop "for n=0,31 do redis.call('HSET', $(key ended), n, '17954689'..(n+20)) end")
state=$(loop "redis.call('HSET', $(key state), 'lease', '', 'fence', '1795468958123456', 'last', 1795468958, 'running', '', 'ends', 90)")
running_state=$(loop "redis.call('HSET', $(key state), 'lease', 'Zm9vYmFyYmF6cXV4.1 1795468959 1795468961000 replica-1', 'fence', '1795468959123456', 'last', 1795468959, 'running', '1795468959', 'ends', 90)")
record2="'running 1795468959123456 1 1795468959000 0 0 job Zm9vYmFyYmF6cXV4.1 0199abcd-1234-7abc-8def-0123456789ab 1795468959 9:replica-10:0:0:0:'"
final2="'done 1795468959123456 1 1795468959000 1795468959004 0 job Zm9vYmFyYmF6cXV4.1 0199abcd-1234-7abc-8def-0123456789ab 1795468959 9:replica-10:0:0:0:'"
add "p2 claim: HMGET the job's state" "$state" "$(loop "redis.call('HMGET', $(key state), 'lease', 'fence', 'last', 'running', 'paused_by', 'paused_note', 'ends')")"
add "p2 claim: SET the record NX PX GET" "" "$(loop "redis.call('SET', $rec, $record2, 'NX', 'PX', 86400000, 'GET')")"
add "p2 claim: HSET the job's state" "$state" "$(loop "redis.call('HSET', $(key state), 'lease', 'Zm9vYmFyYmF6cXV4.1 1795468959 1795468961000 replica-1', 'fence', '1795468959123456', 'running', '1795468959', 'last', 1795468959)")"
add "p2 finish: HMGET the job's state" "$running_state" "$(loop "redis.call('HMGET', $(key state), 'lease', 'running', 'ends')")"
add "p2 finish: SET the record PX" "$(loop "redis.call('SET', $rec, $record2, 'PX', 86400000)")" "$(loop "redis.call('SET', $rec, $final2, 'PX', 86400000)")"
add "p2 finish: HSET the job's state" "$running_state" "$(loop "redis.call('HSET', $(key state), 'lease', '', 'running', '', 'ends', 91)")"
add "p2 finish: HSET the ended ring" "$ring" "$(loop "redis.call('HSET', $(key ended), 26, '1795468959')")"

# Protocol 1: the records, leases, running sets and histories a finish finds.
record=$(loop "redis.call('HSET', $rec, 'slot', 1795468959, 'owner', 'replica-1', 'token', 'Zm9vYmFyYmF6cXV4.1', 'attempt', 1, 'fence', '1795468959123456', 'state', 'running', 'lease', 'job', 'started', 1795468959123, 'run_id', '0199abcd-1234-7abc-8def-0123456789ab')")
running=$(loop "redis.call('ZADD', $(key running), 1795468959, 1795468959)")
lease=$(loop "redis.call('SET', $(key lease), 'Zm9vYmFyYmF6cXV4.1 1795468959 replica-1')")
history=$(loop "for n=1,20 do redis.call('XADD', $(key runs), 'MAXLEN', '~', 1000, '*', 'slot', 1795468900 + n, 'event', 'done', 'replica', 'replica-1', 'attempt', '1', 'error', '') end")
last=$(loop "redis.call('ZADD', $(key last), 1795468958, 'last')")
add "p1 claim: HMGET the record (none)" "" "$(loop "redis.call('HMGET', $rec, 'owner','state','token','fence','attempt','run_id')")"
add "p1 claim: HMGET the pause (none)" "" "$(loop "redis.call('HMGET', $(key paused), 'note', 'by')")"
add "p1 claim: SET the lease NX PX" "" "$(loop "redis.call('SET', $(key lease), 'Zm9vYmFyYmF6cXV4.1 1795468959 replica-1', 'PX', 15000, 'NX')")"
add "p1 claim: SET the fence GET" "" "$(loop "redis.call('SET', $(key fence), '1795468959123456', 'GET')")"
add "p1 claim: HSET the record (9 fields)" "" "$record"
add "p1 claim: PEXPIRE the record" "$record" "$(loop "redis.call('PEXPIRE', $rec, 86400000)")"
add "p1 claim: ZADD GT the high-water mark" "$last" "$(loop "redis.call('ZADD', $(key last), 'GT', 1795468959, 'last')")"
add "p1 claim: ZADD the running set" "" "$running"
add "p1 finish: HMGET the record" "$record" "$(loop "redis.call('HMGET', $rec, 'token', 'state', 'slot', 'attempt')")"
add "p1 finish: HSET the record (4 fields)" "$record" "$(loop "redis.call('HSET', $rec, 'state', 'done', 'finished', 1795468959200, 'error', '', 'result', '')")"
add "p1 finish: PEXPIRE the record" "$record" "$(loop "redis.call('PEXPIRE', $rec, 86400000)")"
add "p1 finish: ZREM the running set" "$running" "$(loop "redis.call('ZREM', $(key running), 1795468959)")"
add "p1 finish: GET the lease" "$lease" "$(loop "redis.call('GET', $(key lease))")"
add "p1 finish: DEL the lease" "$lease" "$(loop "redis.call('DEL', $(key lease))")"
add "p1 finish: XADD the history" "$history" "$(loop "redis.call('XADD', $(key runs), 'MAXLEN', '~', 1000, '*', 'slot', 1795468959, 'event', 'done', 'replica', 'replica-1', 'attempt', '1', 'error', '')")"

declare -a med
for i in "${!names[@]}"; do
  med[i]=$(for _ in $(seq "$rounds"); do us_per_call "${setups[i]}" "${scripts[i]}"; done | median)
done
base=${med[0]}
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), Redis $(redis-server --version | awk '{ print $3 }' | cut -d= -f2)"
echo "Redis µs per call from Lua, median of $rounds rounds of 10,000, less the loop's own cost ($base µs):"
declare -A sum
for i in "${!names[@]}"; do
  [ "$i" -eq 0 ] && continue
  v=$(echo "${med[i]} - $base" | bc -l)
  printf "  %-40s %6.2f\n" "${names[i]}" "$v"
  part=$(echo "${names[i]}" | cut -d: -f1) # "p2 claim", "p1 finish", ...
  sum[$part]=$(echo "${sum[$part]:-0} + $v" | bc -l)
done
for p in p2 p1; do
  printf "protocol %s: a winning claim's commands %6.2f, its finish's %6.2f, one slot %6.2f\n" "${p#p}" \
    "${sum["$p claim"]}" "${sum["$p finish"]}" "$(echo "${sum["$p claim"]} + ${sum["$p finish"]}" | bc -l)"
done
