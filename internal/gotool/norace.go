//go:build !race

package gotool

// buildFlags: this binary was built without the race detector.
var buildFlags []string
