package worker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slotcron/slotcron/jobs"
)

// TestSyntaxErrorLines: a YAML syntax error names the line it is on. yaml.v3
// reports the line of the enclosing block, off by one, or none at all.
func TestSyntaxErrorLines(t *testing.T) {
	far, farJobs := unknownJobs(64 << 10)
	tests := []struct{ name, yaml, want string }{
		{"key indented less", "redis:\n  mode: single\n addrs: []\n" + minimal,
			`config.yaml:3: config: did not find expected key`},
		{"key indented more", "redis:\n  mode: single\n  addrs: [\"127.0.0.1:6379\"]\n   db: 1\n" + minimal,
			`config.yaml:4: config: did not find expected key`},
		{"value after a value", "redis:\n  mode: single\nlease: ttl: 5s\n" + minimal,
			`config.yaml:3: config: mapping values are not allowed in this context`},
		{"unclosed double quote", "redis:\n  mode: \"single\n  db: 1\n" + minimal,
			`config.yaml:2: config: the quoted string that opens on this line runs to line 6, then: found character that cannot start any token`},
		{"unclosed quote on line 1", "replica_id: \"a\n" + minimal,
			`config.yaml:1: config: the quoted string that opens on this line runs to line 4, then: found character that cannot start any token`},
		{"unclosed quote at the end", minimal + "    overlap: \"skip\n",
			`config.yaml:4: config: the quoted string that opens on this line is never closed`},
		{"unclosed quote at the end, on line 1", "replica_id: 'a\n\n\n",
			`config.yaml:1: config: the quoted string that opens on this line is never closed`},
		{"unclosed single quote", minimal + "    timeout: '5s\n    overlap: skip\n",
			`config.yaml:4: config: the quoted string that opens on this line is never closed`},
		{"unclosed list", "redis:\n  mode: single\n  addrs: [a:1\n" + minimal,
			`config.yaml:3: config: did not find expected ',' or ']'`},
		{"tab among spaces", "redis:\n  mode: single\n\taddrs: []\n" + minimal,
			`config.yaml:3: config: found a tab character that violates indentation`},
		{"tab indent", "lease:\n\tttl: 5s\n" + minimal,
			`config.yaml:2: config: found character that cannot start any token (indent with spaces, not tabs)`},
		{"tab indent in a job", minimal + "\t timeout: 5s\n",
			`config.yaml:4: config: found character that cannot start any token (indent with spaces, not tabs)`},
		{"unknown alias", minimal + "    timeout: *grace\n",
			`config.yaml:4: config: unknown anchor 'grace' referenced`},
		{"error in a second document", minimal + "---\nx: [\n",
			`config.yaml:5: config: did not find expected node content`},
		// yaml.v3 names line 1, where the list of jobs starts.
		{"error far below", string(far) + "  x: [\n",
			fmt.Sprintf("config.yaml:%d: config: did not find expected '-' indicator", 2*farJobs+2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("config.yaml", []byte(tt.yaml), registered)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("errors:\n got  %v\n want %s", err, tt.want)
			}
		})
	}
}

// TestNotText: a binary file is named as one, not parsed into a YAML error.
func TestNotText(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"gzip", []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03jobs"),
			`config.yaml:1: config: not a YAML text file: byte 0x8b is not UTF-8`},
		{"NUL bytes", []byte("jobs:\n  - name: lottery\x00\x00\x00\n"),
			`config.yaml:2: config: not a YAML text file: it holds a NUL byte`},
		{"ELF", []byte("\x7fELF\x02\x01\x01\x00\x00\x00"),
			`config.yaml:1: config: not a YAML text file: it holds a NUL byte`},
		{"Latin-1 in a comment", []byte(minimal + "# caf\xe9\n"),
			`config.yaml:4: config: not a YAML text file: byte 0xe9 is not UTF-8`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("config.yaml", tt.data, registered)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("errors:\n got  %v\n want %s", err, tt.want)
			}
		})
	}
	// UTF-16 with a byte-order mark is YAML text, NULs and all.
	utf16 := []byte{0xff, 0xfe}
	for _, r := range minimal {
		utf16 = append(utf16, byte(r), 0)
	}
	if _, err := Load("config.yaml", utf16, registered); err != nil {
		t.Fatalf("UTF-16 config: %v", err)
	}
	// A UTF-8 byte-order mark is fine too.
	if _, err := Load("config.yaml", []byte("\xef\xbb\xbf"+minimal), registered); err != nil && strings.Contains(err.Error(), "not a YAML text file") {
		t.Fatalf("UTF-8 BOM: %v", err)
	}
}

// TestUnreadableFileFromCommand: worker run reports a file it can't read as
// a config, rather than a Redis client built from nothing.
func TestUnreadableFileFromCommand(t *testing.T) {
	for _, data := range []string{"redis:\n  mode: single\n addrs: []\n", "\x1f\x8b\x08\x00", "- a\n"} {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, want := Load(path, []byte(data), nil)
		var stdout, stderr bytes.Buffer
		code := Command(context.Background(), []string{"run", "-config", path},
			func(*jobs.Registry, Env) error { return nil }, &stdout, &stderr)
		if code != 2 || stderr.String() != want.Error()+"\n" {
			t.Fatalf("%q: exit %d, stderr %q, want 2 and %q", data, code, stderr.String(), want)
		}
	}
}
