package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slotstore"
)

// slotcronLogger receives the replicas' warnings (-v), or nothing.
var slotcronLogger = slog.New(slog.DiscardHandler)

// startSlotcron starts one slotcron scheduler per offset, r0, r1, ..., each
// with its own go-redis client and slot store, all running the job "peers"
// on "@every 1s" with every other setting at its default (spread routing,
// heartbeats every 5s). A run's slot is the one slotcron hands it.
func startSlotcron(ctx context.Context, srv *redisServer, offsets []time.Duration, rec *recorder, sent *atomic.Int64) (func(), error) {
	const prefix = "peers"
	reg := jobs.NewRegistry()
	if err := reg.Register("peers", func(ctx context.Context, run jobs.Run) error {
		rec.ran(run.Slot, run.Replica, time.Now())
		work()
		return nil
	}); err != nil {
		return nil, err
	}
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for i, offset := range offsets {
		replica := fmt.Sprint("r", i)
		rdb := srv.client(sent)
		store, err := slotstore.New(rdb, prefix)
		if err != nil {
			rdb.Close()
			stopAll()
			return nil, err
		}
		s, err := scheduler.New(store, reg,
			scheduler.WithReplicaID(replica),
			scheduler.WithJobs(scheduler.Job{Name: "peers", Schedule: "@every 1s"}),
			scheduler.WithClock(newSlotcronClock(offset)),
			scheduler.WithKeyPrefix(prefix),
			scheduler.WithLogger(slotcronLogger.With("replica", replica)))
		if err != nil {
			rdb.Close()
			stopAll()
			return nil, fmt.Errorf("scheduler.New: %w", err)
		}
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := s.Run(runCtx); err != nil {
				fmt.Fprintf(os.Stderr, "peers: slotcron replica %s: %v\n", replica, err)
			}
		}()
		stops = append(stops, func() { cancel(); <-done; rdb.Close() })
	}
	return stopAll, nil
}
