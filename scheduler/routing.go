package scheduler

import (
	"slices"
	"strconv"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// candidates returns, per job, the IDs of the registry's replicas that run
// it and whose clocks are within their own max_skew of Redis's (the others
// refuse to claim), sorted; and, apart, the IDs of those that list no jobs
// (a large table) but run the same table as me: candidates for each of my
// jobs. A replica that publishes no max_skew (an older version) is judged
// by maxSkew, the reader's. So replicas whose max_skew differ still compute
// the same candidates from one registry, and agree on each slot's preferred
// replica.
func candidates(me slot.Replica, reg slot.Registry, maxSkew time.Duration) (map[string][]string, []string) {
	out := map[string][]string{}
	var same []string
	for _, r := range reg.Replicas {
		limit := r.MaxSkew
		if limit <= 0 {
			limit = maxSkew
		}
		if max(r.Offset, -r.Offset) > limit {
			continue
		}
		if r.Jobs == nil {
			if r.Table == me.Table {
				same = append(same, r.ID)
			}
			continue
		}
		for job := range r.Jobs {
			out[job] = append(out[job], r.ID)
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	slices.Sort(same)
	return out, same
}

// rank returns self's place among ids in the rendezvous order of a slot of
// job (highest random weight first): 0 when it is the slot's preferred
// replica, 1 when it is next, and so on; len(ids) when it is not among
// them. Every replica that sees the same live replicas ranks them the same
// way, and a replica that joins or leaves moves only its own share of the
// slots.
func rank(ids []string, self, job string, at time.Time) int {
	if !slices.Contains(ids, self) {
		return len(ids)
	}
	h := slotHash(job, at)
	mine := weight(h, self)
	n := 0
	for _, id := range ids {
		// Ties (never seen with 64-bit weights) go to the smaller ID.
		if w := weight(h, id); w > mine || w == mine && id < self {
			n++
		}
	}
	return n
}

// slotHash is FNV-1a of "<job>\x00<unix>": no allocation, for every due
// slot of every job on every tick.
func slotHash(job string, at time.Time) uint64 {
	var n [20]byte
	unix := strconv.AppendInt(n[:0], at.Unix(), 10)
	return fnv1a(fnv1a(fnv1a(fnvOffset, job), "\x00"), string(unix))
}

// weight is a replica's weight for a slot: FNV-1a of the slot's hash and
// the ID, finished with a 64-bit mixer (splitmix64's), since FNV's low bits
// mix poorly for inputs that differ at the end.
func weight(slotHash uint64, id string) uint64 {
	return mix(fnv1a(fnv1a(slotHash, "\x00"), id))
}

// FNV-1a, 64 bits, over a string, from h.
const fnvOffset, fnvPrime = 14695981039346656037, 1099511628211

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// role is what a replica does for a live slot of a job.
type role int

const (
	roleFirst    role = iota // claim it (just ahead of its time): its preferred replica, or routing race
	roleHedge                // read its record a hedge after its time, and claim it if it has none
	roleBackstop             // look for its record a backstop after its time, and claim it if it has none
)

// Hedgers is how many replicas besides a slot's preferred one read its
// record a hedge after its time under spread routing (and claim it if it
// has none, and watch it while it runs): the next ones in the slot's
// rendezvous order. So they take part in a slot its preferred replica
// wins; the rest only look for its record, with a count of the records of
// all the slots of an instant (Claimer.Missing), a backstop after it, and
// report nothing for it unless they have to claim it. Every replica
// reading every slot a hedge late cost each of them a read, a trace and a
// watch per slot: at 20 replicas of 10,000 jobs, more than two cores could
// do.
const Hedgers = 2

// role returns this replica's role for the slot of j at at: under spread
// routing, by its place in the slot's rendezvous order over the live
// candidates. With no registry yet, or when this replica is not among the
// candidates (its own heartbeat is not in yet), it claims at once: racing
// is always safe.
func (r *runner) role(j *jobState, at time.Time) role {
	if j.Routing != RoutingSpread {
		return roleFirst
	}
	ids := r.s.candidatesOf(j.Name)
	if len(ids) < 2 || !slices.Contains(ids, r.self) {
		return roleFirst
	}
	switch n := rank(ids, r.self, j.Name, at); {
	case n == 0:
		return roleFirst
	case n <= Hedgers:
		return roleHedge
	}
	return roleBackstop
}

// candidatesOf returns the IDs of the live replicas that spread routing
// picks from for job, as the last heartbeat found them, sorted.
func (s *Scheduler) candidatesOf(job string) []string {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	ids := s.peers.candidates[job]
	if same := s.peers.sameTable; len(same) > 0 {
		if len(ids) == 0 {
			return same
		}
		return slices.Sorted(slices.Values(append(slices.Clone(ids), same...)))
	}
	return ids
}

// contenders is how many live replicas claim job's slots, as the last
// heartbeat found them: candidatesOf's length, without its copy.
func (s *Scheduler) contenders(job string) int {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	return len(s.peers.candidates[job]) + len(s.peers.sameTable)
}

// hedge is how long after a slot's time the replicas that are not its
// preferred one claim it: four claim round trips (the last probe's, a
// round trip to Redis), at least minHedge and at most maxHedge, or the
// configured one (WithHedge).
func (s *Scheduler) hedge() time.Duration {
	if s.cfg.hedge > 0 {
		return s.cfg.hedge
	}
	s.offsetMu.Lock()
	rtt := s.rtt
	s.offsetMu.Unlock()
	return min(max(4*rtt, minHedge), maxHedge)
}

// The bounds of the automatic hedge.
const (
	minHedge = 5 * time.Millisecond
	maxHedge = 250 * time.Millisecond
)
