package worker

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
)

// Config is the worker's YAML configuration. config.example.yaml documents
// every field with its default.
type Config struct {
	ReplicaID     string        `yaml:"replica_id"`
	Redis         RedisConfig   `yaml:"redis"`
	Lease         LeaseConfig   `yaml:"lease"`
	Clock         ClockConfig   `yaml:"clock"`
	HTTP          HTTPConfig    `yaml:"http"`
	Tracing       TracingConfig `yaml:"tracing"`
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	Jobs          []JobConfig   `yaml:"jobs"`
}

// RedisConfig says how to reach Redis.
type RedisConfig struct {
	Mode       string    `yaml:"mode"` // single, sentinel, cluster or embedded
	Addrs      []string  `yaml:"addrs"`
	MasterName string    `yaml:"master_name"`
	Username   string    `yaml:"username"`
	Password   string    `yaml:"password"`
	DB         int       `yaml:"db"`
	TLS        TLSConfig `yaml:"tls"`
	KeyPrefix  string    `yaml:"key_prefix"`
}

// TLSConfig turns TLS on for Redis.
type TLSConfig struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// LeaseConfig sets the lease of every run.
type LeaseConfig struct {
	TTL        time.Duration `yaml:"ttl"`
	RenewEvery time.Duration `yaml:"renew_every"`
}

// ClockConfig sets the limits on the clock offset from Redis.
type ClockConfig struct {
	WarnSkew time.Duration `yaml:"warn_skew"`
	MaxSkew  time.Duration `yaml:"max_skew"`
}

// HTTPConfig sets the health and metrics endpoint.
type HTTPConfig struct {
	Listen string `yaml:"listen"`
}

// TracingConfig sets where traces go.
type TracingConfig struct {
	Exporter    string  `yaml:"exporter"` // otlp-grpc, otlp-http, stdout or none
	Endpoint    string  `yaml:"endpoint"`
	SampleRatio float64 `yaml:"sample_ratio"`
	ServiceName string  `yaml:"service_name"`
}

// JobConfig is an entry of the cron table; see scheduler.Job.
type JobConfig struct {
	Name          string        `yaml:"name"`
	Schedule      string        `yaml:"schedule"`
	Timeout       time.Duration `yaml:"timeout"`
	Overlap       string        `yaml:"overlap"`
	MisfireGrace  time.Duration `yaml:"misfire_grace"`
	Catchup       string        `yaml:"catchup"`
	CatchupWindow time.Duration `yaml:"catchup_window"`
	OnOwnerLost   string        `yaml:"on_owner_lost"`
	MaxAttempts   int           `yaml:"max_attempts"`
	Retention     time.Duration `yaml:"retention"`
}

// PasswordEnv is the environment variable that, when set, overrides redis.password.
const PasswordEnv = "SLOTCRON_REDIS_PASSWORD"

// The modes of redis.mode.
const (
	ModeSingle   = "single"
	ModeSentinel = "sentinel"
	ModeCluster  = "cluster"
	ModeEmbedded = "embedded"
)

// The exporters of tracing.exporter.
const (
	ExporterOTLPGRPC = "otlp-grpc"
	ExporterOTLPHTTP = "otlp-http"
	ExporterStdout   = "stdout"
	ExporterNone     = "none"
)

// LoadFile reads and validates a config file; see Load.
func LoadFile(path string, registered []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return Load(path, data, registered)
}

// Load parses data (read from file, which names it in errors) strictly and
// validates it. registered are the job names that have a Func. It returns
// every problem at once, as Errors, each with its line and field path, e.g.
// "config.yaml:14: jobs[1].schedule: expected 5 or 6 fields, found 4".
func Load(file string, data []byte, registered []string) (*Config, error) {
	cfg, d, _ := load(file, data)
	cfg.checkRegistered(d, registered)
	if len(d.errs) > 0 {
		sortErrors(d.errs)
		return nil, d.errs
	}
	return cfg, nil
}

// load parses and validates everything but job registration. It returns the
// config as far as it could read it, and the decoder that holds the errors
// and the lines of the fields.
func load(file string, data []byte) (*Config, *decoder, Errors) {
	d := &decoder{file: file, lines: map[string]int{}}
	fail := func(e *Error) (*Config, *decoder, Errors) {
		d.errs, d.broken = append(d.errs, e), true
		return &Config{}, d, d.errs
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if num, after, ok := strings.Cut(rest, ": "); ok {
				if n, err := strconv.Atoi(num); err == nil {
					line, msg = n, after
				}
			}
		}
		if msg == "EOF" {
			msg = "the file is empty"
		}
		return fail(&Error{File: file, Line: line, Path: "config", Msg: msg})
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return fail(&Error{File: file, Line: extra.Line, Path: "config", Msg: "a second YAML document; the file must hold one"})
	}
	var cfg Config
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return fail(&Error{File: file, Line: root.Line, Path: "config", Msg: "want a mapping of fields, found a " + kind(root)})
	}
	d.decode(root, "", reflect.ValueOf(&cfg).Elem())
	cfg.defaults(d)
	cfg.validate(d)
	return &cfg, d, d.errs
}

// set reports whether the file set path.
func (d *decoder) set(path string) bool { _, ok := d.lines[path]; return ok }

func (c *Config) defaults(d *decoder) {
	if c.ReplicaID == "" {
		c.ReplicaID = scheduler.DefaultReplicaID()
	}
	if c.Redis.Mode == "" {
		c.Redis.Mode = ModeSingle
	}
	if len(c.Redis.Addrs) == 0 && c.Redis.Mode == ModeSingle {
		c.Redis.Addrs = []string{"127.0.0.1:6379"}
	}
	if pw := os.Getenv(PasswordEnv); pw != "" {
		c.Redis.Password = pw
	}
	if c.Redis.KeyPrefix == "" {
		c.Redis.KeyPrefix = "slotcron"
	}
	if c.Lease.TTL == 0 {
		c.Lease.TTL = scheduler.DefaultLeaseTTL
	}
	if c.Lease.RenewEvery == 0 {
		c.Lease.RenewEvery = c.Lease.TTL / 3
	}
	if c.Clock.WarnSkew == 0 {
		c.Clock.WarnSkew = scheduler.DefaultWarnSkew
	}
	if c.Clock.MaxSkew == 0 {
		c.Clock.MaxSkew = scheduler.DefaultMaxSkew
	}
	if !d.set("http.listen") {
		c.HTTP.Listen = ":8080"
	}
	if c.Tracing.Exporter == "" {
		c.Tracing.Exporter = ExporterNone
	}
	if c.Tracing.Endpoint == "" {
		switch c.Tracing.Exporter {
		case ExporterOTLPGRPC:
			c.Tracing.Endpoint = "127.0.0.1:4317"
		case ExporterOTLPHTTP:
			c.Tracing.Endpoint = "127.0.0.1:4318"
		}
	}
	if !d.set("tracing.sample_ratio") {
		c.Tracing.SampleRatio = 1
	}
	if c.Tracing.ServiceName == "" {
		c.Tracing.ServiceName = "slotcron-worker"
	}
	if !d.set("shutdown_grace") {
		c.ShutdownGrace = scheduler.DefaultShutdownGrace
	}
}

func (c *Config) validate(d *decoder) {
	bad := func(path, format string, args ...any) {
		d.errorf(d.lineOf(path), path, format, args...)
	}
	r := c.Redis
	switch r.Mode {
	case ModeSingle:
		if len(r.Addrs) != 1 {
			bad("redis.addrs", "mode single takes one address, found %d", len(r.Addrs))
		}
	case ModeSentinel:
		if len(r.Addrs) == 0 {
			bad("redis.addrs", "mode sentinel needs the sentinels' addresses")
		}
		if r.MasterName == "" {
			bad("redis.master_name", "mode sentinel needs the master's name")
		}
	case ModeCluster:
		if len(r.Addrs) == 0 {
			bad("redis.addrs", "mode cluster needs at least one node's address")
		}
		if r.DB != 0 {
			bad("redis.db", "Redis Cluster has only database 0")
		}
	case ModeEmbedded:
		if len(r.Addrs) > 0 {
			bad("redis.addrs", "mode embedded runs its own in-process Redis; remove the addresses")
		}
	default:
		bad("redis.mode", "must be single, sentinel, cluster or embedded, got %q", r.Mode)
	}
	for i, a := range r.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			bad(fmt.Sprintf("redis.addrs[%d]", i), "%q is not host:port", a)
		}
	}
	if r.DB < 0 {
		bad("redis.db", "must be >= 0, got %d", r.DB)
	}
	if r.TLS.CAFile != "" {
		if _, err := os.Stat(r.TLS.CAFile); err != nil {
			bad("redis.tls.ca_file", "%v", err)
		}
		if !r.TLS.Enabled {
			bad("redis.tls.ca_file", "set, but tls.enabled is false")
		}
	}
	if strings.ContainsAny(r.KeyPrefix, "{} ") {
		bad("redis.key_prefix", "%q must be free of '{', '}' and spaces", r.KeyPrefix)
	}
	if c.Lease.TTL < 100*time.Millisecond {
		bad("lease.ttl", "must be at least 100ms, got %v", c.Lease.TTL)
	}
	if c.Lease.RenewEvery <= 0 || c.Lease.RenewEvery > c.Lease.TTL/2 {
		bad("lease.renew_every", "must be > 0 and at most half of lease.ttl (%v), got %v", c.Lease.TTL, c.Lease.RenewEvery)
	}
	if c.Clock.WarnSkew <= 0 {
		bad("clock.warn_skew", "must be > 0, got %v", c.Clock.WarnSkew)
	}
	if c.Clock.MaxSkew < c.Clock.WarnSkew {
		bad("clock.max_skew", "must be >= clock.warn_skew (%v), got %v", c.Clock.WarnSkew, c.Clock.MaxSkew)
	}
	if c.HTTP.Listen != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			bad("http.listen", "%q is not host:port (use :8080 for every interface, \"\" for no HTTP)", c.HTTP.Listen)
		}
	}
	switch c.Tracing.Exporter {
	case ExporterOTLPGRPC, ExporterOTLPHTTP, ExporterStdout, ExporterNone:
	default:
		bad("tracing.exporter", "must be otlp-grpc, otlp-http, stdout or none, got %q", c.Tracing.Exporter)
	}
	if c.Tracing.SampleRatio < 0 || c.Tracing.SampleRatio > 1 {
		bad("tracing.sample_ratio", "must be within [0, 1], got %v", c.Tracing.SampleRatio)
	}
	if c.ShutdownGrace < 0 {
		bad("shutdown_grace", "must be >= 0, got %v", c.ShutdownGrace)
	}
	seen := map[string]int{}
	for i, jc := range c.Jobs {
		p := fmt.Sprintf("jobs[%d]", i)
		j := jc.schedulerJob().WithDefaults(c.Lease.TTL)
		for _, fe := range j.Validate(c.Clock.MaxSkew) {
			if fe.Field == "lease_ttl" {
				continue // reported on lease.ttl
			}
			bad(p+"."+fe.Field, "%v", fe.Err)
		}
		if first, ok := seen[jc.Name]; ok && jc.Name != "" {
			bad(p+".name", "%q is listed twice (also jobs[%d])", jc.Name, first)
		}
		seen[jc.Name] = i
	}
}

// checkRegistered reports the jobs of the table that no Func is registered
// under, and an empty table, naming the registered jobs.
func (c *Config) checkRegistered(d *decoder, registered []string) {
	if d.broken {
		return
	}
	names := strings.Join(registered, ", ")
	if len(registered) == 0 {
		names = "none"
	}
	if len(c.Jobs) == 0 {
		d.errorf(d.lineOf("jobs"), "jobs", "the cron table is empty; registered jobs: %s", names)
	}
	for i, jc := range c.Jobs {
		if jc.Name != "" && jobs.ValidateName(jc.Name) == nil && !slices.Contains(registered, jc.Name) {
			p := fmt.Sprintf("jobs[%d].name", i)
			d.errorf(d.lineOf(p), p, "no job %q is registered; registered: %s", jc.Name, names)
		}
	}
}

// schedulerJob is the entry as the scheduler takes it.
func (jc JobConfig) schedulerJob() scheduler.Job {
	return scheduler.Job{
		Name:          jc.Name,
		Schedule:      jc.Schedule,
		Timeout:       jc.Timeout,
		Overlap:       scheduler.Overlap(jc.Overlap),
		MisfireGrace:  jc.MisfireGrace,
		Catchup:       scheduler.Catchup(jc.Catchup),
		CatchupWindow: jc.CatchupWindow,
		OnOwnerLost:   scheduler.OwnerLost(jc.OnOwnerLost),
		MaxAttempts:   jc.MaxAttempts,
		Retention:     jc.Retention,
	}
}

// SchedulerJobs returns the cron table as the scheduler takes it.
func (c *Config) SchedulerJobs() []scheduler.Job {
	out := make([]scheduler.Job, len(c.Jobs))
	for i, jc := range c.Jobs {
		out[i] = jc.schedulerJob()
	}
	return out
}
