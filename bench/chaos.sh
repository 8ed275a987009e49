#!/usr/bin/env bash
# The chaos run: 5 cmd/worker processes run the lottery @every 1s for 5
# minutes against a real redis-server (appendonly yes, appendfsync always),
# while a worker is killed and restarted, one is stopped past its lease TTL,
# Redis is killed -9 and restarted from its data directory, and one worker is
# cut off Redis by a toxiproxy partition. See bench/chaos/main.go.
#
#   bench/chaos.sh                    # 5 minutes
#   bench/chaos.sh -duration 2m       # a shorter run, same faults
#   bench/chaos.sh -keep              # keep the logs and Redis's data
set -euo pipefail
cd "$(dirname "$0")/.."
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
exec go run ./bench/chaos "$@"
