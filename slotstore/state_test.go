package slotstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/slotstore"
)

// Tests reach into a job's state (a hash, see record_lib.lua) to play out
// what time or a crash would do to a lease there.

// stateKey is the job's state hash.
func stateKey(s *slotstore.Store, job string) string { return s.Prefix() + ":{" + job + "}:state" }

// lapse makes a lease in the job's state run out, as its TTL would: its value
// stays, with an end in the past. field is "lease" (the job's) or
// "lease:<ref>" (a slot's own).
func lapse(t *testing.T, rdb *redis.Client, s *slotstore.Store, job, field string) {
	t.Helper()
	ctx := context.Background()
	v, err := rdb.HGet(ctx, stateKey(s, job), field).Result()
	if err != nil {
		t.Fatalf("the lease %s of %s: %v", field, job, err)
	}
	w := strings.SplitN(v, " ", 4) // "<token> <ref> <until_ms> <replica>"
	if len(w) != 4 {
		t.Fatalf("the lease %s of %s is %q", field, job, v)
	}
	w[2] = "1"
	if err := rdb.HSet(ctx, stateKey(s, job), field, strings.Join(w, " ")).Err(); err != nil {
		t.Fatal(err)
	}
}

// dropLease removes a lease from the job's state, as a crash of Redis's data
// would.
func dropLease(t *testing.T, rdb *redis.Client, s *slotstore.Store, job, field string) {
	t.Helper()
	if err := rdb.HDel(context.Background(), stateKey(s, job), field).Err(); err != nil {
		t.Fatal(err)
	}
}

// leaseTTL is what is left of a lease in the job's state, on Redis's clock:
// 0 or less when it is free or has run out.
func leaseTTL(t *testing.T, rdb *redis.Client, s *slotstore.Store, job, field string) time.Duration {
	t.Helper()
	ctx := context.Background()
	v, err := rdb.HGet(ctx, stateKey(s, job), field).Result()
	if err == redis.Nil || v == "" {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	w := strings.SplitN(v, " ", 4)
	until, err := strconv.ParseInt(w[min(2, len(w)-1)], 10, 64)
	if len(w) != 4 || err != nil {
		t.Fatalf("the lease %s of %s is %q", field, job, v)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(until).Sub(now)
}

// setLease writes a lease in the job's state that holds for ttl on Redis's
// clock.
func setLease(t *testing.T, rdb *redis.Client, s *slotstore.Store, job, field, token, ref, replica string, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	v := token + " " + ref + " " + strconv.FormatInt(now.Add(ttl).UnixMilli(), 10) + " " + replica
	if err := rdb.HSet(ctx, stateKey(s, job), field, v).Err(); err != nil {
		t.Fatal(err)
	}
}

// setFence sets the job's last fence.
func setFence(t *testing.T, rdb *redis.Client, s *slotstore.Store, job string, fence int64) {
	t.Helper()
	if err := rdb.HSet(context.Background(), stateKey(s, job), "fence", fence).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestAPauseWithNoNoteKeepsTheStandingPause: a pause with no note, on a job
// that a pause holds already, leaves that pause as it is (its note, who
// asked, its time), in the script itself: worker pause and the HTTP pause
// read the standing pause first, but a pause with a note landing between
// that read and their write had its note wiped by a second operator's
// pause with none. Found by review.
func TestAPauseWithNoNoteKeepsTheStandingPause(t *testing.T) {
	_, _, s := newSlots(t)
	ctx := context.Background()
	_, since, err := s.Pause(ctx, "p", "migration", "a@host")
	if err != nil {
		t.Fatal(err)
	}
	changed, again, err := s.Pause(ctx, "p", "", "b@host")
	if err != nil || changed || !again.Equal(since) {
		t.Fatalf("the pause with no note: changed %v, since %v (%v); want unchanged, since %v", changed, again, err, since)
	}
	p, err := s.Pauses(ctx, []string{"p"})
	if err != nil {
		t.Fatal(err)
	}
	if got := p["p"]; got.Note != "migration" || got.By != "a@host" {
		t.Errorf("the pause after a second one with no note: %q by %q; want the first's note and asker kept", got.Note, got.By)
	}
	if _, _, err := s.Pause(ctx, "p", "longer", "b@host"); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Pauses(ctx, []string{"p"}); p["p"].Note != "longer" || p["p"].By != "b@host" {
		t.Errorf("a pause with a note, on a standing one: %q by %q; want its note and asker", p["p"].Note, p["p"].By)
	}
}
