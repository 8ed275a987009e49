// Package gotool runs the go command from tests that build a program of
// the module (a worker, the demo) to run it as a process of its own.
//
// A test binary built with -race builds those programs with -race too, so
// that they find their packages in the build cache the test's own build
// filled, instead of compiling every dependency a second time without it
// (on a fresh 2-vCPU machine, minutes of CPU while the other packages'
// tests run). A data race in such a program is reported on its stderr, and
// turns its exit status 0 into 66; a test fails on it only where it checks
// that status (cmd/worker's workers and the demo's own process do).
package gotool

import "os/exec"

// Command returns the command "go <sub>", with the test binary's own build
// flags (-race when it was built with it), then args.
func Command(sub string, args ...string) *exec.Cmd {
	return exec.Command("go", append(append([]string{sub}, buildFlags...), args...)...)
}
