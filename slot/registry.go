package slot

import (
	"errors"
	"time"
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
	Started  time.Time
	Seen     time.Time     // the last heartbeat, on the store's clock
	Offset   time.Duration // the store's clock minus the replica's, at its last probe
	// Jobs maps each job of the replica's table to its settings, in one
	// canonical line ("schedule=... overlap=... lease_ttl=..."): two replicas
	// agree on a job when their lines are equal.
	Jobs map[string]string
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
	Now         time.Time // the store's clock
	Replicas    []Replica
	Deployments []Deployment // other prefixes; nil when the store can't tell
}
