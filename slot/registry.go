package slot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrDuplicateReplica means another live process uses this replica's ID.
// Two replicas with one ID can't be told apart in records, leases and logs,
// so the second refuses to start.
var ErrDuplicateReplica = errors.New("slot: another live replica has this ID")

// Replica is what a replica says of itself in its heartbeat, and what its
// peers read.
type Replica struct {
	ID       string
	Instance string // random per process start: tells two processes with one ID apart
	Version  string // the build's module version and VCS revision
	// Protocol is the version of the slot protocol the replica's store
	// speaks (slotstore.Protocol): 1 for replicas older than the field.
	Protocol int
	Started  time.Time
	Seen     time.Time     // the last heartbeat, on the store's clock
	Offset   time.Duration // the store's clock minus the replica's, at its last probe
	// MaxSkew is the offset above which the replica refuses to claim (its
	// max_skew): 0 for replicas older than the field, whose limit is not
	// known (a reader then assumes its own).
	MaxSkew time.Duration
	// Jobs maps each job of the replica's table to its settings, in one
	// canonical line ("schedule=... overlap=... lease_ttl=..."): two replicas
	// agree on a job when their lines are equal. A large table is not
	// listed (nil). In a Registry, a peer that runs the same table as the
	// reader is not listed either: they agree on every job.
	Jobs map[string]string
	// Table is a hash of the whole table (TableHash of its settings lines):
	// two replicas run the same table when their hashes are equal.
	Table string
	// Names are the table's job names, for the registry of deployments;
	// not published in the replica's entry.
	Names []string
	// Catchup is, per job, the slots of the outage the replica started
	// after (those it runs and those it records missed) while any of them
	// waits for its answer, a miss for its misfire grace included; then
	// the catch-up slots it has yet to run (from the one whose claim is in
	// flight to the last), while it catches up: it claims each in turn, and
	// records missed those it has not reached when it stops. A replica that
	// stops counts on a live peer's range rather than record its own
	// unreached slots in it; one that sees a replica's entry go stale
	// records missed the slots of its range that have no record. Nil when
	// it catches nothing up, and in versions before the field. (Versions
	// before the outage published only the catch-up slots yet to run.)
	Catchup map[string]CatchupRange
}

// CatchupRange is the first and the last of the slots of a job that a
// replica has yet to answer (Replica.Catchup): the slots of the job's
// schedule between them, both included.
type CatchupRange struct {
	From, To time.Time
}

// Holds reports whether at is within r.
func (r CatchupRange) Holds(at time.Time) bool { return !at.Before(r.From) && !at.After(r.To) }

// TableHash is the hash of a table given as its jobs' settings lines.
func TableHash(jobs map[string]string) string {
	names := make([]string, 0, len(jobs))
	for name := range jobs {
		names = append(names, name)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, name := range names {
		h.Write([]byte(name + "\x00" + jobs[name] + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Deployment is a key prefix in use on the same Redis, and its jobs: the same
// job under two prefixes is run once per prefix.
type Deployment struct {
	Prefix string
	Jobs   []string
	Seen   time.Time
}

// Registry is what a heartbeat reads back: every live replica of the
// deployment (this one included), and the other deployments on the same
// Redis.
type Registry struct {
	Now      time.Time // the store's clock
	Replicas []Replica
	// Gone are the replicas that stopped heartbeating in the middle of a
	// catch-up without leaving the registry (killed, or paused past the
	// stale window): entries not seen within the stale window, and not yet
	// removed, whose Catchup is not empty. A replica that stops leaves
	// first, and records its unreached slots itself.
	Gone        []Replica
	Deployments []Deployment // other prefixes; nil when the store can't tell
	// Protocol is the reader's own protocol version. A live replica of an
	// older one keeps its state where this one does not look (protocol 1
	// kept a slot's record as a hash, and the job's lease under a key of its
	// own), so the two must not claim side by side: while one is live, the
	// newer replicas claim nothing, and start once it has left.
	Protocol int
}

// Older returns the IDs of the live replicas whose protocol is older than
// the reader's.
func (r Registry) Older() []string {
	var ids []string
	for _, rep := range r.Replicas {
		if rep.Protocol < r.Protocol {
			ids = append(ids, rep.ID)
		}
	}
	return ids
}

// MaxReplicaID bounds a replica's ID: a DNS name's length, so that a pod's
// or a host's name fits.
const MaxReplicaID = 253

// CheckReplicaID reports whether id can name a replica: 1 to MaxReplicaID
// bytes of UTF-8 with no space or control character, so that it reads as
// one word in records, logs and worker status's columns.
func CheckReplicaID(id string) error {
	if id == "" || len(id) > MaxReplicaID {
		return fmt.Errorf("a replica's ID must be 1 to %d bytes, got %d", MaxReplicaID, len(id))
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("a replica's ID must be UTF-8, got %q", id)
	}
	for i, c := range id {
		if unicode.IsSpace(c) || unicode.IsControl(c) {
			return fmt.Errorf("a replica's ID may hold no space or control character: %q has %q at byte %d", id, c, i)
		}
	}
	return nil
}
