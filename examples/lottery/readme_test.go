package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMECommands runs the two commands of the README the way a newcomer
// does, from the repository's root: the demo (with -slots 2, to be quick),
// which must end with a good verdict, and the test command, which must
// build every package's tests with -race. It runs no test itself there: CI
// runs the full suite, and running it from inside itself would recurse.
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

	demo := exec.Command("go", "run", "./examples/lottery", "-slots", "2")
	demo.Dir = root
	out, err := demo.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./examples/lottery -slots 2: %v\n%s", err, out)
	}
	verdict := regexp.MustCompile(`(?m)^2 slots, 2 draws, 0 duplicate draws, 0 missed$`)
	if !verdict.Match(out) {
		t.Fatalf("no good verdict in the demo's output:\n%s", out)
	}
	if lines := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d  winner replica-\d`).FindAll(out, -1); len(lines) != 2 {
		t.Fatalf("want a line per slot, found %d:\n%s", len(lines), out)
	}

	build := exec.Command("go", "test", "-race", "-count=1", "-run", "^$", "./...")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -race -run '^$' ./...: %v\n%s", err, out)
	}
}
