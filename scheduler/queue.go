package scheduler

import (
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
}

// pendingQueue is a min-heap of pending claims by due time (container/heap).
type pendingQueue []*pending

func (q pendingQueue) Len() int           { return len(q) }
func (q pendingQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q pendingQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *pendingQueue) Push(x any)        { *q = append(*q, x.(*pending)) }
func (q *pendingQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	*q = old[:len(old)-1]
	return p
}

// slotKey names a slot in the runner's maps.
type slotKey struct {
	job  string
	slot int64
}
