package scheduler

import (
	"sync"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// pending is a claim that is due at a time: a live slot, a retry, a catch-up,
// or a watch on a slot whose owner may die.
type pending struct {
	due   time.Time
	job   *jobState
	claim slot.Claim
	tries int
	// hedged: a live claim sent a hedge after its slot's time, because
	// another replica was to claim it first, or a miss claim of the
	// startup backlog, which the peers that started with this replica
	// send too (drainBacklog): it is sent only if its slot still has no
	// record (Claimer.Peek), which costs Redis far less than a claim that
	// loses. A hedged claim whose reply was lost is sent again without
	// the read.
	hedged bool
	// reply, for a Trigger, receives the claim's first answer that is not
	// an error; nil otherwise, and once it has received it.
	reply chan<- slot.Result
	// gone, for a Trigger, is closed when its caller stops waiting for the
	// answer (its context's Done).
	gone <-chan struct{}
}

// answer gives a Trigger's caller res, once; nothing for other claims.
func (p *pending) answer(res slot.Result) {
	if p.reply != nil {
		p.reply <- res // 1-buffered, and sent once
		p.reply = nil
	}
}

// callerGone reports whether p is a Trigger's claim whose caller has
// stopped waiting for its answer.
func (p *pending) callerGone() bool {
	select {
	case <-p.gone:
		return true
	default:
		return false
	}
}

// withdraw turns the claim of a Trigger whose caller stopped waiting
// before Redis answered it into an expire claim past its deadline, with
// its token: Redis answers won if the claim had won (its reply lost), and
// the slot runs, once; else it records the slot missed, saying why. So the
// slot ends with a record, and does not run long after its caller was
// told it failed (a replica that refuses to claim would have sent it again
// every second, and run it once it no longer refused).
func (p *pending) withdraw() {
	p.claim.Kind = slot.ClaimExpire
	p.claim.Deadline = time.UnixMilli(0)
	p.claim.Reason = "the trigger's caller stopped waiting before Redis answered its claim"
	p.gone = nil
}

// pendingQueue is a min-heap of pending claims by due time (container/heap).
// Each entry holds its claim's due time beside the claim, so that the heap
// compares entries without following a pointer to each: a replica of a
// large table queues thousands of hedged claims a tick. Push takes a
// *pending whose due time is set, and Pop returns one; a queued claim's
// due time does not change.
type pendingQueue []queued

type queued struct {
	due time.Time
	p   *pending
}

func (q pendingQueue) Len() int           { return len(q) }
func (q pendingQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q pendingQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *pendingQueue) Push(x any) {
	p := x.(*pending)
	*q = append(*q, queued{due: p.due, p: p})
}
func (q *pendingQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = queued{} // the claim is no longer held here
	*q = old[:len(old)-1]
	return e.p
}

// nextSlot is a job's next live slot.
type nextSlot struct {
	at   time.Time
	job  *jobState
	prev time.Time // the job's slot before at; zero for its first since start
	// ns and idx are at in Unix nanoseconds and the job's place in the
	// table: what the heap compares, with no pointer to follow (every job
	// of a table due at one instant compares equal times, then jobs).
	ns  int64
	idx int
}

func newNextSlot(at time.Time, j *jobState) nextSlot {
	return nextSlot{at: at, job: j, ns: at.UnixNano(), idx: j.idx}
}

// moveTo sets the slot's time to at, after prev.
func (n *nextSlot) moveTo(at, prev time.Time) {
	n.at, n.prev, n.ns = at, prev, at.UnixNano()
}

// nextQueue is a min-heap of the jobs' next live slots, by time, then by the
// jobs' order in the table: the loop finds what is due without looking at
// every job, which matters with thousands of them.
type nextQueue []nextSlot

func (q nextQueue) Len() int { return len(q) }
func (q nextQueue) Less(i, j int) bool {
	if q[i].ns != q[j].ns {
		return q[i].ns < q[j].ns
	}
	return q[i].idx < q[j].idx
}
func (q nextQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *nextQueue) Push(x any)   { *q = append(*q, x.(nextSlot)) }
func (q *nextQueue) Pop() any {
	old := *q
	n := old[len(old)-1]
	*q = old[:len(old)-1]
	return n
}

// slotKey names a slot in the runner's maps.
type slotKey struct {
	job    string
	slot   int64
	manual string // a manual slot's ID; slot is then 0
}

// target names a slot to watch: a scheduled slot by its time, a manual slot
// by its ID.
type target struct {
	at     time.Time
	manual string
}

func (t target) isZero() bool { return t.at.IsZero() && t.manual == "" }

// targetOf is the slot a claim is for.
func targetOf(c slot.Claim) target {
	if c.Manual != nil {
		return target{manual: c.Manual.ID}
	}
	return target{at: c.Slot}
}

func (t target) key(job string) slotKey {
	if t.manual != "" {
		return slotKey{job: job, manual: t.manual}
	}
	return slotKey{job: job, slot: t.at.Unix()}
}

// keySet is a set of slots, safe for concurrent use; its zero value is
// empty.
type keySet struct {
	mu sync.Mutex
	m  map[slotKey]struct{}
}

func (s *keySet) add(k slotKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[slotKey]struct{}{}
	}
	s.m[k] = struct{}{}
}

func (s *keySet) remove(k slotKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

func (s *keySet) has(k slotKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[k]
	return ok
}
