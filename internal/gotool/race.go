//go:build race

package gotool

// buildFlags: this binary was built with the race detector.
var buildFlags = []string{"-race"}
