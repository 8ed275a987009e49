package slot

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Ref names a scheduled slot: a job and its time. Where a Claim would
// carry far more than is needed (a look for ten thousand slots' records),
// this is all there is to say.
type Ref struct {
	Job string
	At  time.Time
}

// Kind says what a Claim asks.
type Kind int

// The kinds of claims.
const (
	// ClaimLive claims a slot at its time: past Deadline it is recorded
	// missed; while a run of the job holds the job's lease (overlap skip) it
	// is recorded skipped, or, before the slot's time on the store's clock
	// (the replica's clock runs ahead), answered OutcomeBusy.
	ClaimLive Kind = iota
	// ClaimCatchup claims a slot that all replicas missed: no deadline, and a
	// run in progress answers OutcomeBusy instead of recording skipped.
	ClaimCatchup
	// ClaimMiss records the slot missed, with Reason, unless it has a record.
	// With a Deadline, not before it on the store's clock: until then it
	// answers OutcomeEarly and records nothing, as ClaimExpire does, so that
	// a replica still within the misfire grace can claim the slot live.
	ClaimMiss
	// ClaimTakeover settles a running slot whose owner may be gone: it answers
	// OutcomeAlive while the owner holds its lease; otherwise it takes the
	// slot over as the next attempt (Retry, below MaxAttempts) or records it
	// abandoned.
	ClaimTakeover
	// ClaimExpire records the slot missed, with Reason, once its Deadline has
	// passed on the store's clock, unless it has a record: what a replica
	// sends for a slot it refuses to claim (its clock is off), so that the
	// slot still ends with a record if no replica claims it. Before the
	// deadline it answers OutcomeEarly and records nothing.
	ClaimExpire
	// ClaimManual claims a manual slot (Claim.Manual): one that someone asked
	// for, outside the schedule. It has no deadline; like a live slot, it is
	// recorded skipped while a run holds the job (overlap skip), and paused
	// while the job is paused. Its record is the manual slot's own, apart
	// from the scheduled slots': a manual slot and the scheduled slot of the
	// same second are two slots.
	ClaimManual
)

var kindNames = [...]string{ClaimLive: "live", ClaimCatchup: "catchup", ClaimMiss: "miss", ClaimTakeover: "takeover", ClaimExpire: "expire", ClaimManual: "manual"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Claim is one request of a batch.
type Claim struct {
	Kind         Kind
	Job          string
	Slot         time.Time
	Replica      string
	LeaseTTL     time.Duration
	Retention    time.Duration
	AllowOverlap bool      // false: a run of the job in progress blocks the slot
	Deadline     time.Time // ClaimLive, ClaimExpire, ClaimMiss: the latest start, on the store's clock
	// MaxEarly, for ClaimLive and ClaimCatchup: the store refuses the claim,
	// and records nothing, when the slot is more than this ahead of its
	// clock (the replica's clock runs ahead): OutcomeEarly. A catch-up claim
	// with a MaxEarly is also refused, recording nothing, when its slot is
	// older than Retention less MaxEarly on the store's clock (a slot's
	// record is first written at most MaxEarly before it, and kept for the
	// retention from then: past that, no record no longer means that the
	// slot never ran): its Result's Err wraps ErrPastRetention. 0: no limit.
	MaxEarly time.Duration
	// Ahead, for ClaimLive: the claim is sent before its slot's time, and its
	// run waits for that time. A run of the job in progress then answers
	// OutcomeBusy and records nothing (the claim goes again at the slot's
	// time, when that run may have ended), and a won slot's record says it
	// started at the slot's time.
	Ahead bool
	// Contested says the slot's record is likely there already: other
	// replicas claim it at the same instant (routing race). The store then
	// reads the record before anything else, so that a claim that loses
	// reads only the record, not the job's state too (nor tries to write the
	// record); a win reads the record once more. A hint of cost only: the
	// answer is the same either way.
	Contested   bool
	Reason      string // ClaimLive and ClaimMiss: why a missed slot was missed
	Retry       bool   // ClaimTakeover: on_owner_lost is retry
	MaxAttempts int    // ClaimTakeover: the attempt limit
	// OverMissed, for ClaimCatchup only, with a MaxEarly (a backfill's
	// claim): a slot recorded missed is claimed as if it had no record. The
	// store moves its record from missed to running, atomically, as for a
	// fresh win (fence, lease, run ID), and the slot's record then says how
	// its run ended. A missed record is only written where no claim had won
	// the slot, so none of its runs ever started; within the retention less
	// MaxEarly, no record of a run can have expired before it was written.
	// Every other record (running, done, failed, abandoned, skipped,
	// paused) still answers lost, as does a missed one to any claim without
	// this. A store that does not know it answers lost to a missed record,
	// which is safe: the slot stays missed.
	OverMissed bool
	// Token is the token the run's lease gets if the claim wins. A claim sent
	// again because its reply was lost must carry the same token: the store
	// then recognises it as the same claim and answers won again, instead of
	// lost to a record with no run behind it. Empty: the store makes one.
	Token string
	// RunID names the run if the claim wins: a UUIDv7, kept in the slot's
	// record, on the run's spans and log lines. Unlike the token it is not
	// a secret. A claim sent again keeps it. Empty: the store makes one.
	RunID string
	// Manual is set for a manual slot (ClaimManual, and a takeover or an
	// expire claim of one: a Trigger withdrawn before its claim was answered);
	// nil for a scheduled slot. Slot is then when it was asked for.
	Manual *Manual
}

// Manual names a manual slot and says who asked for it. A manual slot is
// identified by its ID: asking again with the same ID finds the first one's
// record, and runs nothing.
type Manual struct {
	ID   string // the idempotency key, or a UUIDv7; see CheckManualID
	By   string // who asked (user@host), at most MaxNote bytes
	Note string // why, as they wrote it, at most MaxNote bytes
}

// MaxManualID and MaxNote bound a manual slot's ID, and its note and who
// asked.
const (
	MaxManualID = 128
	MaxNote     = 1024
)

// CheckManualID reports whether id can name a manual slot: 1 to MaxManualID
// characters among letters, digits and "-_.:".
func CheckManualID(id string) error {
	if id == "" || len(id) > MaxManualID {
		return fmt.Errorf("a manual slot's ID (idempotency key) must be 1 to %d characters, got %d", MaxManualID, len(id))
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:", c)) {
			return fmt.Errorf("a manual slot's ID (idempotency key) may hold only letters, digits and -_.: (got %q)", c)
		}
	}
	return nil
}

// CheckNote reports whether text, a manual slot's or a pause's note or who
// asked (what names it in the error: "the note"), fits in MaxNote bytes:
// every record of the slot, or of each paused slot, holds it.
func CheckNote(what, text string) error {
	if len(text) > MaxNote {
		return fmt.Errorf("%s is %d bytes, more than %d", what, len(text), MaxNote)
	}
	return nil
}

// Outcome is the answer to one Claim.
type Outcome string

// The outcomes of claims. Losing a race is an outcome, not an error.
const (
	OutcomeWon       Outcome = "won"       // this replica runs the slot: Lease is set
	OutcomeLost      Outcome = "lost"      // the slot has a record: Holder, State
	OutcomeSkipped   Outcome = "skipped"   // recorded skipped: Holder's run of HolderSlot holds the job
	OutcomeBusy      Outcome = "busy"      // a run holds the job; try again after Wait
	OutcomeMissed    Outcome = "missed"    // recorded missed: Late says how late
	OutcomeAlive     Outcome = "alive"     // takeover: the owner holds its lease for Wait
	OutcomeAbandoned Outcome = "abandoned" // takeover: recorded abandoned
	OutcomeClosed    Outcome = "closed"    // takeover: no longer running (State)
	OutcomeGone      Outcome = "gone"      // takeover: the record has expired
	OutcomeEarly     Outcome = "early"     // too early on the store's clock: nothing recorded; send it again after Wait
	OutcomePaused    Outcome = "paused"    // the job is paused: recorded paused, with the pause's note (Reason)
)

// Outcomes lists every Outcome.
var Outcomes = []Outcome{OutcomeWon, OutcomeLost, OutcomeSkipped, OutcomeBusy, OutcomeMissed,
	OutcomeAlive, OutcomeAbandoned, OutcomeClosed, OutcomeGone, OutcomeEarly, OutcomePaused}

// Result is the answer to one Claim.
type Result struct {
	Outcome Outcome
	Lease   Lease  // OutcomeWon
	Holder  string // the record's owner, or the replica whose run holds the lease
	// HolderSlot is the slot of the run that holds the job's lease
	// (OutcomeSkipped, OutcomeBusy): the one to watch in case its owner dies.
	HolderSlot time.Time
	// HolderManual is the ID of the manual slot whose run holds the job's
	// lease (OutcomeSkipped, OutcomeBusy); HolderSlot is then zero.
	HolderManual string
	State        State         // OutcomeLost, OutcomeClosed
	Fence        int64         // OutcomeWon, OutcomeLost
	Attempt      int           // OutcomeWon, OutcomeLost, OutcomeAbandoned
	Wait         time.Duration // the holder's remaining lease, or -1 when none or unknown
	Late         time.Duration // OutcomeMissed
	Reason       string        // OutcomePaused: what the slot's record says
	Err          error         // this claim failed; the others of its batch may have succeeded
	// Slot is a manual slot's time as its record has it (its first claim's,
	// on Redis's clock), for OutcomeAbandoned: the claim that settled it was
	// sent with the watcher's own time. Zero otherwise.
	Slot time.Time
	// Unreplicated: the store was asked to have its replicas acknowledge
	// the claim (Redis WAIT) and fewer did in time. A failover now could lose
	// the claim, and another replica could run the slot again.
	Unreplicated bool
	// Kept, with an Err wrapping ErrPastRetention: how long the slot's
	// records may have been kept, when that is shorter than the claim's
	// Retention (the job's records were written lately with a shorter one:
	// a retention raised since, a replica of another config); zero
	// otherwise.
	Kept time.Duration
}
