package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var registered = []string{"lottery", "report"}

const minimal = "jobs:\n  - name: lottery\n    schedule: \"@every 1s\"\n"

func TestDefaults(t *testing.T) {
	cfg, err := Load("config.yaml", []byte(minimal), registered)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ReplicaID: cfg.ReplicaID,
		Redis:     RedisConfig{Mode: "single", Addrs: []string{"127.0.0.1:6379"}, KeyPrefix: "slotcron", WaitTimeout: 100 * time.Millisecond},
		Lease:     LeaseConfig{TTL: 15 * time.Second, RenewEvery: 5 * time.Second},
		Clock:     ClockConfig{WarnSkew: 250 * time.Millisecond, MaxSkew: 2 * time.Second},
		HTTP:      HTTPConfig{Listen: ":8080"},
		Tracing:   TracingConfig{Exporter: "none", SampleRatio: 1, ServiceName: "slotcron-worker"},
		Alerts: AlertsConfig{Events: []string{"failed", "missed", "abandoned", "lease_lost", "drift", "data_loss", "paused"},
			SecretEnv: "SLOTCRON_WEBHOOK_SECRET", Timeout: 5 * time.Second, MaxAttempts: 10},
		ShutdownGrace: 30 * time.Second,
		Jobs:          []JobConfig{{Name: "lottery", Schedule: "@every 1s"}},
	}
	if cfg.ReplicaID == "" || !reflectEqual(*cfg, want) {
		t.Fatalf("defaults:\n got  %+v\n want %+v", *cfg, want)
	}
	// Zero where zero means something is kept: no HTTP, sample nothing, no grace.
	cfg, err = Load("config.yaml", []byte("http:\n  listen: \"\"\ntracing:\n  sample_ratio: 0\nshutdown_grace: 0s\n"+minimal), registered)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Listen != "" || cfg.Tracing.SampleRatio != 0 || cfg.ShutdownGrace != 0 {
		t.Fatalf("explicit zeros were replaced by defaults: %+v %+v %v", cfg.HTTP, cfg.Tracing, cfg.ShutdownGrace)
	}
	// OTLP endpoints default by exporter.
	cfg, _ = Load("config.yaml", []byte("tracing:\n  exporter: otlp-http\n"+minimal), registered)
	if cfg.Tracing.Endpoint != "127.0.0.1:4318" {
		t.Fatalf("otlp-http endpoint %q", cfg.Tracing.Endpoint)
	}
}

func TestPasswordFromEnvironment(t *testing.T) {
	t.Setenv(PasswordEnv, "from-env")
	cfg, err := Load("config.yaml", []byte("redis:\n  password: from-file\n"+minimal), registered)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis.Password != "from-env" {
		t.Fatalf("password %q, want the environment's", cfg.Redis.Password)
	}
}

// TestTracingEndpoints: plaintext to this machine needs nothing, to any
// other host tracing.insecure: true; https:// needs neither.
func TestTracingEndpoints(t *testing.T) {
	for _, tracing := range []string{
		"exporter: otlp-grpc",
		"exporter: otlp-grpc\n  endpoint: localhost:4317",
		"exporter: otlp-grpc\n  endpoint: 127.0.0.2:4317",
		"exporter: otlp-grpc\n  endpoint: \"[::1]:4317\"",
		"exporter: otlp-http\n  endpoint: http://LOCALHOST:4318/v1/traces",
		"exporter: otlp-http\n  endpoint: https://collector.example:4318",
		"exporter: otlp-grpc\n  endpoint: https://collector.example",
		"exporter: otlp-grpc\n  endpoint: collector:4317\n  insecure: true",
		"exporter: otlp-http\n  endpoint: http://10.0.0.7:4318\n  insecure: true",
		"exporter: stdout\n  endpoint: collector:4317",
	} {
		cfg, err := Load("config.yaml", []byte("tracing:\n  "+tracing+"\n"+minimal), registered)
		if err != nil {
			t.Errorf("%q: %v", tracing, err)
			continue
		}
		if want := strings.Contains(tracing, "insecure: true"); cfg.Tracing.Insecure != want {
			t.Errorf("%q: insecure %v", tracing, cfg.Tracing.Insecure)
		}
	}
}

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := LoadFile(filepath.Join("..", "config.example.yaml"), registered)
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	if len(cfg.Jobs) != 1 || cfg.Jobs[0].Name != "lottery" {
		t.Fatalf("jobs %+v", cfg.Jobs)
	}
}

// TestValidationMessages pins the message of every problem the config can
// have, with its line and field path.
func TestValidationMessages(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, []byte("not a certificate"), 0o600)
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"empty file", "", []string{`config.yaml:1: config: the file is empty`}},
		{"not YAML", "jobs: [\n", []string{`config.yaml:1: config: did not find expected node content`}},
		{"two documents", minimal + "---\njobs: []\n", []string{`config.yaml:4: config: a second YAML document; the file must hold one`}},
		{"not a mapping", "- a\n", []string{`config.yaml:1: config: want a mapping of fields, found a list`}},
		{"unknown field", "replicas: 3\n" + minimal, []string{`config.yaml:1: replicas: unknown field; config has replica_id, redis, lease, clock, http, tracing, alerts, shutdown_grace, jobs`}},
		{"unknown field with a space", "' 0': 1\n" + minimal, []string{`config.yaml:1: " 0": unknown field; config has replica_id, redis, lease, clock, http, tracing, alerts, shutdown_grace, jobs`}},
		{"unknown field with a line break", "lease:\n  \"t\\nl\": 5s\n" + minimal, []string{`config.yaml:2: lease."t\nl": unknown field; lease has ttl, renew_every`}},
		{"a list for a field name", "lease:\n  ? [ttl]\n  : 5s\n" + minimal, []string{`config.yaml:2: lease: want a field name, found a list`}},
		{"unknown nested field", "lease:\n  tll: 5s\n" + minimal, []string{`config.yaml:2: lease.tll: unknown field; lease has ttl, renew_every`}},
		{"set twice", "shutdown_grace: 1s\nshutdown_grace: 2s\n" + minimal, []string{`config.yaml:2: shutdown_grace: set twice (first on line 1)`}},
		{"a string for a list", "redis:\n  addrs: 127.0.0.1:6379\n" + minimal, []string{`config.yaml:2: redis.addrs: want a list, found a str ("127.0.0.1:6379")`}},
		{"duration without unit", "lease:\n  ttl: 15\n" + minimal, []string{`config.yaml:2: lease.ttl: 15 has no unit; write it as 500ms, 15s or 1h`}},
		{"not a duration", "lease:\n  ttl: soon\n" + minimal, []string{`config.yaml:2: lease.ttl: "soon" is not a duration; write it as 500ms, 15s or 1h`}},
		{"not a number", "redis:\n  db: one\n" + minimal, []string{`config.yaml:2: redis.db: "one" is not a whole number`}},
		{"not a boolean", "redis:\n  tls:\n    enabled: maybe\n" + minimal, []string{`config.yaml:3: redis.tls.enabled: "maybe" is not a boolean (true or false)`}},
		{"bad mode", "redis:\n  mode: standalone\n" + minimal, []string{`config.yaml:2: redis.mode: must be single, sentinel, cluster or embedded, got "standalone"`}},
		{"single with two addresses", "redis:\n  addrs: [a:1, b:2]\n" + minimal, []string{`config.yaml:2: redis.addrs: mode single takes one address, found 2`}},
		{"sentinel without sentinels or master", "redis:\n  mode: sentinel\n" + minimal, []string{
			`config.yaml:1: redis.addrs: mode sentinel needs the sentinels' addresses`,
			`config.yaml:1: redis.master_name: mode sentinel needs the master's name`}},
		{"cluster with a db", "redis:\n  mode: cluster\n  addrs: [a:1]\n  db: 2\n" + minimal, []string{`config.yaml:4: redis.db: Redis Cluster has only database 0`}},
		{"embedded with addresses", "redis:\n  mode: embedded\n  addrs: [a:1]\n" + minimal, []string{`config.yaml:3: redis.addrs: mode embedded runs its own in-process Redis; remove the addresses`}},
		{"address without port", "redis:\n  addrs: [localhost]\n" + minimal, []string{`config.yaml:2: redis.addrs[0]: "localhost" is not host:port`}},
		{"alerts: bad webhook, event and variable", "alerts:\n  webhooks: [hooks.example.com]\n  events: [failed, exploded]\n  secret_env: MY-SECRET\n  max_attempts: -1\n" + minimal, []string{
			`config.yaml:2: alerts.webhooks[0]: "hooks.example.com" is not an http:// or https:// URL`,
			`config.yaml:3: alerts.events[1]: "exploded" is not an event; the events are failed, missed, abandoned, lease_lost, drift, data_loss, paused`,
			`config.yaml:4: alerts.secret_env: "MY-SECRET" is not an environment variable's name`,
			`config.yaml:5: alerts.max_attempts: must be >= 1, got -1`}},
		{"negative db", "redis:\n  db: -1\n" + minimal, []string{`config.yaml:2: redis.db: must be >= 0, got -1`}},
		{"long alert timeout", "alerts:\n  timeout: 30s\n" + minimal, []string{
			`config.yaml:2: alerts.timeout: must be at most 20s (a replica holds a delivery 30s for one attempt and its record; a POST still going after that may be sent again by another replica), got 30s`}},
		{"long wait for replicas", "redis:\n  wait_replicas: 1\n  wait_timeout: 3s\n" + minimal, []string{
			`config.yaml:3: redis.wait_timeout: must be at most 1s (the answer to a batch comes after its WAIT, and the client waits 3s for it), got 3s`}},
		{"wait under a millisecond", "redis:\n  wait_replicas: 1\n  wait_timeout: 500us\n" + minimal, []string{
			`config.yaml:3: redis.wait_timeout: must be at least 1ms (WAIT counts whole milliseconds, and WAIT with 0 waits forever), got 500µs`}},
		{"wait against the lease", "redis:\n  wait_replicas: 1\n  wait_timeout: 300ms\nlease:\n  ttl: 1s\n" + minimal, []string{
			`config.yaml:3: redis.wait_timeout: must be at most 222ms, a third of what lease.ttl (1s) leaves after lease.renew_every (333ms): a won claim's answer comes after its WAIT (two after a Redis restart), and its lease must last until its first renewal, got 300ms`}},
		{"wait with the embedded redis", "redis:\n  mode: embedded\n  wait_replicas: 1\n" + minimal, []string{
			`config.yaml:3: redis.wait_replicas: mode embedded has no replicas to wait for`}},
		{"master name outside sentinel", "redis:\n  master_name: mymaster\n" + minimal, []string{
			`config.yaml:2: redis.master_name: set, but redis.mode is single (the master's name is for mode sentinel)`}},
		{"sentinel credentials outside sentinel", "redis:\n  mode: cluster\n  addrs: [a:1]\n  sentinel_username: u\n  sentinel_password: p\n" + minimal, []string{
			`config.yaml:4: redis.sentinel_username: set, but redis.mode is cluster (the sentinels' credentials are for mode sentinel)`,
			`config.yaml:5: redis.sentinel_password: set, but redis.mode is cluster (the sentinels' credentials are for mode sentinel)`}},
		{"ca file without tls", "redis:\n  tls:\n    ca_file: " + ca + "\n" + minimal, []string{`config.yaml:3: redis.tls.ca_file: set, but tls.enabled is false`}},
		{"missing ca file", "redis:\n  tls:\n    enabled: true\n    ca_file: /nonexistent/ca.pem\n" + minimal, []string{`config.yaml:4: redis.tls.ca_file: stat /nonexistent/ca.pem: no such file or directory`}},
		{"prefix with a brace", "redis:\n  key_prefix: \"a{b\"\n" + minimal, []string{`config.yaml:2: redis.key_prefix: "a{b" must be free of '{', '}' and spaces`}},
		{"short lease", "lease:\n  ttl: 50ms\n" + minimal, []string{`config.yaml:2: lease.ttl: must be at least 100ms, got 50ms`}},
		{"slow renewals", "lease:\n  ttl: 6s\n  renew_every: 4s\n" + minimal, []string{`config.yaml:3: lease.renew_every: must be > 0 and at most half of the lease TTL (6s), got 4s`}},
		{"negative warn skew", "clock:\n  warn_skew: -1s\n" + minimal, []string{`config.yaml:2: clock.warn_skew: must be > 0, got -1s`}},
		{"max under warn", "clock:\n  warn_skew: 1s\n  max_skew: 500ms\n" + minimal, []string{`config.yaml:3: clock.max_skew: must be >= clock.warn_skew (1s), got 500ms`}},
		{"bad listen", "http:\n  listen: \"8080\"\n" + minimal, []string{`config.yaml:2: http.listen: "8080" is not host:port (use :8080 for every interface, "" for no HTTP)`}},
		{"listen port out of range", "http:\n  listen: \":99999\"\n" + minimal, []string{`config.yaml:2: http.listen: ":99999": the port "99999" is neither a number from 0 to 65535 nor a service name`}},
		{"no events", "alerts:\n  webhooks: [\"http://127.0.0.1:9/hook\"]\n  events: []\n" + minimal, []string{`config.yaml:3: alerts.events: an empty list: leave the field out for every event, or list some (to send none, leave alerts.webhooks empty)`}},
		{"bad exporter", "tracing:\n  exporter: jaeger\n" + minimal, []string{`config.yaml:2: tracing.exporter: must be otlp-grpc, otlp-http, stdout or none, got "jaeger"`}},
		{"bad sample ratio", "tracing:\n  sample_ratio: 1.5\n" + minimal, []string{`config.yaml:2: tracing.sample_ratio: must be within [0, 1], got 1.5`}},
		{"NaN sample ratio", "tracing:\n  sample_ratio: .nan\n" + minimal, []string{`config.yaml:2: tracing.sample_ratio: must be within [0, 1], got NaN`}},
		{"negative grace", "shutdown_grace: -1s\n" + minimal, []string{`config.yaml:1: shutdown_grace: must be >= 0, got -1s`}},
		{"no jobs", "jobs: []\n", []string{`config.yaml:1: jobs: the cron table is empty; registered jobs: lottery, report`}},
		{"replica ID with a space", "replica_id: \"a b\"\n" + minimal, []string{`config.yaml:1: replica_id: a replica's ID may hold no space or control character: "a b" has ' ' at byte 1`}},
		{"no jobs at all", "replica_id: a\n", []string{`config.yaml:1: jobs: the cron table is empty; registered jobs: lottery, report`}},
		{"bad job name", "jobs:\n  - name: \"a b\"\n    schedule: \"@daily\"\n", []string{`config.yaml:2: jobs[0].name: jobs: invalid name: "a b" has ' ' at byte 1; use [A-Za-z0-9_.-]`}},
		{"unregistered job", "jobs:\n  - name: lotery\n    schedule: \"@daily\"\n", []string{`config.yaml:2: jobs[0].name: no job "lotery" is registered; registered: lottery, report`}},
		{"job twice", minimal + "  - name: lottery\n    schedule: \"@daily\"\n", []string{`config.yaml:4: jobs[1].name: "lottery" is listed twice (also jobs[0])`}},
		{"bad schedule", "jobs:\n  - name: lottery\n    schedule: \"* * * *\"\n", []string{`config.yaml:3: jobs[0].schedule: expected 5 or 6 fields, found 4`}},
		{"no schedule", "jobs:\n  - name: lottery\n", []string{`config.yaml:2: jobs[0].schedule: empty schedule`}},
		{"negative timeout", minimal + "    timeout: -1s\n", []string{`config.yaml:4: jobs[0].timeout: must be >= 0, got -1s`}},
		{"bad overlap", minimal + "    overlap: queue\n", []string{`config.yaml:4: jobs[0].overlap: must be "skip" or "allow", got "queue"`}},
		{"negative grace", minimal + "    misfire_grace: -1m\n", []string{`config.yaml:4: jobs[0].misfire_grace: must be > 0, got -1m0s`}},
		{"empty values keep their defaults", "lease:\n  ttl:\nclock:\n  max_skew: ~\n" + minimal + "    misfire_grace: null\n    retention: 1s\n", []string{
			`config.yaml:9: jobs[0].retention: 1s is shorter than misfire_grace + max_skew (1m0s + 2s)`}},
		{"zeros that would be defaults", "lease:\n  ttl: 0s\nclock:\n  max_skew: 0s\nalerts:\n  max_attempts: 0\n" + minimal +
			"    misfire_grace: 0s\n    catchup_window: 0s\n    retention: 0s\n", []string{
			`config.yaml:2: lease.ttl: 0 is not allowed: leave the field out for its default, or give a value above 0`,
			`config.yaml:4: clock.max_skew: 0 is not allowed: leave the field out for its default, or give a value above 0`,
			`config.yaml:6: alerts.max_attempts: 0 is not allowed: leave the field out for its default, or give a value above 0`,
			`config.yaml:10: jobs[0].misfire_grace: 0 is not allowed: leave the field out for its default, or give a value above 0`,
			`config.yaml:11: jobs[0].catchup_window: 0 is not allowed: leave the field out for its default, or give a value above 0`,
			`config.yaml:12: jobs[0].retention: 0 is not allowed: leave the field out for its default, or give a value above 0`}},
		{"bad catchup", minimal + "    catchup: some\n", []string{`config.yaml:4: jobs[0].catchup: must be "none", "last" or "all", got "some"`}},
		{"negative window", minimal + "    catchup_window: -1h\n", []string{`config.yaml:4: jobs[0].catchup_window: must be > 0, got -1h0m0s`}},
		{"bad policy", minimal + "    on_owner_lost: panic\n", []string{`config.yaml:4: jobs[0].on_owner_lost: must be "abandon" or "retry", got "panic"`}},
		{"attempts without retry", minimal + "    max_attempts: 5\n", []string{`config.yaml:4: jobs[0].max_attempts: applies only with on_owner_lost: retry (a slot is attempted once under abandon)`}},
		{"negative attempts", minimal + "    on_owner_lost: retry\n    max_attempts: -1\n", []string{`config.yaml:5: jobs[0].max_attempts: must be >= 1, got -1`}},
		{"retention under grace", minimal + "    retention: 30s\n", []string{`config.yaml:4: jobs[0].retention: 30s is shorter than misfire_grace + max_skew (1m0s + 2s)`}},
		{"retention under window", minimal + "    retention: 30m\n", []string{`config.yaml:4: jobs[0].retention: 30m0s is shorter than catchup_window + max_skew (1h0m0s + 2s)`}},
		// Sums past the longest duration wrap negative unless they saturate.
		{"grace that overflows", minimal + "    misfire_grace: 2562047h47m16s\n", []string{`config.yaml:2: jobs[0].retention: 24h0m0s is shorter than misfire_grace + max_skew (2562047h47m16s + 2s)`}},
		{"window that overflows", "jobs:\n  - name: lottery\n    schedule: \"@daily\"\n    catchup_window: 2562047h47m16s\n    retention: 2562047h47m16s\n", []string{`config.yaml:5: jobs[0].retention: 2562047h47m16s is shorter than catchup_window + max_skew (2562047h47m16s + 2s)`}},
		{"skew that overflows", "clock:\n  max_skew: 2562047h47m\n" + minimal, []string{`config.yaml:4: jobs[0].retention: 24h0m0s is shorter than misfire_grace + max_skew (1m0s + 2562047h47m0s)`}},
		// Settings that would mean something other than what they say.
		{"skip verify without tls", "redis:\n  tls:\n    insecure_skip_verify: true\n" + minimal, []string{`config.yaml:3: redis.tls.insecure_skip_verify: true, but tls.enabled is false`}},
		{"plaintext traces to a remote host", "tracing:\n  exporter: otlp-grpc\n  endpoint: collector:4317\n" + minimal, []string{`config.yaml:3: tracing.endpoint: "collector:4317" is not loopback, and traces would go to it in plaintext; write https://collector:4317 for TLS, or set tracing.insecure: true`}},
		{"plaintext URL to a remote host", "tracing:\n  exporter: otlp-http\n  endpoint: http://10.0.0.7:4318/v1/traces\n" + minimal, []string{`config.yaml:3: tracing.endpoint: "http://10.0.0.7:4318/v1/traces" is not loopback, and traces would go to it in plaintext; write https://10.0.0.7:4318/v1/traces for TLS, or set tracing.insecure: true`}},
		{"a trace UI that is not a URL", "tracing:\n  ui_url: jaeger:16686\n" + minimal, []string{`config.yaml:2: tracing.ui_url: "jaeger:16686" is not an http:// or https:// URL (Jaeger's UI: http://jaeger:16686)`}},
		{"insecure with https", "tracing:\n  exporter: otlp-http\n  endpoint: https://collector:4318\n  insecure: true\n" + minimal, []string{`config.yaml:4: tracing.insecure: true, but tracing.endpoint is https://`}},
		{"endpoint without port", "tracing:\n  exporter: otlp-grpc\n  endpoint: collector\n" + minimal, []string{`config.yaml:3: tracing.endpoint: "collector" is not host:port, http://host:port or https://host:port`}},
		{"endpoint with another scheme", "tracing:\n  exporter: otlp-http\n  endpoint: HTTPS://collector:4318\n" + minimal, []string{`config.yaml:3: tracing.endpoint: "HTTPS://collector:4318" is not host:port, http://host:port or https://host:port`}},
		// One problem, one error: nothing derived from a bad value.
		{"negative lease", "lease:\n  ttl: -5s\n" + minimal, []string{`config.yaml:2: lease.ttl: must be at least 100ms, got -5s`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("config.yaml", []byte(tt.yaml), registered)
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Load = %v, want Errors", err)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("errors:\n got  %q\n want %q", got, tt.want)
			}
		})
	}
}

// TestEveryProblemAtOnce: one file, many problems, all reported in file order.
func TestEveryProblemAtOnce(t *testing.T) {
	yaml := `redis:
  mode: single
  adrs: [x]
lease:
  ttl: fifteen
jobs:
  - name: lotery
    schedule: "* * * *"
  - name: lottery
    schedule: "@every 1s"
    retention: 10s
    overlap: queue
`
	_, err := Load("config.yaml", []byte(yaml), registered)
	want := `config.yaml:3: redis.adrs: unknown field; redis has mode, addrs, master_name, sentinel_username, sentinel_password, username, password, db, tls, key_prefix, wait_replicas, wait_timeout
config.yaml:5: lease.ttl: "fifteen" is not a duration; write it as 500ms, 15s or 1h
config.yaml:7: jobs[0].name: no job "lotery" is registered; registered: lottery, report
config.yaml:8: jobs[0].schedule: expected 5 or 6 fields, found 4
config.yaml:11: jobs[1].retention: 10s is shorter than misfire_grace + max_skew (1m0s + 2s)
config.yaml:12: jobs[1].overlap: must be "skip" or "allow", got "queue"`
	if err == nil || err.Error() != want {
		t.Fatalf("errors:\n%v\nwant:\n%s", err, want)
	}
}

var errorLine = regexp.MustCompile(`^config\.yaml:[1-9][0-9]*: \S`)

// FuzzConfig: Load never panics, every error it returns names a line, and
// it lists at most maxErrors and a count of the rest.
func FuzzConfig(f *testing.F) {
	example, _ := os.ReadFile(filepath.Join("..", "config.example.yaml"))
	for _, seed := range []string{"", minimal, string(example), "jobs: [\n", "- a\n", "a: &x [*x]\n",
		"redis:\n  addrs: {a: b}\n", "jobs:\n  - 3\n", "lease: 5\n", "jobs:\n  - name: lottery\n    schedule: \"CRON_TZ=X 0 0 * * *\"\n",
		"redis:\n  mode: \"single\n" + minimal, "lease:\n\tttl: 5s\n", "\x1f\x8b\x08\x00", "\xff\xfej\x00:\x00", minimal + "---\nx: [\n",
		minimal + "    misfire_grace: 2562047h47m16s\n", "lease:\n  ttl: -5s\n" + minimal,
		"tracing:\n  exporter: otlp-http\n  endpoint: http://[::1]:4318\n  insecure: true\n" + minimal,
		"x: &a {a: 1, b: 2}\njobs: [*a, *a, *a]\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Load("config.yaml", data, registered)
		if err == nil {
			return
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("Load returned %T %v, want Errors", err, err)
		}
		if len(errs) > maxErrors+2 { // the count, and an alias expansion
			t.Fatalf("%d errors listed", len(errs))
		}
		for _, e := range errs {
			if e.Line < 1 || !errorLine.MatchString(e.Error()) {
				t.Fatalf("error without a line: %q", e.Error())
			}
			if strings.ContainsAny(e.Error(), "\r\n") {
				t.Fatalf("error of more than one line: %q", e.Error())
			}
		}
	})
}

// TestEnvironmentOverrides: SLOTCRON_REPLICA_ID and SLOTCRON_HTTP_LISTEN
// override the file, so one file serves several replicas on one host; a bad
// value names the variable.
func TestEnvironmentOverrides(t *testing.T) {
	t.Setenv(ReplicaIDEnv, "replica-7")
	t.Setenv(HTTPListenEnv, "127.0.0.1:9107")
	cfg, err := Load("config.yaml", []byte("replica_id: from-file\nhttp:\n  listen: :8080\n"+minimal), registered)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReplicaID != "replica-7" || cfg.HTTP.Listen != "127.0.0.1:9107" {
		t.Fatalf("replica %q, listen %q", cfg.ReplicaID, cfg.HTTP.Listen)
	}
	t.Setenv(HTTPListenEnv, "")
	if cfg, err = Load("config.yaml", []byte(minimal), registered); err != nil || cfg.HTTP.Listen != "" {
		t.Fatalf("empty %s: listen %q, %v", HTTPListenEnv, cfg.HTTP.Listen, err)
	}
	t.Setenv(HTTPListenEnv, "9107")
	_, err = Load("config.yaml", []byte(minimal), registered)
	if want := `config.yaml: http.listen: "9107" is not host:port (use :8080 for every interface, "" for no HTTP) (set by SLOTCRON_HTTP_LISTEN)`; fmt.Sprint(err) != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}
