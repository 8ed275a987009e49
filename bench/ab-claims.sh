#!/usr/bin/env bash
# Runs slotstore's BenchmarkClaimBatch (Redis's time per won, lost and
# contested claim, per finish and per peek, from INFO commandstats) for an
# older revision and for the working tree, alternating, ROUNDS times each,
# and prints the medians side by side with their ranges: what a change to
# the claim or finish scripts costs Redis. Each revision runs its own
# bench_test.go.
#
#   bench/ab-claims.sh 81b0187          # 5 rounds each, about a minute
#   ROUNDS=9 bench/ab-claims.sh HEAD~2
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/ab-redis-time.sh
ab_redis_time "${1:?usage: bench/ab-claims.sh OLDER-REVISION}" slotstore BenchmarkClaimBatch "${ROUNDS:-5}" own \
  won-claim lost-claim won-contested-claim lost-contested-claim finish peek
