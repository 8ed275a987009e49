#!/usr/bin/env bash
# The cost of redis.wait_replicas: BenchmarkClaimWait (one claim and its
# finish, on a master with one replica on this machine) without WAIT and with
# wait_replicas 1, in ROUNDS alternating pairs, each pair in a fresh Sentinel
# deployment. Prints the median of each and of their ratio.
#
#   bench/wait.sh            # 7 pairs, about a minute
#   ROUNDS=3 bench/wait.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-7}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -c -o "$out.test" ./slotstore
for i in $(seq "$rounds"); do
  "$out.test" -test.run '^$' -test.bench ClaimWait -test.benchtime 2s | grep '^BenchmarkClaimWait' | tee -a "$out" >&2
done
rm -f "$out.test"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(redis-server --version | awk '{ print $3 }')"
awk '
  /wait=0/ { a[++n] = $3 }
  /wait=1/ { b[++m] = $3 }
  function median(v, k,   i, j, t) {
    for (i = 2; i <= k; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
    return (k % 2) ? v[(k+1)/2] : (v[k/2] + v[k/2+1]) / 2
  }
  END {
    for (i = 1; i <= n; i++) r[i] = b[i] / a[i]
    printf "median of %d alternating pairs: claim+finish %.0f us without WAIT, %.0f us with wait_replicas 1; ratio %.2f\n",
      n, median(a, n) / 1000, median(b, m) / 1000, median(r, n)
  }' "$out"
