package scheduler

import (
	"context"

	"github.com/slotcron/slotcron/slot"
)

// maxFinishBatch bounds one batch of finishes.
const maxFinishBatch = 1000

// finisher records runs' outcomes by group commit: it sends every finish that
// is waiting in one round trip, and the finishes that arrive meanwhile in the
// next. An idle replica pays no delay; a busy one sends full batches.
type finisher struct {
	s     *Scheduler
	queue chan finishJob
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
