package scheduler

import (
	"strconv"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// EventKind names what an Event reports.
type EventKind string

// The kinds of events, the ones an operator is alerted to.
const (
	EventFailed    EventKind = "failed"     // a run ended with an error: recorded failed
	EventMissed    EventKind = "missed"     // a slot could not start within its misfire grace: recorded missed
	EventAbandoned EventKind = "abandoned"  // a run's owner lost its lease: recorded abandoned
	EventLeaseLost EventKind = "lease_lost" // this replica lost the lease of a run in progress
	EventDrift     EventKind = "drift"      // this replica's clock is off Redis's by more than max_skew: it refuses to claim
	EventDataLoss  EventKind = "data_loss"  // Redis lost data this replica relied on
	EventPaused    EventKind = "paused"     // a job was paused (sent by whoever paused it)
)

// EventKinds lists every EventKind.
var EventKinds = []EventKind{EventFailed, EventMissed, EventAbandoned, EventLeaseLost, EventDrift, EventDataLoss, EventPaused}

// Event is something an operator should hear of. Each one is reported by
// one replica only, the one that recorded it (a slot's outcome has one
// recorder), so a hook that forwards events sends each once. ID is the same
// on every replica for the same fact, for a hook's deduplication.
type Event struct {
	ID      string
	Kind    EventKind
	Job     string    // "" for drift and data_loss
	Slot    time.Time // zero for drift and data_loss
	Manual  string    // a manual slot's ID
	Replica string    // the replica that reports it
	RunID   string
	Attempt int
	Fence   int64
	Error   string // what went wrong, in words
	Result  string // a failed run's result (jobs.SetResult), if any
	At      time.Time
}

// eventID is a fact's ID: the same on every replica that could report it.
func eventID(kind EventKind, job string, t target, attempt int) string {
	ref := strconv.FormatInt(t.at.Unix(), 10)
	if t.manual != "" {
		ref = "m:" + t.manual
	}
	return job + "/" + ref + "/" + strconv.Itoa(attempt) + "/" + string(kind)
}

// emit hands e to the event hook, if any. The hook must not block for long:
// it runs on the goroutine that recorded the event.
func (s *Scheduler) emit(e Event) {
	if s.cfg.onEvent == nil {
		return
	}
	e.Replica = s.cfg.replica
	if e.At.IsZero() {
		e.At = s.cfg.clock.Now()
	}
	s.cfg.onEvent(e)
}

// slotEvent is an Event of one slot's run.
func slotEvent(kind EventKind, c slot.Claim, attempt int, fence int64, runID, text string) Event {
	e := Event{ID: eventID(kind, c.Job, targetOf(c), attempt), Kind: kind, Job: c.Job, Slot: c.Slot,
		RunID: runID, Attempt: attempt, Fence: fence, Error: text}
	if c.Manual != nil {
		e.Manual = c.Manual.ID
	}
	return e
}
