package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncLocker is a gocron.Locker on redsync, wired as
// github.com/go-co-op/gocron-redis-lock (v2) wires it: one redsync over one
// go-redis pool, a new Mutex named after the job for every run, locked once
// with the caller's context and unlocked after the run; no auto-extend, as
// that package defaults to. gocron-redis-lock itself is not on the module
// proxy this was built with, so this is its wiring, not its code; its
// README passes redislock.WithTries(1), and so does newRedsyncLocker's
// caller.
type redsyncLocker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

// newRedsyncLocker pings rdb, as gocron-redis-lock's NewRedisLocker does,
// and returns the locker.
func newRedsyncLocker(ctx context.Context, rdb redis.UniversalClient, opts ...redsync.Option) (*redsyncLocker, error) {
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redsync locker: %w", err)
	}
	return &redsyncLocker{rs: redsync.New(goredis.NewPool(rdb)), opts: opts}, nil
}

var errNotLocked = errors.New("peers: redsync: lock not obtained")

func (l *redsyncLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	m := l.rs.NewMutex(key, l.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", errNotLocked, err)
	}
	return redsyncLock{m}, nil
}

type redsyncLock struct{ m *redsync.Mutex }

func (l redsyncLock) Unlock(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err != nil {
		return fmt.Errorf("redsync unlock: %w", err)
	}
	if !ok {
		return errors.New("redsync unlock: not held")
	}
	return nil
}

// startGocron starts one gocron v2 scheduler per offset, each with its own
// go-redis client and redsync locker (WithTries(1)), each running the job
// "peers" on the cron "* * * * * *" (every second, on the second, like
// slotcron's "@every 1s"). A run's slot is its replica's clock at the start,
// truncated to the second.
func startGocron(ctx context.Context, srv *redisServer, offsets []time.Duration, rec *recorder, sent *atomic.Int64) (func(), error) {
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for i, offset := range offsets {
		replica := fmt.Sprint("r", i)
		clock := newGocronClock(offset)
		rdb := srv.client(sent)
		locker, err := newRedsyncLocker(ctx, rdb, redsync.WithTries(1))
		if err != nil {
			rdb.Close()
			stopAll()
			return nil, err
		}
		s, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithDistributedLocker(locker), gocron.WithLocation(time.UTC))
		if err != nil {
			rdb.Close()
			stopAll()
			return nil, fmt.Errorf("gocron.NewScheduler: %w", err)
		}
		task := gocron.NewTask(func() {
			start := time.Now()
			rec.ran(start.Add(offset).Truncate(time.Second), replica, start)
			work()
		})
		if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), task, gocron.WithName("peers")); err != nil {
			s.Shutdown()
			rdb.Close()
			stopAll()
			return nil, fmt.Errorf("gocron NewJob: %w", err)
		}
		s.Start()
		stops = append(stops, func() { s.Shutdown(); rdb.Close() })
	}
	return stopAll, nil
}
