package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotcron/slotcron/slot"
)

// Option configures New. An Option that gets a bad value makes New fail.
type Option func(*config) error

type config struct {
	clock           Clock
	replica         string
	logger          *slog.Logger
	tracerProvider  trace.TracerProvider
	meterProvider   metric.MeterProvider
	leaseTTL        time.Duration
	renewEvery      time.Duration
	warnSkew        time.Duration
	maxSkew         time.Duration
	clockCheckEvery time.Duration
	shutdownGrace   time.Duration
	claimTimeout    time.Duration
	heartbeatEvery  time.Duration
	version         string
	keyPrefix       string
	jobs            []Job
	onEvent         func(Event)
	hedge           time.Duration // 0: automatic
	claimAhead      time.Duration // 0: automatic; < 0: off
}

// The scheduler-wide defaults.
const (
	DefaultLeaseTTL        = 15 * time.Second
	DefaultWarnSkew        = 250 * time.Millisecond
	DefaultMaxSkew         = 2 * time.Second
	DefaultClockCheckEvery = time.Minute
	DefaultShutdownGrace   = 30 * time.Second
)

func defaultConfig() config {
	return config{
		clock:           SystemClock(),
		replica:         DefaultReplicaID(),
		logger:          slog.New(slog.DiscardHandler),
		tracerProvider:  otel.GetTracerProvider(),
		meterProvider:   otel.GetMeterProvider(),
		leaseTTL:        DefaultLeaseTTL,
		warnSkew:        DefaultWarnSkew,
		maxSkew:         DefaultMaxSkew,
		clockCheckEvery: DefaultClockCheckEvery,
		shutdownGrace:   DefaultShutdownGrace,
		claimTimeout:    5 * time.Second,
		heartbeatEvery:  DefaultHeartbeatEvery,
		version:         buildVersion(),
		keyPrefix:       slot.DefaultKeyPrefix,
	}
}

// DefaultReplicaID is hostname-pid.
func DefaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "replica"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// WithJobs adds entries to the cron table. Each name must be registered in
// the Registry given to New.
func WithJobs(jobs ...Job) Option {
	return func(c *config) error { c.jobs = append(c.jobs, jobs...); return nil }
}

// WithClock replaces the machine's clock, for tests. Default: SystemClock.
func WithClock(clock Clock) Option {
	return func(c *config) error {
		if clock == nil {
			return errors.New("scheduler: WithClock: nil clock")
		}
		c.clock = clock
		return nil
	}
}

// WithReplicaID names this replica in slot records, logs and traces.
// Default: hostname-pid.
func WithReplicaID(id string) Option {
	return func(c *config) error {
		if err := slot.CheckReplicaID(id); err != nil {
			return fmt.Errorf("scheduler: WithReplicaID: %w", err)
		}
		c.replica = id
		return nil
	}
}

// WithLogger sets the logger. Default: a logger that discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("scheduler: WithLogger: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithTracerProvider sets where spans go. Default: the global provider.
// See NewIDGenerator for the one trace per slot.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("scheduler: WithTracerProvider: nil provider")
		}
		c.tracerProvider = tp
		return nil
	}
}

// WithMeterProvider sets where metrics go. Default: the global provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return errors.New("scheduler: WithMeterProvider: nil provider")
		}
		c.meterProvider = mp
		return nil
	}
}

// WithLeaseTTL sets the lease TTL of jobs that set none. Default 15s; at
// least 100ms.
func WithLeaseTTL(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl < MinLeaseTTL {
			return fmt.Errorf("scheduler: WithLeaseTTL: ttl must be at least %v, got %v", MinLeaseTTL, ttl)
		}
		c.leaseTTL = ttl
		return nil
	}
}

// WithRenewEvery sets how often the replica renews, in one round trip, every
// lease it holds. Default: a third of the shortest lease TTL. It must be at
// most half of every job's lease TTL.
func WithRenewEvery(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("scheduler: WithRenewEvery: must be > 0, got %v", d)
		}
		c.renewEvery = d
		return nil
	}
}

// WithSkewLimits sets the clock offset against Redis's TIME above which the
// replica logs a warning (default 250ms), and above which it refuses to
// claim (default 2s).
func WithSkewLimits(warn, max time.Duration) Option {
	return func(c *config) error {
		if warn <= 0 || max < warn {
			return fmt.Errorf("scheduler: WithSkewLimits: need 0 < warn <= max, got warn %v, max %v", warn, max)
		}
		c.warnSkew, c.maxSkew = warn, max
		return nil
	}
}

// WithClockCheckEvery sets how often the offset against Redis's TIME is
// measured. Default 1m.
func WithClockCheckEvery(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("scheduler: WithClockCheckEvery: must be > 0, got %v", d)
		}
		c.clockCheckEvery = d
		return nil
	}
}

// WithShutdownGrace sets how long running jobs may go on after Run's context
// ends, before their contexts are cancelled with ErrShutdown. Default 30s.
func WithShutdownGrace(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("scheduler: WithShutdownGrace: must be >= 0, got %v", d)
		}
		c.shutdownGrace = d
		return nil
	}
}

// WithHeartbeatEvery sets how often the replica publishes itself in the
// registry (its ID, version, clock offset and table) and compares its table
// with its peers'. A replica not seen for three periods is no longer live.
// Default 5s.
func WithHeartbeatEvery(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("scheduler: WithHeartbeatEvery: must be > 0, got %v", d)
		}
		c.heartbeatEvery = d
		return nil
	}
}

// WithVersion sets the version the replica publishes. Default: the main
// module's version and VCS revision, from the build info.
func WithVersion(v string) Option {
	return func(c *config) error { c.version = v; return nil }
}

// WithKeyPrefix names the deployment in trace IDs (prefix/job/slot), so that
// it matches the Redis key prefix. Default slot.DefaultKeyPrefix ("slotcron").
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" {
			return errors.New("scheduler: WithKeyPrefix: empty prefix")
		}
		c.keyPrefix = prefix
		return nil
	}
}

// WithEventHook calls fn with every Event this replica reports: failed,
// missed and abandoned slots it recorded, leases it lost, its clock's drift
// past max_skew, and data Redis lost. fn runs on the goroutine that recorded
// the event, so it must hand the event on and return (the worker writes it
// to its webhook outbox).
func WithEventHook(fn func(Event)) Option {
	return func(c *config) error {
		c.onEvent = fn
		return nil
	}
}

// WithClaimAhead sets how long before a live slot's time its claim goes out
// (the run still starts at the slot's time: it waits for it). The default,
// 0, is twice the longest of this replica's last 8 answered claim batches
// plus 1ms, within [2ms, 1s]; a negative d sends claims at the slot's time.
// Either way it is at most half of what max_skew leaves beside the clock
// offset measured against Redis, so that Redis never refuses a claim as too
// early, and at most a quarter of the job's period; and a job whose claim
// sent ahead found its previous run still going has its next 8 slots
// claimed at their time.
func WithClaimAhead(d time.Duration) Option {
	return func(c *config) error {
		if d > maxAhead {
			return fmt.Errorf("scheduler: WithClaimAhead: at most %v, got %v", maxAhead, d)
		}
		c.claimAhead = d
		return nil
	}
}

// WithHedge sets how long after a slot's time its hedgers, the two
// replicas after its preferred one, read its record and claim it if it has
// none (spread routing). The default, 0, is four round
// trips to Redis, within [5ms, 250ms]. A longer hedge costs that much delay
// when the preferred replica is gone; a shorter one lets replicas race more
// often.
func WithHedge(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("scheduler: WithHedge: must be >= 0, got %v", d)
		}
		c.hedge = d
		return nil
	}
}
