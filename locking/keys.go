package locking

import (
	"fmt"
	"strings"
	"time"

	"github.com/slotcron/slotcron/internal/rediskit"
)

// Key returns prefix + ":{" + name + "}". Every key slotcron derives from it
// shares its Redis Cluster hash slot, so scripts that touch several of them
// never fail with CROSSSLOT.
func Key(prefix, name string) string {
	return prefix + ":{" + name + "}"
}

// derivedKey returns a key for suffix that lives in key's cluster slot:
// key + ":" + suffix when key has a hash tag, else "{" + key + "}:" + suffix.
func derivedKey(key, suffix string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if tag := rediskit.HashTag(key); tag != key {
		return key + ":" + suffix, nil
	}
	if strings.ContainsRune(key, '}') {
		return "", fmt.Errorf("%w: %q has no hash tag and contains '}'; use locking.Key to build it", ErrInvalidKey, key)
	}
	return "{" + key + "}:" + suffix, nil
}

// releaseChannel is the pub/sub channel on which Release announces that key is free.
// It shares key's hash tag. For a key that derivedKey refuses, the channel is
// still usable (channels are not keys); only its shard differs.
func releaseChannel(key string) string {
	if ch, err := derivedKey(key, "released"); err == nil {
		return ch
	}
	return key + ":released"
}

// receiptTTL is how long Redis keeps a release's receipt: longer than a
// Release can go on sending its script (releaseTimeout; with go-redis's
// defaults and no deadline on the socket, 4 tries of a 3s read timeout).
const receiptTTL = time.Minute

// releaseKeys are the keys a release script takes: key, and key's release
// receipt, which holds the token of its last release, so that a release
// whose answer was lost and that go-redis sent again finds it released by
// its own token and does not answer ErrNotHeld. A key that derivedKey
// refuses (no hash tag, but a '}') has no receipt.
func releaseKeys(key string) []string {
	if receipt, err := derivedKey(key, "release-receipt"); err == nil {
		return []string{key, receipt}
	}
	return []string{key}
}
