package lottery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// world is a slot store and the lottery of one deployment.
type world struct {
	t     *testing.T
	rdb   *redis.Client
	store *slotstore.Store
	l     *lottery.Lottery
}

func newWorld(t *testing.T) *world {
	srv := redistest.Start(t)
	prefix := srv.Key("sc")
	store, err := slotstore.New(srv.Client(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, rdb: srv.Client(), store: store, l: lottery.New(srv.Client(), prefix)}
}

// claim makes replica the owner of the lottery's slot at, as the scheduler would.
func (w *world) claim(kind slot.Kind, at time.Time, replica string, retry bool) slot.Result {
	w.t.Helper()
	res, err := w.store.Claim(context.Background(), []slot.Claim{{Kind: kind, Job: lottery.Name, Slot: at, Replica: replica,
		LeaseTTL: time.Minute, Retention: time.Hour, Deadline: time.Now().Add(time.Minute), Retry: retry, MaxAttempts: 3}})
	if err != nil || res[0].Err != nil {
		w.t.Fatalf("claim: %v %v", err, res[0].Err)
	}
	return res[0]
}

// ownerGone lets the job's lease go, as when its owner pauses past its TTL:
// the lease is a field of the job's state (a hash).
func (w *world) ownerGone() {
	w.rdb.HDel(context.Background(), w.store.Prefix()+":{"+lottery.Name+"}:state", "lease")
}

func (w *world) draws() []lottery.Entry {
	w.t.Helper()
	d, err := w.l.Draws(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return d
}

func TestDrawTenDistinctWinners(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	at := time.Unix(1_795_000_000, 0)
	won := w.claim(slot.ClaimLive, at, "r1", false)
	rctx, result := jobs.CaptureResult(ctx) // as the scheduler does
	if err := w.l.Draw(rctx, jobs.Run{Job: lottery.Name, Slot: at, Fence: won.Fence, Replica: "r1"}); err != nil {
		t.Fatal(err)
	}
	if n := w.rdb.SCard(ctx, w.l.Key("participants")).Val(); n != 1000 {
		t.Fatalf("seeded %d participants, want 1000", n)
	}
	draws := w.draws()
	if len(draws) != 1 {
		t.Fatalf("draws %v", draws)
	}
	seen := map[string]bool{}
	for _, name := range draws[0].Winners {
		seen[name] = true
	}
	if len(seen) != 10 || draws[0].Slot != at.Unix() || draws[0].Fence != won.Fence || draws[0].Replica != "r1" {
		t.Fatalf("draw %+v", draws[0])
	}
	// The record gets the winners, for worker status.
	if want := "winners: " + strings.Join(draws[0].Winners, " "); result() != want {
		t.Fatalf("result %q, want %q", result(), want)
	}
	h := w.rdb.HGetAll(ctx, w.l.DrawKey(at.Unix())).Val()
	if h["replica"] != "r1" || len(h["winners"]) == 0 {
		t.Fatalf("draw hash %v", h)
	}
}

// TestZombieIsRefused: the owner of a slot is paused past its lease, and the
// slot is abandoned (or taken over) meanwhile. The paused owner wakes and
// writes its draw with its old fence: refused, and nothing changes, even
// though nobody has drawn since. A newer owner's write goes through, once.
func TestZombieIsRefused(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	entry := func(at time.Time, replica string, fence int64) lottery.Entry {
		return lottery.Entry{Slot: at.Unix(), Replica: replica, Fence: fence, Winners: []string{"user-0001", "user-0002"}}
	}

	// Abandoned: nobody runs the slot again; the zombie may not draw it.
	s1 := time.Unix(1_795_000_000, 0)
	zombie := w.claim(slot.ClaimLive, s1, "a", false)
	w.ownerGone()
	if r := w.claim(slot.ClaimTakeover, s1, "b", false); r.Outcome != slot.OutcomeAbandoned {
		t.Fatalf("takeover: %+v, want abandoned", r)
	}
	if err := w.l.Write(ctx, entry(s1, "a", zombie.Fence)); !errors.Is(err, lottery.ErrStaleFence) {
		t.Fatalf("zombie's write after the slot was abandoned: %v, want ErrStaleFence", err)
	}
	if n := len(w.draws()); n != 0 || w.rdb.Exists(ctx, w.l.DrawKey(s1.Unix())).Val() != 0 {
		t.Fatalf("the zombie's draw was written (%d draws)", n)
	}

	// Taken over: attempt 2 draws; attempt 1, waking late, may not.
	s2 := s1.Add(time.Minute)
	first := w.claim(slot.ClaimLive, s2, "a", true)
	w.ownerGone()
	second := w.claim(slot.ClaimTakeover, s2, "c", true)
	if second.Outcome != slot.OutcomeWon || second.Attempt != 2 {
		t.Fatalf("takeover: %+v, want attempt 2", second)
	}
	if err := w.l.Write(ctx, entry(s2, "c", second.Fence)); err != nil {
		t.Fatalf("attempt 2's write: %v", err)
	}
	if err := w.l.Write(ctx, entry(s2, "a", first.Fence)); !errors.Is(err, lottery.ErrStaleFence) {
		t.Fatalf("attempt 1's late write: %v, want ErrStaleFence", err)
	}
	// Attempt 2 writing again (a retried call) keeps the first draw.
	if err := w.l.Write(ctx, entry(s2, "c", second.Fence)); err != nil {
		t.Fatal(err)
	}
	draws := w.draws()
	if len(draws) != 1 || draws[0].Replica != "c" || draws[0].Fence != second.Fence {
		t.Fatalf("draws %+v, want attempt 2's only", draws)
	}
	// A fence lower than the highest written is refused, whatever the record.
	if err := w.l.Write(ctx, entry(s2.Add(time.Minute), "x", second.Fence-1)); !errors.Is(err, lottery.ErrStaleFence) {
		t.Fatalf("write with a lower fence and no record: %v, want ErrStaleFence", err)
	}
}
