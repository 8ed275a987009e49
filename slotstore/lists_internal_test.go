package slotstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

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

// TestRecordLibSlotName runs record_lib.lua's slot_name on Redis's Lua
// against Go's own formatting: a skipped record names the run that held the
// job by it.
func TestRecordLibSlotName(t *testing.T) {
	rdb := redistest.Start(t).Client()
	src := rediskit.Source(scriptDir, "record_lib.lua") + `
local out = {}
for i, ref in ipairs(ARGV) do out[i] = slot_name(ref) end
return out`
	refs := []string{"m:redo-noon", "not-a-number"}
	want := []string{"manual slot redo-noon", "slot not-a-number"}
	for _, at := range []time.Time{
		time.Unix(0, 0), time.Date(2000, 2, 29, 23, 59, 59, 0, time.UTC), time.Date(2000, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 25, 5, 29, 43, 0, time.UTC), time.Date(2100, 2, 28, 12, 0, 0, 0, time.UTC),
		time.Date(2100, 3, 1, 12, 0, 0, 0, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		refs = append(refs, strconv.FormatInt(at.Unix(), 10))
		want = append(want, "slot "+at.UTC().Format(time.RFC3339))
	}
	for at, rng := time.Unix(1_700_000_000, 0), rand.New(rand.NewPCG(1, 2)); len(refs) < 400; at = at.Add(time.Duration(rng.Int64N(int64(400*24*time.Hour)) + 1e9)) {
		refs = append(refs, strconv.FormatInt(at.Unix(), 10))
		want = append(want, "slot "+at.UTC().Format(time.RFC3339))
	}
	args := make([]any, len(refs))
	for i, r := range refs {
		args[i] = r
	}
	got, err := rdb.Eval(context.Background(), src, nil, args...).StringSlice()
	if err != nil || len(got) != len(want) {
		t.Fatalf("slot_name: %d names, %v; want %d", len(got), err, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("slot_name(%q) = %q, want %q", refs[i], got[i], want[i])
		}
	}
}
