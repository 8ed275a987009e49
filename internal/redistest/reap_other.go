//go:build !linux

package redistest

// Elsewhere than Linux, /proc does not name the process that started a
// container (reap.go): nothing is labelled, and nothing is reaped.

func ownerLabels() map[string]string { return nil }

func reapOnce() {}
