package slotstore

import (
	"context"
	"testing"

	"github.com/slotcron/slotcron/internal/rediskit"
	"github.com/slotcron/slotcron/internal/redistest"
)

// TestRecordLibLists runs record_lib.lua's list helpers on Redis's Lua: a
// job's running slots are a space-separated list, and removing one must
// leave exactly the others, wherever it stands (Lua's string.sub(s, 1, -1)
// is the whole string, so a slot removed from the front once came back with
// the rest doubled).
func TestRecordLibLists(t *testing.T) {
	rdb := redistest.Start(t).Client()
	src := rediskit.Source(scriptDir, "record_lib.lua") + `
if ARGV[1] == 'without' then return without(ARGV[2], ARGV[3]) end
if ARGV[1] == 'with' then return with(ARGV[2], ARGV[3]) end
if has(ARGV[2], ARGV[3]) then return 'yes' end
return 'no'`
	for _, tt := range []struct{ op, list, ref, want string }{
		{"without", "10 100", "10", "100"},
		{"without", "5 6 7", "5", "6 7"},
		{"without", "5 6 7", "6", "5 7"},
		{"without", "5 6 7", "7", "5 6"},
		{"without", "5", "5", ""},
		{"without", "", "5", ""},
		{"without", "5 6", "8", "5 6"},
		{"without", "15 5", "5", "15"},
		{"without", "5 15", "5", "15"},
		{"without", "m:a-b m:a", "m:a", "m:a-b"},
		{"with", "", "5", "5"},
		{"with", "5", "6", "5 6"},
		{"has", "5 6 7", "6", "yes"},
		{"has", "15 6", "5", "no"},
		{"has", "", "5", "no"},
	} {
		got, err := rdb.Eval(context.Background(), src, nil, tt.op, tt.list, tt.ref).Text()
		if err != nil || got != tt.want {
			t.Errorf("%s(%q, %q) = %q, %v; want %q", tt.op, tt.list, tt.ref, got, err, tt.want)
		}
	}
}
