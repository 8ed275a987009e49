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
. bench/ab-redis-time.sh
ab_redis_time "${1:?usage: bench/ab-locks.sh OLDER-REVISION}" locking BenchmarkLockRedisTime "${ROUNDS:-7}" copy obtain release
