package scheduler

import (
	"slices"
	"strconv"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// candidates returns, per job, the IDs of the registry's replicas that run
// it and whose clocks are within maxSkew of Redis's (the others refuse to
// claim), sorted; and, apart, the IDs of those that list no jobs (a large
// table) but run the same table as me: candidates for each of my jobs.
func candidates(me slot.Replica, reg slot.Registry, maxSkew time.Duration) (map[string][]string, []string) {
	out := map[string][]string{}
	var same []string
	for _, r := range reg.Replicas {
		if max(r.Offset, -r.Offset) > maxSkew {
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

// preferred returns the replica of ids that spread routing picks for a slot
// of job: rendezvous (highest random weight) hashing, so every replica that
// sees the same live replicas picks the same one, and a replica that joins
// or leaves moves only its own share of the slots.
func preferred(ids []string, job string, at time.Time) string {
	var best string
	var top uint64
	var n [20]byte
	unix := strconv.AppendInt(n[:0], at.Unix(), 10)
	// FNV-1a of "<job>\x00<unix>", then of each ID on top: no allocation,
	// for every due slot of every job on every tick.
	slotHash := fnv1a(fnv1a(fnv1a(fnvOffset, job), "\x00"), string(unix))
	for _, id := range ids {
		// FNV's low bits mix poorly for inputs that differ at the end:
		// finish with a 64-bit mixer (splitmix64's).
		w := mix(fnv1a(fnv1a(slotHash, "\x00"), id))
		if best == "" || w > top {
			best, top = id, w
		}
	}
	return best
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

// hedged reports whether this replica should claim a live slot of j a hedge
// after its time rather than at it: under spread routing, when another live
// replica is the slot's preferred one. With no registry yet, or when this
// replica is not among the candidates (its own heartbeat is not in yet), it
// claims at once: racing is always safe.
func (r *runner) hedged(j *jobState, at time.Time) bool {
	if j.Routing != RoutingSpread {
		return false
	}
	r.s.peers.mu.Lock()
	ids := r.s.peers.candidates[j.Name]
	if same := r.s.peers.sameTable; len(same) > 0 {
		if len(ids) == 0 {
			ids = same
		} else {
			ids = slices.Sorted(slices.Values(append(slices.Clone(ids), same...)))
		}
	}
	r.s.peers.mu.Unlock()
	if len(ids) < 2 || !slices.Contains(ids, r.self) {
		return false
	}
	return preferred(ids, j.Name, at) != r.self
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
