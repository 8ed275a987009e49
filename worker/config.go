package worker

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// Config is the worker's YAML configuration. config.example.yaml documents
// every field with its default.
type Config struct {
	ReplicaID     string        `yaml:"replica_id,omitempty"` // omitted by check when it is the default, this host's
	replicaIDSet  bool          // the file or SLOTCRON_REPLICA_ID named the replica
	Redis         RedisConfig   `yaml:"redis"`
	Lease         LeaseConfig   `yaml:"lease"`
	Clock         ClockConfig   `yaml:"clock"`
	HTTP          HTTPConfig    `yaml:"http"`
	Tracing       TracingConfig `yaml:"tracing"`
	Alerts        AlertsConfig  `yaml:"alerts"`
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	Jobs          []JobConfig   `yaml:"jobs"`
}

// RedisConfig says how to reach Redis.
type RedisConfig struct {
	Mode       string   `yaml:"mode"` // single, sentinel, cluster or embedded
	Addrs      []string `yaml:"addrs"`
	MasterName string   `yaml:"master_name"`
	// SentinelUsername and SentinelPassword: the sentinels' own credentials
	// (mode sentinel); Username and Password go to the master.
	SentinelUsername string    `yaml:"sentinel_username"`
	SentinelPassword string    `yaml:"sentinel_password"`
	Username         string    `yaml:"username"`
	Password         string    `yaml:"password"`
	DB               int       `yaml:"db"`
	TLS              TLSConfig `yaml:"tls"`
	KeyPrefix        string    `yaml:"key_prefix"`
	// WaitReplicas and WaitTimeout: see slotstore.WithWaitReplicas.
	WaitReplicas int           `yaml:"wait_replicas"`
	WaitTimeout  time.Duration `yaml:"wait_timeout"`
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
	Exporter string `yaml:"exporter"` // otlp-grpc, otlp-http, stdout or none
	Endpoint string `yaml:"endpoint"`
	// Insecure allows traces in plaintext to an endpoint that is not
	// loopback; see checkEndpoint.
	Insecure    bool    `yaml:"insecure"`
	SampleRatio float64 `yaml:"sample_ratio"`
	// UIURL is the trace UI (Jaeger's, http://jaeger:16686): the dashboard
	// links each slot to its trace there. Empty: no links.
	UIURL       string `yaml:"ui_url"`
	ServiceName string `yaml:"service_name"`
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
	MaxAttempts   int           `yaml:"max_attempts,omitempty"` // omitted by check under abandon, where it is an error
	Retention     time.Duration `yaml:"retention"`
	Routing       string        `yaml:"routing"`
}

// The environment variables that override what differs per replica, so that
// one config file serves every replica, even several on one host.
const (
	// PasswordEnv, when set, overrides redis.password.
	PasswordEnv = "SLOTCRON_REDIS_PASSWORD"
	// SentinelPasswordEnv, when set, overrides redis.sentinel_password.
	SentinelPasswordEnv = "SLOTCRON_REDIS_SENTINEL_PASSWORD"
	// ReplicaIDEnv, when set, overrides replica_id.
	ReplicaIDEnv = "SLOTCRON_REPLICA_ID"
	// HTTPListenEnv, when set, overrides http.listen; set to "" for no HTTP.
	HTTPListenEnv = "SLOTCRON_HTTP_LISTEN"
)

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
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	return Load(path, data, registered)
}

// readConfigFile returns the file at path, or its first maxFileSize+1
// bytes: enough for load to refuse it, whatever its size.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return data, nil
}

// Load parses data (read from file, which names it in errors) strictly and
// validates it. registered are the job names that have a Func. It returns
// every problem at once, as Errors, each with its line and field path, e.g.
// "config.yaml:14: jobs[1].schedule: expected 5 or 6 fields, found 4"; past
// 50 problems, one more line counts the rest. A file over 1 MiB, or that is
// not UTF-8 text, is one problem.
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
// and the lines of the fields. A file that can't be read as a config gives
// the defaults (callers build a Redis client from it before they report).
func load(file string, data []byte) (*Config, *decoder, Errors) {
	d := &decoder{file: file, lines: map[string]int{}}
	fail := func(e *Error) (*Config, *decoder, Errors) {
		d.summarize()
		d.errs, d.broken = append(d.errs, e), true
		var cfg Config
		cfg.defaults(d)
		return &cfg, d, d.errs
	}
	root, line, problem := parse(data)
	if root == nil {
		return fail(&Error{File: file, Line: line, Path: "config", Msg: problem})
	}
	if root.Kind != yaml.MappingNode {
		return fail(&Error{File: file, Line: root.Line, Path: "config", Msg: "want a mapping of fields, found a " + kind(root)})
	}
	var cfg Config
	d.decode(root, "", reflect.ValueOf(&cfg).Elem())
	if d.tooMany != nil {
		return fail(d.tooMany)
	}
	cfg.defaults(d)
	cfg.validate(d)
	d.summarize()
	return &cfg, d, d.errs
}

// setByEnv records that the environment variable env set path: its errors
// name it.
func (d *decoder) setByEnv(path, env string) {
	if d.env == nil {
		d.env = map[string]string{}
	}
	d.env[path] = env
}

// set reports whether the file set path.
func (d *decoder) set(path string) bool { _, ok := d.lines[path]; return ok }

// failed reports whether path has an error already.
func (d *decoder) failed(path string) bool {
	return slices.ContainsFunc(d.errs, func(e *Error) bool { return e.Path == path })
}

func (c *Config) defaults(d *decoder) {
	if id := os.Getenv(ReplicaIDEnv); id != "" {
		c.ReplicaID = id
		d.setByEnv("replica_id", ReplicaIDEnv)
	}
	c.replicaIDSet = c.ReplicaID != ""
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
	if pw := os.Getenv(SentinelPasswordEnv); pw != "" {
		c.Redis.SentinelPassword = pw
		d.setByEnv("redis.sentinel_password", SentinelPasswordEnv)
	}
	if c.Redis.KeyPrefix == "" {
		c.Redis.KeyPrefix = slot.DefaultKeyPrefix
	}
	orDefault(d, "redis.wait_timeout", &c.Redis.WaitTimeout, 100*time.Millisecond)
	orDefault(d, "lease.ttl", &c.Lease.TTL, scheduler.DefaultLeaseTTL)
	orDefault(d, "lease.renew_every", &c.Lease.RenewEvery, scheduler.DefaultRenewEvery(c.Lease.TTL))
	orDefault(d, "clock.warn_skew", &c.Clock.WarnSkew, scheduler.DefaultWarnSkew)
	orDefault(d, "clock.max_skew", &c.Clock.MaxSkew, scheduler.DefaultMaxSkew)
	if listen, ok := os.LookupEnv(HTTPListenEnv); ok {
		c.HTTP.Listen = listen
		d.setByEnv("http.listen", HTTPListenEnv)
	} else if !d.set("http.listen") {
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
	if len(c.Alerts.Events) == 0 {
		if d.set("alerts.events") && !d.empty["alerts.events"] && !d.broken && !d.failed("alerts.events") {
			// "events: []" reads as "none", which the default would silently make "all".
			d.errorf(d.lineOf("alerts.events"), "alerts.events",
				"an empty list: leave the field out for every event, or list some (to send none, leave alerts.webhooks empty)")
		}
		for _, k := range scheduler.EventKinds {
			c.Alerts.Events = append(c.Alerts.Events, string(k))
		}
	}
	if c.Alerts.SecretEnv == "" {
		c.Alerts.SecretEnv = DefaultWebhookSecretEnv
	}
	orDefault(d, "alerts.timeout", &c.Alerts.Timeout, 5*time.Second)
	orDefault(d, "alerts.max_attempts", &c.Alerts.MaxAttempts, 10)
	for i := range c.Jobs {
		// The scheduler gives a job's zero fields its defaults (validate
		// names them): here only a zero written in the file is refused.
		jc, p := &c.Jobs[i], fmt.Sprintf("jobs[%d].", i)
		orDefault(d, p+"misfire_grace", &jc.MisfireGrace, 0)
		orDefault(d, p+"catchup_window", &jc.CatchupWindow, 0)
		orDefault(d, p+"retention", &jc.Retention, 0)
		orDefault(d, p+"max_attempts", &jc.MaxAttempts, 0)
	}
}

// orDefault gives the field at path its default when it is zero. A zero
// written in the file is an error rather than the default: "misfire_grace:
// 0s" reads as "no grace", and would silently be a minute.
// (An empty value keeps the default; a value that could not be read is
// zero too, and its error says so; in a file that could not be read as a
// whole, the fields hold nothing.) The
// default is given either way, so the checks that follow do not complain
// of the zero again.
func orDefault[T time.Duration | int](d *decoder, path string, v *T, def T) {
	if *v != 0 {
		return
	}
	if d.set(path) && !d.empty[path] && !d.broken && !d.failed(path) {
		d.errorf(d.lineOf(path), path, "0 is not allowed: leave the field out for its default, or give a value above 0")
	}
	*v = def
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
		Routing:       scheduler.Routing(jc.Routing),
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

// resolved is the config as the worker uses it, as YAML: defaults filled in,
// each job's included, and the Redis password masked.
func (c *Config) resolved() ([]byte, error) {
	shown := *c
	if !c.replicaIDSet { // hostname-pid of the process that checks: each replica has its own
		shown.ReplicaID = ""
	}
	if shown.Redis.SentinelPassword != "" {
		shown.Redis.SentinelPassword = "(set, not shown)"
	}
	if shown.Redis.Password != "" {
		shown.Redis.Password = "(set, not shown)"
	}
	shown.Jobs = make([]JobConfig, len(c.Jobs))
	for i, jc := range c.Jobs {
		j := jc.schedulerJob().WithDefaults(c.Lease.TTL)
		shown.Jobs[i] = JobConfig{Name: j.Name, Schedule: j.Schedule, Timeout: j.Timeout, Overlap: string(j.Overlap),
			MisfireGrace: j.MisfireGrace, Catchup: string(j.Catchup), CatchupWindow: j.CatchupWindow,
			OnOwnerLost: string(j.OnOwnerLost), MaxAttempts: j.MaxAttempts, Retention: j.Retention, Routing: string(j.Routing)}
		if j.OnOwnerLost != scheduler.OwnerLostRetry {
			shown.Jobs[i].MaxAttempts = 0 // one attempt, and setting it is an error: not shown
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(shown); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}
