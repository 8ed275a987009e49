package mutants

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unescape reads a field of the list as run.sh does: \n, \t and \\ stand
// for a newline, a tab and a backslash.
func unescape(s string) string {
	s = strings.ReplaceAll(s, `\\`, "\x00")
	s = strings.ReplaceAll(s, `\n`, "\n")
	s = strings.ReplaceAll(s, `\t`, "\t")
	return strings.ReplaceAll(s, "\x00", `\`)
}

// TestEveryMutantApplies: each mutant's text is found exactly once in its
// file, and its replacement differs, so that a change to the code that
// leaves a mutant stale fails here, at once, rather than as "not applied"
// in a mutation run that may run only a subset of the list. Three mutants
// had gone stale so, testing nothing, unseen for sessions.
func TestEveryMutantApplies(t *testing.T) {
	data, err := os.ReadFile("mutants.tsv")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		f := strings.Split(line, "\t")
		if len(f) != 4 || f[1] == "" {
			t.Errorf("line %d: %d fields (want file, what it breaks, text, replacement): %q", i+1, len(f), line)
			continue
		}
		src, err := os.ReadFile(filepath.Join("..", "..", f[0]))
		if err != nil {
			t.Errorf("line %d: %v", i+1, err)
			continue
		}
		from, to := unescape(f[2]), unescape(f[3])
		if c := strings.Count(string(src), from); c != 1 {
			t.Errorf("line %d (%s: %s): its text is found %d times, not once", i+1, f[0], f[1], c)
		}
		if from == to {
			t.Errorf("line %d (%s: %s): the replacement is the text itself", i+1, f[0], f[1])
		}
	}
	if n == 0 {
		t.Fatal("no mutants in the list")
	}
}
