package locking

import (
	"io/fs"
	"strings"
	"testing"
)

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
		if got := hashTag(key); got != want {
			t.Errorf("hashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestKeyHelperPutsNameInTag(t *testing.T) {
	k := Key("slotcron", "lottery")
	if k != "slotcron:{lottery}" || hashTag(k) != "lottery" {
		t.Fatalf("Key = %q (tag %q)", k, hashTag(k))
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
		if hashTag(d) != hashTag(key) {
			t.Fatalf("derivedKey(%q) = %q hashes %q, the key hashes %q", key, d, hashTag(d), hashTag(key))
		}
	})
}

// TestScriptHeaders keeps every script documented: a header of comment lines
// that states its KEYS, its ARGV (when it reads any) and what it returns.
func TestScriptHeaders(t *testing.T) {
	names, err := fs.Glob(scriptFiles, "scripts/*.lua")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded scripts: %v", err)
	}
	for _, name := range names {
		src, _ := fs.ReadFile(scriptFiles, name)
		var header []string
		for _, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			header = append(header, line)
		}
		h := strings.Join(header, "\n")
		for _, want := range []string{"\n-- KEYS", "\n-- Returns"} {
			if !strings.Contains(h, want) {
				t.Errorf("%s: header lacks a %q section", name, strings.TrimSpace(want))
			}
		}
		if strings.Contains(string(src), "ARGV[") && !strings.Contains(h, "\n-- ARGV") {
			t.Errorf("%s: uses ARGV but its header does not document it", name)
		}
	}
}

func TestHashSlot(t *testing.T) {
	// From the Redis Cluster specification and CLUSTER KEYSLOT.
	for tag, want := range map[string]uint16{"123456789": 0x31C3 % 16384, "foo": 12182, "bar": 5061, "": 0} {
		if got := hashSlot(tag); got != want {
			t.Errorf("hashSlot(%q) = %d, want %d", tag, got, want)
		}
	}
}
