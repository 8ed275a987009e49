package slot

import "time"

// State is the state in a slot record.
type State string

// The states of a slot record. A record is "running" until its run finishes;
// the others are final.
const (
	StateRunning   State = "running"
	StateDone      State = "done"
	StateFailed    State = "failed"
	StateAbandoned State = "abandoned"
	StateMissed    State = "missed"
	StateSkipped   State = "skipped"
	StatePaused    State = "paused"
)

// Pause is a job's pause: while it stands, each of the job's slots is
// recorded paused, with the note, and none runs.
type Pause struct {
	Note string    // why, as the one who paused it wrote it
	By   string    // who paused it (user@host)
	At   time.Time // when, on the store's clock
}

// RunStates are the final states a run can finish with (FinishRequest.State).
var RunStates = []State{StateDone, StateFailed, StateAbandoned}

// Record is a slot record as a store keeps it.
type Record struct {
	Job      string
	Slot     time.Time
	State    State
	Owner    string // the replica that ran it, or recorded it missed or skipped
	Attempt  int
	Fence    int64
	Started  time.Time // zero for a slot that never started
	Finished time.Time // zero while running
	Error    string
	RunID    string // the run's ID; "" for a slot that never started
	Result   string // what the run attached to its record (jobs.SetResult)
	// Manual is set for a manual slot's record; Slot is then when the
	// record was written (the claim, on the store's clock).
	Manual *Manual
	// Missed is set for the record of a slot that was recorded missed and
	// then run by a backfill (Claim.OverMissed): the run's record replaced
	// the missed one, and keeps what it said.
	Missed *Missed
}

// Missed is what a missed record said, kept by the run that a backfill
// made of its slot.
type Missed struct {
	By     string // the replica that recorded the slot missed
	Reason string // why, as recorded (the missed record's Error)
}

// FinishRequest is how one run ended.
type FinishRequest struct {
	Lease Lease
	State State  // StateDone, StateFailed or StateAbandoned
	Error string // the error text, "" for none
	// Result is what the run attached (jobs.SetResult), at most
	// jobs.MaxResult bytes; "" for none.
	Result string
}

// Probe is what a store says of itself when asked: its clock, against which
// replicas measure theirs, and its epoch, which changes when the store loses
// its data.
type Probe struct {
	Now     time.Time // the store's clock
	Epoch   string    // written once; another value means the data was lost
	Created bool      // this probe wrote the epoch: the store held none
}

// ShardLoss is a shard of a Redis Cluster that lost data since a store last
// checked it: the epoch the store read there before is gone or another.
type ShardLoss struct {
	Shard string // its hash slots and a node: "slots 5461-10922 on 10.0.0.2:6379"
	Epoch string // the epoch that was lost: every replica that knew it names the same
}

// JobState is what a store knows of a job when a replica starts: the latest
// slot that has a record, and every slot whose record is still running, each
// of which the replica settles by the job's policy (its owner may be gone).
type JobState struct {
	Last          time.Time   // zero when no slot of the job has a record
	Running       []time.Time // oldest first
	RunningManual []string    // the IDs of the manual slots whose records are running
	// OlderRuns counts the runs among Running that replicas of an older
	// store protocol still hold: they have left the registry and are
	// finishing them (renewing and recording them in their own way). Read
	// the job's state again within a lease TTL while there is one.
	OlderRuns int
}
