package rediskit

import "testing"

func TestHashTag(t *testing.T) {
	tests := map[string]string{
		"plain":          "plain",
		"{user}:lock":    "user",
		"a{b}c{d}":       "b",
		"a{}b":           "a{}b", // empty tag: the whole key
		"a{b":            "a{b",
		"a}b{c}":         "c",
		"p:{job}:slot:1": "job",
		"{}{x}":          "{}{x}",
	}
	for key, want := range tests {
		if got := HashTag(key); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestHashSlot(t *testing.T) {
	// From the Redis Cluster specification and CLUSTER KEYSLOT.
	for tag, want := range map[string]uint16{"123456789": 0x31C3 % 16384, "foo": 12182, "bar": 5061, "": 0} {
		if got := HashSlot(tag); got != want {
			t.Errorf("HashSlot(%q) = %d, want %d", tag, got, want)
		}
	}
}
