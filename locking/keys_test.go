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

// TestScriptHeaders keeps every script documented: KEYS, ARGV and what it returns.
func TestScriptHeaders(t *testing.T) {
	names, err := fs.Glob(scriptFiles, "scripts/*.lua")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded scripts: %v", err)
	}
	for _, name := range names {
		src, _ := fs.ReadFile(scriptFiles, name)
		header := string(src)
		if i := strings.Index(header, "\n\n"); i > 0 {
			header = header[:i]
		}
		for _, want := range []string{"-- KEYS[1]", "-- Returns"} {
			if !strings.Contains(string(src), want) {
				t.Errorf("%s: header lacks %q", name, want)
			}
		}
		if strings.Contains(string(src), "ARGV[") && !strings.Contains(string(src), "-- ARGV[1]") {
			t.Errorf("%s: uses ARGV but does not document it", name)
		}
	}
}
