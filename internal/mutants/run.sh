#!/usr/bin/env bash
# Mutation check of the safety checks: each line of mutants.tsv breaks one
# check, in a Lua script, in Go or in a dashboard file (a literal text, found exactly once,
# replaced), and the tests must then fail. Each mutant runs in a scratch
# worktree of HEAD (commit first), once the tests pass there unmutated: the
# tests of the mutated file's package, then, while they pass, those of
# slotstore, scheduler, locking and worker, without -race. Prints, per mutant,
# "killed" with the first tests that failed, or "SURVIVED": a check no test
# holds. Exits 1 if one survived or could not be applied (its text not found
# exactly once, or the mutant does not build).
#
#   internal/mutants/run.sh                 # every mutant (about an hour on 2 cores)
#   ONLY=renew internal/mutants/run.sh      # those whose file or description matches (grep -E)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
list=$root/internal/mutants/mutants.tsv
work=$(mktemp -d)
cleanup() {
  git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
git worktree add --detach "$work/tree" HEAD >/dev/null
cp "$list" "$work/mutants.tsv" # read from a copy: an edit of the list mid-run does not shift it
cd "$work/tree"
unset REDIS_ADDR # each package's tests start their own Redis (internal/redistest)
packages=(./internal/validity ./slotstore ./scheduler ./locking ./worker ./examples/lottery)

# The tests must pass unmutated first: a failure that has nothing to do with a mutant (a
# missing Chromium or Docker for ./worker, a flaky test) would otherwise count as a kill.
for pkg in "${packages[@]}"; do
  if ! go test -count=1 -timeout 20m "$pkg" >"$work/out" 2>&1; then
    cat "$work/out"; echo "the tests of $pkg fail with no mutant: fix that first" >&2; exit 2
  fi
done
echo "unmutated: ${packages[*]} pass"

killed=0 survived=0 broken=0
while IFS=$'\t' read -r file why from to; do
  [[ -z $file || $file == \#* ]] && continue
  if [[ -n ${ONLY:-} ]] && ! grep -qE -- "$ONLY" <<<"$file $why"; then
    continue
  fi
  git checkout -q -- .
  # \n, \t and \\ in the list stand for a newline, a tab and a backslash.
  if ! FROM=$from TO=$to perl -0777 -i -pe '
      BEGIN { ($f, $t) = map { my $s = $_; $s =~ s/\\\\/\0/g; $s =~ s/\\n/\n/g; $s =~ s/\\t/\t/g; $s =~ s/\0/\\/g; $s } @ENV{qw(FROM TO)} }
      my $n = () = /\Q$f\E/g;
      die "the text is found $n times, not once\n" if $n != 1;
      s/\Q$f\E/$t/;' "$file" 2>"$work/perl.err"; then
    echo "NOT APPLIED  $file: $why: $(cat "$work/perl.err")"
    broken=$((broken + 1))
    continue
  fi
  own=$(dirname "$file")
  while [ "$own" != . ] && ! compgen -G "$own/*.go" >/dev/null; do # a Lua script or a dashboard file is its package's
    own=$(dirname "$own")
  done
  if ! compgen -G "$own/*.go" >/dev/null; then # (the root holds none: a file outside every package)
    echo "NOT APPLIED  $file: $why: no Go package holds it"
    broken=$((broken + 1))
    continue
  fi
  own=./$own
  if ! go test -c -o /dev/null "$own" >"$work/out" 2>&1; then # a kill must come from a test, not the compiler
    echo "NOT APPLIED  $file: $why: it does not build: $(head -2 "$work/out" | paste -sd' ' -)"
    broken=$((broken + 1))
    continue
  fi
  verdict=""
  for pkg in "$own" ./slotstore ./scheduler ./locking ./worker; do
    [[ $verdict == *"$pkg "* ]] && continue # once each, its own first
    if ! go test -count=1 -failfast -timeout 20m "$pkg" >"$work/out" 2>&1; then
      tests=$( { grep -oE '^\s*--- FAIL: \S+' "$work/out" || true; } | awk '{ print $3 }' | head -3 | paste -sd, -)
      if [[ -z $tests ]]; then
        tests="no test failed by name: $( { grep -m1 -E 'panic|timed out|leak|error' "$work/out" || tail -1 "$work/out"; } | cut -c1-200)"
      fi
      verdict="killed by $pkg: $tests"
      break
    fi
    verdict+="$pkg "
  done
  if [[ $verdict == killed* ]]; then
    echo "killed       $file: $why ($verdict)"
    killed=$((killed + 1))
  else
    echo "SURVIVED     $file: $why (passed: $verdict)"
    survived=$((survived + 1))
  fi
done <"$work/mutants.tsv"
echo "$killed killed, $survived survived, $broken not applied"
[[ $survived -eq 0 && $broken -eq 0 ]]
