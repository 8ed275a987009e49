package slotstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/rediskit"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
)

// Client is what the store needs from go-redis: scripts and pipelines (claims
// and renewals are batched). Every redis.UniversalClient satisfies it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// Store is the slot protocol on Redis (Protocol 2). Each job has, under one
// hash tag, so that every script touches one cluster slot:
//
//	<prefix>:{<job>}:slot:<unix>   a slot's record (a string, see record.go), kept for the retention
//	<prefix>:{<job>}:manual:<id>   a manual slot's record, the same
//	<prefix>:{<job>}:state         the job's state (a hash): its lease (and its
//	                               slots' own, when overlap is allowed), fence,
//	                               high-water mark, running slots, pause
//	<prefix>:{<job>}:ended         the 32 slots that ended last (a hash, a ring)
//
// A slot starts at most once: the claim script writes its record, and no
// finish ever deletes it. All times that decide anything (deadlines, record
// stamps, leases) are Redis's, from TIME inside the scripts. A Store is safe
// for concurrent use.
type Store struct {
	rdb      Client
	prefix   string
	topology topology

	waitReplicas int           // WithWaitReplicas: acknowledgements a claim batch waits for
	waitTimeout  time.Duration // and for how long

	listedMu sync.Mutex
	listed   map[string]string // replica ID -> the table hash whose job list Redis has (Heartbeat)

	shardsMu    sync.Mutex
	shardEpochs map[string]string   // a range's epoch key -> the value last read there (CheckShards)
	shardTags   map[[2]int64]string // a range of hash slots -> its epoch key's hash tag
}

// Option configures New.
type Option func(*Store) error

// WithWaitReplicas makes every batch of claims wait, in the same round trip,
// until n replicas have acknowledged it (Redis WAIT), for at most timeout. It
// narrows the window in which a failover loses a claim that a replica acted
// on; it cannot close it (Redis replication stays asynchronous, and a claim
// goes on when fewer replicas answer in time: its result says Unreplicated).
// It costs a replication round trip per batch. A single server or Sentinel
// only: on a Cluster, New refuses it. The batch's answer comes after the
// WAIT: keep timeout well under the client's ReadTimeout and the callers'
// deadlines, or with a replica down every batch fails to be answered,
// though Redis ran it. A won claim's lease counts from its send, so keep
// timeout well under the lease TTL less the renewal period too. WAIT takes
// whole milliseconds (0 waits forever): timeout must be 1ms or more.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(s *Store) error {
		if n < 1 || timeout < time.Millisecond {
			return fmt.Errorf("slotstore: WithWaitReplicas: need n >= 1 and timeout >= 1ms (WAIT takes whole milliseconds, and 0 waits forever), got %d and %v", n, timeout)
		}
		s.waitReplicas, s.waitTimeout = n, timeout
		return nil
	}
}

// topology says which claims may share one script call: a script may only
// touch keys that live together.
type topology int

const (
	topoSingle   topology = iota // one server (or Sentinel): one call for all claims
	topoCluster                  // Redis Cluster: one call per hash slot
	topoSeparate                 // an unknown client (Ring, a wrapper): one call per claim
)

// Protocol is the version of the slot protocol this package speaks, which
// every replica publishes in the registry. Protocol 1 (slotcron before
// records became strings) kept a hash per record and a key per job for each
// of the lease, fence, high-water mark, running set, history and pause.
// Replicas of different protocols must not claim side by side: see
// slot.Registry.Protocol.
const Protocol = 2

// New returns the slot protocol on rdb with keys under prefix. It sends
// nothing. The prefix must be non-empty and free of '{' and '}'.
func New(rdb Client, prefix string, opts ...Option) (*Store, error) {
	if prefix == "" || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("slotstore: New: prefix %q must be non-empty and free of '{' and '}'", prefix)
	}
	t := topoSeparate
	switch rdb.(type) {
	case *redis.Client:
		t = topoSingle
	case *redis.ClusterClient:
		t = topoCluster
	}
	s := &Store{rdb: rdb, prefix: prefix, topology: t}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	if s.waitReplicas > 0 && t == topoCluster {
		return nil, fmt.Errorf("slotstore: WithWaitReplicas is not supported on a Redis Cluster")
	}
	return s, nil
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// The keys of a job, each built in one allocation.
func (s *Store) jobKey(job, suffix string) string { return s.prefix + ":{" + job + "}:" + suffix }

func (s *Store) recordKey(job string, slot int64) string {
	return RecordKey(s.prefix, job, time.Unix(slot, 0))
}

// RecordKey returns the key of a slot's record under prefix: a string whose
// first two words are the record's state and fence (see record.go for the
// rest). It shares the job's hash tag ({<job>}), so a script of a job's own,
// with keys under the same tag, can check in the same call as its write that
// the run still owns its slot: that the record's fence is the run's
// (jobs.Run.Fence) and its state is "running":
//
//	local state, fence = string.match(redis.call('GET', KEYS[n]) or '', '^(%S+) (%S+) ')
//
// A taken-over or abandoned slot's record has another fence, so a paused
// former owner's late write is refused. The lottery example does this.
func RecordKey(prefix, job string, slot time.Time) string {
	var n [20]byte
	return prefix + ":{" + job + "}:slot:" + string(strconv.AppendInt(n[:0], slot.Unix(), 10))
}

// ManualRef is how the protocol refers to a manual slot where it refers to a
// scheduled slot by its unix second: in leases, records and the job state's
// lists.
func manualRef(id string) string { return "m:" + id }

// target returns the claim's slot as the scripts name it (unix seconds, or a
// manual slot's reference) and its record's key.
func (s *Store) target(c slot.Claim) (ref, record string) {
	if c.Manual != nil {
		return manualRef(c.Manual.ID), s.recordOf(c)
	}
	at := c.Slot.Unix()
	return strconv.FormatInt(at, 10), s.recordKey(c.Job, at)
}

// recordOf is target's record alone: the key of the claim's slot's record.
func (s *Store) recordOf(c slot.Claim) string {
	if c.Manual != nil {
		return s.jobKey(c.Job, "manual:"+c.Manual.ID)
	}
	return s.recordKey(c.Job, c.Slot.Unix())
}

// refKey is the record key of a slot by its ref.
func (s *Store) refKey(job, ref string) string {
	if id, ok := strings.CutPrefix(ref, manualRef("")); ok {
		return s.jobKey(job, "manual:"+id)
	}
	return s.jobKey(job, "slot:"+ref)
}

// RecordKeyOf returns the key of the record of the slot a run is for under
// prefix: RecordKey for a scheduled slot, the manual slot's own record for a
// manual one (run.Manual). A job that checks its fence against its record
// should use this one.
func RecordKeyOf(prefix string, run jobs.Run) string {
	if run.Manual != nil {
		return prefix + ":{" + run.Job + "}:manual:" + run.Manual.ID
	}
	return RecordKey(prefix, run.Job, run.Slot)
}

func (s *Store) stateKey(job string) string { return s.jobKey(job, "state") }
func (s *Store) ringKey(job string) string  { return s.jobKey(job, "ended") }

// The keys of protocol 1, which JobStates reads in (jobstates.lua) and Pause
// keeps in step, for replicas of the older version while a deployment
// upgrades.
func (s *Store) v1LeaseKey(job string) string          { return s.jobKey(job, "lease") }
func (s *Store) v1SlotLeaseKey(job, ref string) string { return s.jobKey(job, "lease:"+ref) }
func (s *Store) v1FenceKey(job string) string          { return s.jobKey(job, "fence") }
func (s *Store) v1RunsKey(job string) string           { return s.jobKey(job, "runs") }
func (s *Store) v1LastKey(job string) string           { return s.jobKey(job, "last") }
func (s *Store) v1RunningKey(job string) string        { return s.jobKey(job, "running") }
func (s *Store) v1PausedKey(job string) string         { return s.jobKey(job, "paused") }

func checkJob(job string) error {
	if job == "" || strings.ContainsAny(job, "{}") {
		return fmt.Errorf("%w: %q must be non-empty and free of '{' and '}'", ErrInvalidJob, job)
	}
	return nil
}

// Prepare loads the scripts into the server's script cache, so that the first
// batch of claims takes one round trip too. One round trip (one per master on
// a cluster). Claim works without it: it falls back to EVAL.
func (s *Store) Prepare(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	for _, src := range scriptSources {
		pipe.ScriptLoad(ctx, src)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("slotstore: load scripts: %w", err)
	}
	return nil
}

// epochKey is the deployment's epoch: see Probe.
func (s *Store) epochKey() string { return s.prefix + ":epoch" }

// Probe returns Redis's clock (TIME) and the deployment's epoch, a random
// value that the first probe writes under <prefix>:epoch. When Redis loses its
// data, the key is gone and the next probe writes another: a replica that
// knew the old one knows its slot records, leases and fence counters may be
// gone too. One round trip. On a Cluster the key lives on one master, so only
// that master's data loss shows: CheckShards covers the others.
func (s *Store) Probe(ctx context.Context) (slot.Probe, error) {
	vals, err := probeScript.Run(ctx, s.rdb, []string{s.epochKey()}, rediskit.NewToken()).Slice()
	if err != nil {
		return slot.Probe{}, fmt.Errorf("slotstore: probe: %w", err)
	}
	r := reply(vals)
	p := slot.Probe{Now: time.Unix(r.int(0), r.int(1)*1000), Epoch: r.str(2), Created: r.int(3) == 1}
	if r.err != nil {
		return slot.Probe{}, fmt.Errorf("slotstore: probe: %w in reply %v", r.err, vals)
	}
	return p, nil
}
