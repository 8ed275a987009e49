package scheduler

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// maxFinishBatch bounds one batch of finishes.
const maxFinishBatch = 1000

// finishLinger is how long a batch of finishes waits for the runs still
// going, at most: the runs of one tick end within a millisecond or two of
// each other, and one round trip for them all costs Redis less than one
// each (a round trip is about 40 µs of Redis's CPU on a 2-vCPU VM).
const finishLinger = 2 * time.Millisecond

// finisher records runs' outcomes by group commit: it sends every finish that
// is waiting in one round trip, and the finishes that arrive meanwhile in the
// next. While other runs are still going it waits for them, up to
// finishLinger, so that the runs of a tick share a round trip; a replica with
// no other run going sends at once. A run that goes on for long (a job of
// minutes) counts as going too, so while it runs every other finish waits
// the whole finishLinger: 2 ms, against a run's length.
type finisher struct {
	s     *Scheduler
	queue chan finishJob
	// going counts the runs started and not yet returned: those whose
	// finish may come next.
	going atomic.Int64
}

type finishJob struct {
	req  slot.FinishRequest
	done chan error
}

func newFinisher(s *Scheduler) *finisher {
	return &finisher{s: s, queue: make(chan finishJob, maxFinishBatch)}
}

// finish records one run's outcome and returns its error. It blocks until the
// batch that carries it has been answered. The loop must be running.
func (f *finisher) finish(req slot.FinishRequest) error {
	done := make(chan error, 1)
	f.queue <- finishJob{req, done}
	return <-done
}

// loop sends batches until ctx ends. Run stops it only after every job has
// returned, so no finish is left waiting.
func (f *finisher) loop(ctx context.Context) {
	for {
		var batch []finishJob
		select {
		case <-ctx.Done():
			return
		case j := <-f.queue:
			batch = append(batch, j)
		}
	drain:
		for len(batch) < maxFinishBatch {
			select {
			case j := <-f.queue:
				batch = append(batch, j)
			default:
				break drain
			}
		}
		if f.going.Load() > int64(len(batch)) { // runs still going may end in a moment
			t := time.NewTimer(finishLinger) // real time: it decides nothing, only batches
		linger:
			for len(batch) < maxFinishBatch && f.going.Load() > int64(len(batch)) {
				select {
				case j := <-f.queue:
					batch = append(batch, j)
				case <-t.C:
					break linger
				case <-ctx.Done():
					break linger
				}
			}
			t.Stop()
		}
		reqs := make([]slot.FinishRequest, len(batch))
		for i, j := range batch {
			reqs[i] = j.req
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		errs := f.s.claimer.Finish(fctx, reqs)
		cancel()
		for i, j := range batch {
			j.done <- errs[i]
		}
	}
}
