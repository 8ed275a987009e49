package slotstore

import (
	"errors"
	"testing"
)

// TestParseRawRefusesWhatIsNotARecord: a string that is not a record (too
// few words, a text field whose length runs past the end, bytes after the
// last field) is an error, not a record with empty fields.
func TestParseRawRefusesWhatIsNotARecord(t *testing.T) {
	good := "done 17 1 100 200 0 job tok run 1700000000 3:r 10:0:0:0:"
	if r, err := parseRaw(good); err != nil || r.owner != "r 1" || r.state != "done" || r.token != "tok" {
		t.Fatalf("parseRaw(%q) = %+v, %v", good, r, err)
	}
	for _, bad := range []string{
		"",
		"done 17 1 100 200 0 job tok run",
		"done 17 1 100 200 0 job tok run 1700000000 9:short0:0:0:0:",
		"done 17 1 100 200 0 job tok run 1700000000 0:0:0:0:0:extra",
		"done 17 1 100 200 0 job tok run 1700000000 x:0:0:0:0:",
	} {
		if _, err := parseRaw(bad); !errors.Is(err, errMalformed) {
			t.Errorf("parseRaw(%q): %v, want errMalformed", bad, err)
		}
	}
}
