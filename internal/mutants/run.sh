#!/usr/bin/env bash
# Mutation check of the safety checks: each line of mutants.tsv breaks one
# check, in a Lua script or in Go (a literal text, found exactly once,
# replaced), and the tests must then fail. Each mutant runs in a scratch
# worktree of HEAD (commit first): the tests of the mutated file's package,
# then, while they pass, those of slotstore, scheduler, locking and worker,
# without -race. Prints, per mutant, "killed" with the first tests that
# failed, or "SURVIVED": a check no test holds. Exits 1 if one survived or
# could not be applied.
#
#   internal/mutants/run.sh                 # every mutant (about an hour on 2 cores)
#   ONLY=renew internal/mutants/run.sh      # those whose line matches (grep -E)
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
git worktree add --detach "$work/tree" HEAD >/dev/null 2>&1
cp "$list" "$work/mutants.tsv" # read from a copy: an edit of the list mid-run does not shift it
cd "$work/tree"
unset REDIS_ADDR # each package's tests start their own Redis (internal/redistest)

killed=0 survived=0 broken=0
while IFS=$'\t' read -r file why from to; do
  [[ -z $file || $file == \#* ]] && continue
  if [[ -n ${ONLY:-} ]] && ! grep -qE -- "$ONLY" <<<"$file $why"; then
    continue
  fi
  git checkout -q -- .
  # \n and \t in the list stand for a newline and a tab.
  if ! FROM=$from TO=$to perl -0777 -i -pe '
      BEGIN { ($f, $t) = map { my $s = $_; $s =~ s/\\n/\n/g; $s =~ s/\\t/\t/g; $s } @ENV{qw(FROM TO)} }
      my $n = () = /\Q$f\E/g;
      die "the text is found $n times, not once\n" if $n != 1;
      s/\Q$f\E/$t/;' "$file" 2>"$work/perl.err"; then
    echo "NOT APPLIED  $file: $why: $(cat "$work/perl.err")"
    broken=$((broken + 1))
    continue
  fi
  own=./$(dirname "$file")
  own=${own%/scripts} # a Lua script is its package's
  verdict=""
  for pkg in "$own" ./slotstore ./scheduler ./locking ./worker; do
    [[ $pkg != "$own" && $verdict == *"$pkg "* ]] && continue
    if ! go test -count=1 -failfast -timeout 20m "$pkg" >"$work/out" 2>&1; then
      tests=$(grep -oE '^\s*--- FAIL: \S+' "$work/out" | awk '{ print $3 }' | head -3 | paste -sd, -)
      if [[ -z $tests ]]; then
        tests="no test failed by name: $(grep -m1 -E 'panic|build failed|cannot|error' "$work/out" || tail -1 "$work/out")"
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
