#!/usr/bin/env bash
# gocron v2 + redsync against slotcron on the same work, and the lock cycle of
# bsm/redislock, redsync and slotcron: one table each (about 2 minutes).
# A module of its own (go.mod here), so its peers stay out of slotcron's
# module graph. Needs redis-server on PATH; flags go to the program:
#
#   bench/peers/run.sh                    # 10 ticks per row, 7 rounds of 2000 lock cycles
#   bench/peers/run.sh -ticks 3 -rounds 1 # a quick look
set -euo pipefail
cd "$(dirname "$0")"
exec go run . "$@"
