package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// Registrar adds a program's jobs to reg. env is what jobs that keep data in
// Redis need from the worker; its client connects on first use, so a
// Registrar must only keep it, not call it.
type Registrar func(reg *jobs.Registry, env Env) error

// Env is what the worker gives a Registrar.
type Env struct {
	// Redis is the worker's client, for jobs that keep data in Redis.
	Redis redis.UniversalClient
	// KeyPrefix is redis.key_prefix: put a job's keys under it, with the
	// job's name as hash tag (<prefix>:{<job>}:...), so that two deployments
	// on one Redis keep apart and a script can check the job's slot record
	// (slotstore.RecordKey) in the same call as its write.
	KeyPrefix string
	// Logger is the worker's JSON logger.
	Logger *slog.Logger
}

// usage is what worker, worker help and worker -h print.
const usage = `worker runs a cron table on every replica; for each slot, exactly one
replica runs the job.

Usage: worker COMMAND [-config FILE]

Commands:
  run       run the cron table until SIGTERM or SIGINT (the command if only flags are given)
  check     validate the config; print it with its defaults, and each job's next 3 slots
            (-no-env: the file alone, not the webhook secret it needs from the environment)
  status    print the live replicas, and each job's pause, lease holder and last 10 slot records
  pause     pause a job on every replica: worker pause JOB [-note TEXT]; its slots are recorded paused
  resume    end a job's pause: worker resume JOB
  backfill  run, in this process, a job's past slots that never started (no record, or recorded missed):
            worker backfill JOB -from T -to T [-dry-run] [-parallel N] (T: 2026-11-22T12:00:00Z)
  trigger   run a job now, once, in this process, as a manual slot of its own:
            worker trigger JOB [-note TEXT] [-key IDEMPOTENCY_KEY]; the same key never runs twice
  help      print this help

Flags:
  -config FILE  the YAML config (default config.yaml); see config.example.yaml

Environment (one config file for every replica):
  SLOTCRON_REPLICA_ID      overrides replica_id
  SLOTCRON_HTTP_LISTEN     overrides http.listen ("" for no HTTP)
  SLOTCRON_REDIS_PASSWORD  overrides redis.password
  SLOTCRON_REDIS_SENTINEL_PASSWORD  overrides redis.sentinel_password
  SLOTCRON_ADMIN_TOKEN     turns on the admin endpoints (trigger, pause, resume over HTTP): the bearer token
  SLOTCRON_WEBHOOK_SECRET  the key webhook payloads are signed with (alerts.secret_env names another)

Exit codes: 0 ok, 1 failure, 2 bad usage or config, 3 (trigger) not run: the key has a record
of a slot that did not run or failed (paused, skipped...), so trigger with another key.
`

// Main runs the worker's command line with os.Args and exits; see usage:
//
//	worker [run] -config FILE   run the cron table until SIGTERM or SIGINT
//	worker check -config FILE   validate the config, print it and each job's next 3 slots
//	worker status -config FILE  print the replicas, each job's pause, lease holder and last 10 slot records
//	worker pause JOB [-note T]  pause a job on every replica (its slots are recorded paused)
//	worker resume JOB           end a job's pause
//	worker backfill JOB -from T -to T [-dry-run] [-parallel N]
//	                            run the slots in [T, T] that never started (no record, or recorded missed)
//	worker help                 list the commands
func Main(register Registrar) {
	redis.SetLogger(goRedisLog)
	if args := os.Args[1:]; len(args) == 0 || strings.HasPrefix(args[0], "-") || args[0] == "run" {
		goRedisLog.on.Store(true)
	}
	os.Exit(Command(context.Background(), os.Args[1:], register, os.Stdout, os.Stderr))
}

// goRedisLog sends go-redis's own lines (a pool that can't dial, a Sentinel
// that names a new master) to the worker's JSON log, at WARN, so that a log
// pipeline parses every line the worker writes. Main installs it (go-redis
// has one logger per process) and turns it on for run. An operator's
// command pings Redis first and says in one line when it does not answer,
// which a line per failed dial would only bury: its lines are off until the
// ping has succeeded (reachable), and stay off for the short commands
// (status, pause, resume); backfill and trigger run jobs, and turn them on.
var goRedisLog = &redisLogger{log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}

type redisLogger struct {
	on  atomic.Bool
	log *slog.Logger
}

func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l.on.Load() {
		l.log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "go-redis")
	}
}

// Command is Main with its arguments, context and output given: it returns
// the exit code (0 ok, 1 failure, 2 bad usage or config). When ctx ends, run
// stops as on a signal.
func Command(ctx context.Context, args []string, register Registrar, stdout, stderr io.Writer) int {
	if len(args) == 0 || slices.Contains([]string{"help", "-h", "-help", "--help"}, args[0]) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	sub := "run"
	if !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "run", "check", "status", "pause", "resume", "backfill", "trigger":
	default:
		fmt.Fprintf(stderr, "worker: unknown command %q; use run, check, status, pause, resume, backfill or trigger (worker help lists them)\n", sub)
		return 2
	}
	fs := flag.NewFlagSet("worker "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.yaml", "the YAML config file")
	noEnv := new(bool)
	if sub == "check" {
		noEnv = fs.Bool("no-env", false, "check the file alone, not what the environment must provide (the webhook secret)")
	}
	var job string
	note := new(string)
	var bf backfillArgs
	key := new(string)
	takesJob := sub == "pause" || sub == "resume" || sub == "backfill" || sub == "trigger"
	if takesJob {
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") { // worker pause JOB -note TEXT
			job, args = args[0], args[1:]
		}
	}
	switch sub {
	case "pause":
		note = fs.String("note", "", "why: shown by status and in each paused slot's record")
	case "trigger":
		note = fs.String("note", "", "why: kept in the manual slot's record, shown by status")
		key = fs.String("key", "", "the idempotency key: the manual slot's ID; a key that has a record runs nothing. Default: a new UUIDv7")
	case "backfill":
		fs.StringVar(&bf.from, "from", "", "the first slot time to consider, RFC 3339 (2026-11-22T00:00:00Z)")
		fs.StringVar(&bf.to, "to", "", "the last slot time to consider, RFC 3339; not in the future")
		fs.BoolVar(&bf.dryRun, "dry-run", false, "print what would run and what is left alone; change nothing")
		fs.IntVar(&bf.parallel, "parallel", 1, "how many slots may run at once (overlap: skip runs one at a time anyway)")
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if job == "" && takesJob && fs.NArg() > 0 { // worker backfill -config F JOB -from T
		job = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); errors.Is(err, flag.ErrHelp) {
			return 0
		} else if err != nil {
			return 2
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "worker %s: unexpected arguments %q\n", sub, fs.Args())
		return 2
	}
	if job == "" && takesJob {
		fmt.Fprintf(stderr, "worker %s: name the job: worker %s JOB [-config FILE]\n", sub, sub)
		return 2
	}
	if sub == "trigger" && *key == "" && given(fs, "key") {
		// An unset variable (-key "$KEY") would otherwise run a new slot
		// each time: the idempotency the key was for, silently lost.
		fmt.Fprintln(stderr, "worker trigger: -key is empty: give the idempotency key, or leave -key out for a slot of its own")
		return 2
	}

	cfg, rdb, closeRedis, reg, err := setup(*path, register, sub == "check")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer closeRedis()
	if cfg.Redis.Mode == ModeEmbedded && sub != "run" && sub != "check" {
		fmt.Fprintf(stderr, "worker %s: redis.mode is embedded: each worker keeps its Redis in its own process, "+
			"so this command would only see a Redis of its own, empty; run the workers on a real Redis (redis.mode single) to use it\n", sub)
		return 2
	}
	switch sub {
	case "check":
		return check(cfg, *path, !*noEnv, stdout, stderr)
	case "status":
		if !reachable(ctx, cfg, rdb, sub, stderr) {
			return 1
		}
		return status(ctx, cfg, rdb, stdout, stderr)
	case "pause", "resume":
		return pause(ctx, cfg, rdb, sub, job, *note, stdout, stderr)
	case "backfill", "trigger":
		// SIGINT or SIGTERM stops claiming; runs in progress finish and are
		// recorded (for the shutdown grace), as in run.
		ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		if sub == "trigger" {
			return triggerCmd(ctx, cfg, rdb, reg, job, slot.Manual{ID: *key, Note: *note, By: asker()}, stdout, stderr)
		}
		return backfill(ctx, cfg, rdb, reg, job, bf, stdout, stderr)
	}
	return run(ctx, cfg, rdb, reg, stderr)
}

// given reports whether the command line set the flag name.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// reachable pings Redis for an operator's command, once its arguments are
// checked, and says in one line when it does not answer. Backfill and
// trigger run jobs for as long as they take: once Redis answers, go-redis's
// own lines go to their log again (see goRedisLog).
func reachable(ctx context.Context, cfg *Config, rdb redis.UniversalClient, sub string, stderr io.Writer) bool {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "worker %s: Redis (%s, %s) does not answer: %v\n", sub, cfg.Redis.Mode, strings.Join(cfg.Redis.Addrs, ", "), err)
		return false
	}
	if sub == "backfill" || sub == "trigger" {
		goRedisLog.on.Store(true)
	}
	return true
}

// setup loads the config, builds the Redis client and registers the jobs. It
// reports every problem of the file at once, registration included. check
// gets a client that never connects.
func setup(path string, register Registrar, offline bool) (*Config, redis.UniversalClient, func(), *jobs.Registry, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cfg, d, errs := load(path, data)
	var (
		rdb        redis.UniversalClient
		closeRedis = func() {}
	)
	// A config with errors is reported, not run: its Redis settings may be
	// among them (or past the errors listed), so nothing connects.
	if offline || len(errs) > 0 {
		rdb = redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never used: registration only keeps it
		closeRedis = func() { rdb.Close() }
	} else if rdb, closeRedis, err = NewRedis(cfg.Redis); err != nil {
		return nil, nil, nil, nil, err
	}
	reg := jobs.NewRegistry()
	env := Env{Redis: rdb, KeyPrefix: cfg.Redis.KeyPrefix, Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	if err := register(reg, env); err != nil {
		closeRedis()
		return nil, nil, nil, nil, fmt.Errorf("worker: registering jobs: %w", err)
	}
	cfg.checkRegistered(d, reg.Names())
	if len(d.errs) > 0 {
		closeRedis()
		sortErrors(d.errs)
		return nil, nil, nil, nil, d.errs
	}
	return cfg, rdb, closeRedis, reg, nil
}

func check(cfg *Config, path string, env bool, out, stderr io.Writer) int {
	// What run needs from the environment besides the file: check passes
	// only what run would start with, unless told to check the file alone
	// (a CI job that holds no production secrets).
	if env && len(cfg.Alerts.Webhooks) > 0 {
		if _, err := webhookSecret(cfg); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", path, err)
			return 2
		}
	}
	jobsWord := "jobs"
	if len(cfg.Jobs) == 1 {
		jobsWord = "job"
	}
	redisText := strings.TrimSpace(string(cfg.Redis.Mode) + " " + strings.Join(cfg.Redis.Addrs, ","))
	fmt.Fprintf(out, "%s: ok: %d %s, redis %s, replica %s\n", path, len(cfg.Jobs), jobsWord, redisText, cfg.ReplicaID)
	resolved, err := cfg.resolved()
	if err != nil {
		fmt.Fprintf(out, "worker check: %v\n", err)
		return 1
	}
	fmt.Fprintf(out, "\n# the config as the worker reads it, defaults filled in\n%s\n", resolved)
	now := time.Now()
	nameW, schedW := 20, 24 // at least; wider when a name or a schedule is
	for _, j := range cfg.Jobs {
		nameW, schedW = max(nameW, len(j.Name)), max(schedW, len(strconv.Quote(j.Schedule)))
	}
	for _, j := range cfg.Jobs {
		sched, _ := scheduler.ParseSchedule(j.Schedule)
		var next []string
		for t := now; len(next) < 3; {
			t = sched.Next(t)
			next = append(next, t.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(out, "%-*s %-*q next: %s\n", nameW, j.Name, schedW, j.Schedule, strings.Join(next, ", "))
	}
	return 0
}

func run(ctx context.Context, cfg *Config, rdb redis.UniversalClient, reg *jobs.Registry, stderr io.Writer) int {
	base := slog.New(slog.NewJSONHandler(stderr, nil))
	log := base.With("slotcron.replica", cfg.ReplicaID) // the scheduler adds it to its own lines
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	go func() {
		select {
		case sig := <-signals:
			log.Info("stopping: no new claims; running jobs get the shutdown grace", "signal", sig.String(),
				"shutdown_grace", cfg.ShutdownGrace.String())
			stop()
		case <-ctx.Done():
			return
		}
		if sig, ok := <-signals; ok {
			log.Error("second signal: exiting now, without waiting for running jobs", "signal", sig.String())
			os.Exit(1)
		}
	}()

	tel, err := NewTelemetry(ctx, cfg)
	if err != nil {
		log.Error("telemetry", "error", err)
		return 1
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("flushing telemetry", "error", err)
		}
	}()
	var storeOpts []slotstore.Option
	if cfg.Redis.WaitReplicas > 0 {
		storeOpts = append(storeOpts, slotstore.WithWaitReplicas(cfg.Redis.WaitReplicas, cfg.Redis.WaitTimeout))
	}
	slots, err := slotstore.New(rdb, cfg.Redis.KeyPrefix, storeOpts...)
	if err != nil {
		log.Error("slots", "error", err)
		return 1
	}
	opts := schedulerOptions(cfg, cfg.ReplicaID, base, tel)
	var alerts *alerter
	if len(cfg.Alerts.Webhooks) > 0 {
		secret, err := webhookSecret(cfg)
		if err != nil {
			log.Error("alerts", "error", err)
			return 2
		}
		if alerts, err = newAlerter(cfg, slots, secret, log, tel.MeterProvider); err != nil {
			log.Error("alerts", "error", err)
			return 1
		}
		actx, stopAlerts := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); alerts.loop(actx) }()
		defer func() {
			stopAlerts()
			<-done
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			alerts.flush(fctx) // what the last runs reported, for another replica to send
		}()
		opts = append(opts, scheduler.WithEventHook(alerts.hook))
	}
	s, err := scheduler.New(slots, reg, opts...)
	if err != nil {
		log.Error("scheduler", "error", err)
		return 1
	}
	if cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			log.Error("cannot listen on http.listen (or "+HTTPListenEnv+"): choose a free port, or \"\" for no HTTP",
				"http.listen", cfg.HTTP.Listen, "error", err)
			return 1
		}
		srv := &http.Server{Handler: handler(rdb, s, cfg, slots, os.Getenv(AdminTokenEnv), tel.Metrics), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("the HTTP server stopped: no metrics, health or dashboard from here on", "http.listen", cfg.HTTP.Listen, "error", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}()
		log.Info("http listening", "addr", ln.Addr().String())
	}
	log.Info("worker starting", "jobs", len(cfg.Jobs), "redis", cfg.Redis.Mode, "key_prefix", cfg.Redis.KeyPrefix)
	if err := s.Run(ctx); err != nil {
		log.Error("scheduler", "error", err)
		return 1
	}
	return 0
}

// schedulerOptions is the config as scheduler options, for the replica id.
func schedulerOptions(cfg *Config, id string, log *slog.Logger, tel *Telemetry) []scheduler.Option {
	return []scheduler.Option{
		scheduler.WithJobs(cfg.SchedulerJobs()...),
		scheduler.WithReplicaID(id),
		scheduler.WithLogger(log),
		scheduler.WithTracerProvider(tel.TracerProvider),
		scheduler.WithMeterProvider(tel.MeterProvider),
		scheduler.WithLeaseTTL(cfg.Lease.TTL),
		scheduler.WithRenewEvery(cfg.Lease.RenewEvery),
		scheduler.WithSkewLimits(cfg.Clock.WarnSkew, cfg.Clock.MaxSkew),
		scheduler.WithShutdownGrace(cfg.ShutdownGrace),
		scheduler.WithKeyPrefix(cfg.Redis.KeyPrefix),
	}
}
