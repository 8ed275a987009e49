// Package lottery is the noon lottery: a job that must draw its winners once
// per slot, however many replicas run it.
//
// Each run draws 10 distinct winners from the set <prefix>:{lottery}:participants
// (it seeds 1000 demo users when the set is empty) and stores the draw, in one
// script, in the hash <prefix>:{lottery}:draw:<slot unix> (winners, replica,
// fence) and as one JSON line in the list <prefix>:{lottery}:draws. prefix is
// the deployment's key prefix, so two deployments on one Redis keep apart, and
// every key shares the {lottery} hash tag with the scheduler's keys for the
// job, so the script runs on a Redis Cluster too.
//
// The script is fenced twice. It refuses a writer that no longer owns its
// slot: the slot's record (slotstore.RecordKey) must be running with the
// writer's fence, so a replica paused past its lease, whose slot was taken
// over or abandoned meanwhile, cannot write its draw late. And it refuses a
// fence lower than the highest already written. That is the fencing that
// makes the lock safe; the lock alone cannot.
package lottery

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// Name is the job's name in the cron table.
const Name = "lottery"

// Winners is how many winners a draw picks.
const Winners = 10

// ErrStaleFence is what a draw returns when a newer owner has written since
// its lease was granted: the draw is refused and nothing changes.
var ErrStaleFence = errors.New("lottery: stale fence: the run no longer owns its slot")

//go:embed write_draw.lua
var writeDrawSrc string

var writeDraw = redis.NewScript(writeDrawSrc)

// Lottery draws winners into Redis, with keys under the deployment's key
// prefix: <prefix>:{lottery}:participants, :draw:<slot>, :draws and :fence.
type Lottery struct {
	rdb    redis.UniversalClient
	prefix string // the deployment's key prefix, as the slot store has it
}

// New returns the lottery on rdb, for the deployment whose slot store uses
// keyPrefix (slot.DefaultKeyPrefix unless configured).
func New(rdb redis.UniversalClient, keyPrefix string) *Lottery {
	return &Lottery{rdb: rdb, prefix: keyPrefix}
}

// Register adds the lottery to reg under Name, for the deployment whose
// slot store uses keyPrefix.
func Register(reg *jobs.Registry, rdb redis.UniversalClient, keyPrefix string) error {
	return reg.Register(Name, New(rdb, keyPrefix).Draw)
}

// Key returns the lottery's key for name: <prefix>:{lottery}:name.
func (l *Lottery) Key(name string) string { return l.prefix + ":{" + Name + "}:" + name }

// DrawKey returns the key of one slot's draw.
func (l *Lottery) DrawKey(slot int64) string { return l.Key("draw:" + strconv.FormatInt(slot, 10)) }

// Entry is one line of the draws list.
type Entry struct {
	Slot int64 `json:"slot"`
	// Manual is the ID of the manual slot (worker trigger) the draw is
	// for; "" for a scheduled slot. A manual draw is a draw of its own.
	Manual  string   `json:"manual,omitempty"`
	Replica string   `json:"replica"`
	Fence   int64    `json:"fence"`
	Winners []string `json:"winners"`
}

// Draw is the job: it draws the winners of run.Slot and writes them fenced
// by run.Fence. It returns ErrStaleFence when a newer owner has written.
func (l *Lottery) Draw(ctx context.Context, run jobs.Run) error {
	if err := l.Seed(ctx); err != nil {
		return err
	}
	participants := l.Key("participants")
	// The draw is made here, not with SRANDMEMBER: the demo's embedded
	// Redis (miniredis) answers SRANDMEMBER from a list shuffled by a few
	// random swaps, which leaves the first members where they were, so
	// user-0001 won far more often than chance.
	all, err := l.rdb.SMembers(ctx, participants).Result()
	if err != nil {
		return fmt.Errorf("lottery: draw: %w", err)
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	winners := all[:min(Winners, len(all))]
	e := Entry{Slot: run.Slot.Unix(), Replica: run.Replica, Fence: run.Fence, Winners: winners}
	if run.Manual != nil {
		e.Manual = run.Manual.ID
	}
	if err := l.Write(ctx, e); err != nil {
		return err
	}
	if run.Logger != nil { // nil when a test calls Draw directly
		run.Logger.Info("lottery drawn", "winners", winners)
	}
	// The slot's record shows the winners (worker status); outside a run
	// the scheduler started there is no record to attach them to.
	if err := jobs.SetResult(ctx, "winners: "+strings.Join(winners, " ")); err != nil && !errors.Is(err, jobs.ErrNoRun) {
		return err
	}
	return nil
}

// Seed adds the 1,000 participants (user-0001 to user-1000) unless there
// are some. A draw seeds them when it finds none; the demo seeds them before
// its replicas start, so that no draw takes longer than the others.
func (l *Lottery) Seed(ctx context.Context) error {
	participants := l.Key("participants")
	n, err := l.rdb.SCard(ctx, participants).Result()
	if err != nil {
		return fmt.Errorf("lottery: %w", err)
	}
	if n > 0 {
		return nil
	}
	users := make([]any, 1000)
	for i := range users {
		users[i] = fmt.Sprintf("user-%04d", i+1)
	}
	if err := l.rdb.SAdd(ctx, participants, users...).Err(); err != nil {
		return fmt.Errorf("lottery: seed participants: %w", err)
	}
	return nil
}

// Write stores a draw, fenced: see the package doc. A slot that already has
// a draw keeps it, and Write returns nil.
func (l *Lottery) Write(ctx context.Context, e Entry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	run := jobs.Run{Job: Name, Slot: time.Unix(e.Slot, 0)}
	draw := l.DrawKey(e.Slot)
	if e.Manual != "" {
		run.Manual = &slot.Manual{ID: e.Manual}
		draw = l.Key("draw:m:" + e.Manual)
	}
	keys := []string{l.Key("fence"), draw, l.Key("draws"), slotstore.RecordKeyOf(l.prefix, run)}
	res, err := writeDraw.Run(ctx, l.rdb, keys, e.Fence, strings.Join(e.Winners, ","), e.Replica, string(line)).Slice()
	if err != nil {
		return fmt.Errorf("lottery: write draw of slot %d: %w", e.Slot, err)
	}
	if len(res) > 0 && res[0] == "stale" {
		return fmt.Errorf("%w: fence %d: %v", ErrStaleFence, e.Fence, res[1])
	}
	return nil
}

// Winners returns the winners of one slot's draw; ok is false when the slot
// has no draw.
func (l *Lottery) Winners(ctx context.Context, slot int64) (winners []string, ok bool, err error) {
	h, err := l.rdb.HGet(ctx, l.DrawKey(slot), "winners").Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("lottery: %w", err)
	}
	return strings.Split(h, ","), true, nil
}

// Draws returns every entry of the draws list.
func (l *Lottery) Draws(ctx context.Context) ([]Entry, error) {
	lines, err := l.rdb.LRange(ctx, l.Key("draws"), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("lottery: %w", err)
	}
	out := make([]Entry, 0, len(lines))
	for _, line := range lines {
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("lottery: draws list holds %q: %w", line, err)
		}
		out = append(out, e)
	}
	return out, nil
}
