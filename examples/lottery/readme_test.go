package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/slotcron/slotcron/internal/gotool"
)

// TestREADMECommands checks that the README gives its two commands, and
// runs the first the way a newcomer does, from the repository's root: the
// demo (with -slots 2, to be quick, and this test's -race when it has
// it: see gotool), which must end with a good verdict.
// The second is the command that runs this test: it is not run again from
// here. (It was, with -run '^$', to build every package's tests: on a
// fresh machine that compiled and linked the whole module with -race a
// second time, beside the first, and cost CI minutes for nothing that the
// command running it does not show.)
func TestREADMECommands(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"go run ./examples/lottery", "go test -race ./..."} {
		if !strings.Contains(string(readme), "\n"+cmd) {
			t.Fatalf("README.md does not give the command %q at the start of a line", cmd)
		}
	}

	demo := gotool.Command("run", "./examples/lottery", "-slots", "2")
	demo.Dir = root
	out, err := demo.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(demo.Args, " "), err, out)
	}
	verdict := regexp.MustCompile(`(?m)^2 slots, 2 draws, 0 duplicate draws, 0 missed$`)
	if !verdict.Match(out) {
		t.Fatalf("no good verdict in the demo's output:\n%s", out)
	}
	if lines := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d  winner replica-\d`).FindAll(out, -1); len(lines) != 2 {
		t.Fatalf("want a line per slot, found %d:\n%s", len(lines), out)
	}
}
