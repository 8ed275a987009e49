package locking

import (
	"strings"
	"testing"

	"github.com/slotcron/slotcron/internal/rediskit"
)

func TestKeyHelperPutsNameInTag(t *testing.T) {
	k := Key("slotcron", "lottery")
	if k != "slotcron:{lottery}" || rediskit.HashTag(k) != "lottery" {
		t.Fatalf("Key = %q (tag %q)", k, rediskit.HashTag(k))
	}
}

func FuzzDerivedKeySharesSlot(f *testing.F) {
	for _, k := range []string{"plain", "{tag}x", "a{}b", "a{b", "a}b", "{}", "}{", "x{y}z"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		d, err := derivedKey(key, "fence")
		if err != nil {
			if key != "" && !strings.ContainsRune(key, '}') {
				t.Fatalf("derivedKey(%q) refused a key without '}': %v", key, err)
			}
			return
		}
		if rediskit.HashTag(d) != rediskit.HashTag(key) {
			t.Fatalf("derivedKey(%q) = %q hashes %q, the key hashes %q", key, d, rediskit.HashTag(d), rediskit.HashTag(key))
		}
	})
}

// TestScriptHeaders keeps every script documented.
func TestScriptHeaders(t *testing.T) {
	for _, p := range rediskit.ScriptHeaderProblems(scriptDir) {
		t.Error(p)
	}
}
