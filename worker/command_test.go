package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// ticker registers one job, "tick", that counts its runs under key and then
// works for half a second, long enough for its lease to be renewed.
func ticker(key string) Registrar {
	return func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, run jobs.Run) error {
			if err := env.Redis.Incr(ctx, key).Err(); err != nil {
				return err
			}
			select {
			case <-time.After(500 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	}
}

func writeConfig(t *testing.T, body string) string {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a buffer that a running command writes to while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// tickTock registers two jobs that do nothing, tick and tock.
func tickTock(reg *jobs.Registry, _ Env) error {
	return errors.Join(reg.Register("tick", func(context.Context, jobs.Run) error { return nil }),
		reg.Register("tock", func(context.Context, jobs.Run) error { return nil }))
}

// TestCheckAlignsTheJobs: a long schedule widens the column rather than
// pushing its line's next slots out of line.
func TestCheckAlignsTheJobs(t *testing.T) {
	path := writeConfig(t, "jobs:\n  - name: tick\n    schedule: \"CRON_TZ=America/Argentina/Buenos_Aires 0 0 12 * * *\"\n"+
		"  - name: tock\n    schedule: \"@daily\"\n")
	var out, errb bytes.Buffer
	if code := Command(context.Background(), []string{"check", "-config", path}, tickTock, &out, &errb); code != 0 {
		t.Fatalf("check: exit %d: %s", code, errb.String())
	}
	var cols []int
	for _, l := range strings.Split(out.String(), "\n") {
		if i := strings.Index(l, " next: "); i > 0 {
			cols = append(cols, i)
		}
	}
	if len(cols) != 2 || cols[0] != cols[1] {
		t.Fatalf("the next slots start at columns %v:\n%s", cols, out.String())
	}
}

func TestCheckPrintsNextSlots(t *testing.T) {
	path := writeConfig(t, "jobs:\n  - name: tick\n    schedule: \"0 0 12 * * *\"\n")
	var out, errb bytes.Buffer
	if code := Command(context.Background(), []string{"check", "-config", path}, ticker("x"), &out, &errb); code != 0 {
		t.Fatalf("check: exit %d: %s", code, errb.String())
	}
	line := regexp.MustCompile(`tick\s+"0 0 12 \* \* \*"\s+next: (\S+T12:00:00Z), (\S+T12:00:00Z), (\S+T12:00:00Z)`)
	if !line.MatchString(out.String()) {
		t.Fatalf("check output:\n%s", out.String())
	}
}

// TestCheckNeedsTheWebhookSecret: check passes only a config that run
// would start with, environment included: webhooks need their signing key.
func TestCheckNeedsTheWebhookSecret(t *testing.T) {
	path := writeConfig(t, "alerts:\n  webhooks: [\"https://hooks.example.com/x\"]\njobs:\n  - name: tick\n    schedule: \"0 0 12 * * *\"\n")
	t.Setenv(DefaultWebhookSecretEnv, "")
	var out, errb bytes.Buffer
	code := Command(context.Background(), []string{"check", "-config", path}, ticker("x"), &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), DefaultWebhookSecretEnv+" (alerts.secret_env) is empty") || strings.Contains(out.String(), "ok") {
		t.Fatalf("check without the secret: exit %d\n%s%s", code, out.String(), errb.String())
	}
	t.Setenv(DefaultWebhookSecretEnv, "k3y")
	out.Reset()
	errb.Reset()
	if code := Command(context.Background(), []string{"check", "-config", path}, ticker("x"), &out, &errb); code != 0 {
		t.Fatalf("check with the secret: exit %d\n%s%s", code, out.String(), errb.String())
	}
	t.Setenv(DefaultWebhookSecretEnv, "")
	if code := Command(context.Background(), []string{"check", "-no-env", "-config", path}, ticker("x"), &out, &errb); code != 0 {
		t.Fatalf("check -no-env without the secret: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

func TestCommandRefusesBadInput(t *testing.T) {
	bad := writeConfig(t, "jobs:\n  - name: tock\n    schedule: \"* *\"\n")
	embedded := writeConfig(t, "redis:\n  mode: embedded\njobs:\n  - name: tick\n    schedule: \"@every 1s\"\n")
	from, to := time.Now().Add(-30*time.Minute).UTC().Format(time.RFC3339), time.Now().Add(-10*time.Minute).UTC().Format(time.RFC3339)
	down := writeConfig(t, "redis:\n  addrs: [\"127.0.0.1:1\"]\njobs:\n  - name: tick\n    schedule: \"@every 1s\"\n")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := writeConfig(t, fmt.Sprintf("redis:\n  addrs: [\"127.0.0.1:1\"]\nhttp:\n  listen: %q\njobs:\n  - name: tick\n    schedule: \"@every 1s\"\n", taken.Addr()))
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"check", "-config", bad}, 2, `config.yaml:2: jobs[0].name: no job "tock" is registered; registered: tick`},
		{[]string{"check", "-config", bad}, 2, `config.yaml:3: jobs[0].schedule: expected 5 or 6 fields, found 2`},
		{[]string{"run", "-config", bad}, 2, "registered: tick"},
		{[]string{"run", "-config", busy}, 1, `"msg":"cannot listen on http.listen (or SLOTCRON_HTTP_LISTEN): choose a free port`},
		{[]string{"check", "-config", "/nonexistent.yaml"}, 2, "no such file"},
		{[]string{"deploy"}, 2, `unknown command "deploy"`},
		{[]string{"check", "-config", bad, "extra"}, 2, "unexpected arguments"},
		{[]string{"pause", "-config", bad}, 2, "worker pause: name the job: worker pause JOB"},
		{[]string{"resume", "tick", "tock"}, 2, "unexpected arguments"},
		{[]string{"pause", "tick", "-config", embedded}, 2, "worker pause: redis.mode is embedded"},
		{[]string{"pause", "tick", "-config", down}, 1, "worker pause: Redis (single, 127.0.0.1:1) does not answer: "},
		{[]string{"trigger", "tick", "-config", down}, 1, "worker trigger: Redis (single, 127.0.0.1:1) does not answer: "},
		{[]string{"backfill", "tick", "-config", down, "-from", from, "-to", to}, 1,
			"worker backfill: Redis (single, 127.0.0.1:1) does not answer: "},
		{[]string{"status", "-config", down}, 1, "worker status: Redis (single, 127.0.0.1:1) does not answer: "},
		// Bad usage is said first, whether Redis answers or not.
		{[]string{"backfill", "tick", "-config", down, "-from", "noon"}, 2, "worker backfill: give the range"},
		{[]string{"trigger", "nope", "-config", down}, 2, `worker trigger: no job "nope" in the cron table`},
		{[]string{"pause", "tick", "-config", down, "-note", strings.Repeat("n", slot.MaxNote+1)}, 2,
			"worker pause: -note is 1025 bytes, more than 1024"},
		{[]string{"trigger", "tick", "-config", down, "-note", strings.Repeat("n", slot.MaxNote+1)}, 2,
			"worker trigger: -note is 1025 bytes, more than 1024"},
		{[]string{"status", "-config", embedded}, 2, "worker status: redis.mode is embedded"},
		{[]string{"trigger", "tick", "-config", embedded}, 2, "worker trigger: redis.mode is embedded"},
		{[]string{"trigger", "tick", "-config", down, "-key", ""}, 2, "worker trigger: -key is empty"},
		{[]string{"resume", "-config", bad, "tick", "tock"}, 2, "unexpected arguments"},
		// Flags on both sides of the job are read: this one fails on the config, not on its arguments.
		{[]string{"backfill", "-config", bad, "tick", "-from", "2026-11-22T00:00:00Z"}, 2, `no job "tock" is registered`},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := Command(context.Background(), tt.args, ticker("x"), &out, &errb)
		if code != tt.code || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, errb.String(), tt.code, tt.want)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metricValue reads one sample from Prometheus text, or -1.
func metricValue(text, sample string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, sample+" ") {
			v, _ := strconv.ParseFloat(strings.TrimPrefix(line, sample+" "), 64)
			return v
		}
	}
	return -1
}

// TestRunServesHealthReadinessAndMetrics runs the worker against a real Redis
// for a few slots, checks its endpoints and its counters against the slot
// records, stops it, then checks that status prints those records.
func TestRunServesHealthReadinessAndMetrics(t *testing.T) {
	srv := redistest.StartOwned(t)
	httpAddr := freeAddr(t)
	prefix := "w" + strconv.Itoa(os.Getpid())
	path := writeConfig(t, fmt.Sprintf(`replica_id: solo
redis:
  addrs: [%q]
  key_prefix: %s
lease:
  ttl: 1s
http:
  listen: %q
shutdown_grace: 1s
jobs:
  - name: tick
    schedule: "@every 1s"
`, srv.Addr(), prefix, httpAddr))
	counter := "ticks"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	exit := make(chan int, 1)
	go func() { exit <- Command(ctx, []string{"run", "-config", path}, ticker(counter), io.Discard, &stderr) }()

	base := "http://" + httpAddr
	// Up at once; ready once the clock has been measured against Redis.
	for _, probe := range []string{"/healthz", "/readyz"} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			code, body := get(t, base+probe)
			if code == 200 && strings.HasPrefix(body, "ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d %q after 5s; logs:\n%s", probe, code, body, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The records, the metrics and the job's own count agree whenever no run
	// is between its start and its record: a run takes 500ms of each second.
	// Look for such a moment after a few slots, so that a busy machine only
	// delays the check; a mismatch that lasts (a metric counted twice, a run
	// not recorded) fails it.
	rdb := srv.Client()
	slots, _ := slotstore.New(rdb, prefix)
	var (
		done_            int
		won, runs, ticks float64
		text             string
	)
	time.Sleep(2500 * time.Millisecond)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		recs, err := slots.Records(context.Background(), "tick", 100)
		if err != nil {
			t.Fatal(err)
		}
		done_ = 0
		for _, r := range recs {
			if r.State == slot.StateDone {
				done_++
			}
		}
		_, text = get(t, base+"/metrics")
		won = metricValue(text, `slotcron_claims_total{job="tick",outcome="won"}`)
		runs = metricValue(text, `slotcron_job_duration_seconds_count{job="tick",state="done"}`)
		ticks, _ = rdb.Get(context.Background(), counter).Float64()
		if done_ >= 2 && won == float64(done_) && runs == float64(done_) && ticks == float64(done_) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records say %d done; metrics say %v claims won, %v runs done; the job counted %v\n%s", done_, won, runs, ticks, text)
		}
	}
	// Each 500ms run spans at least one renewal round (every 333ms).
	if renewed := metricValue(text, `slotcron_lease_renewals_total{result="renewed"}`); renewed < float64(done_) {
		t.Errorf("%v renewals for %d runs of 500ms under a 1s lease", renewed, done_)
	}
	for _, name := range []string{"slotcron_dispatch_delay_seconds_count", "slotcron_clock_offset_seconds"} {
		if !strings.Contains(text, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	srv.Pause()
	code, body := get(t, base+"/readyz")
	srv.Resume()
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "redis:") {
		t.Fatalf("/readyz with Redis frozen = %d %q, want 503", code, body)
	}

	// While it runs, status lists the replica, with its max_skew, agreeing with itself.
	if out := statusOut(t, path, ticker(counter)); !regexp.MustCompile(`(?m)^replicas: 1 live\n  ID +VERSION +PROTOCOL +STARTED +LAST SEEN +CLOCK OFFSET +MAX SKEW +TABLE\n  solo .* 2 +\S+ +\S+ ago +\S+ +2s +agrees$`).MatchString(out) {
		t.Fatalf("status does not list replica solo, agreeing:\n%s", out)
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("run exited %d; logs:\n%s", code, stderr.String())
	}
	checkStatus(t, path, ticker(counter), slots)
}

// statusOut runs status and returns what it printed.
func statusOut(t *testing.T, path string, reg Registrar) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Command(context.Background(), []string{"status", "-config", path}, reg, &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	return out.String()
}

// checkStatus runs status and compares each row with the slot records.
func checkStatus(t *testing.T, path string, reg Registrar, slots *slotstore.Store) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Command(context.Background(), []string{"status", "-config", path}, reg, &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	// The replica stopped: it left the registry as it did.
	if !strings.HasPrefix(out.String(), "replicas: 0 live\n") {
		t.Fatalf("status lists a replica that stopped:\n%s", out.String())
	}
	recs, err := slots.Records(context.Background(), "tick", 10)
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^  (\S+Z)\s+(scheduled|manual \S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+\S+\s+(\S+)`).FindAllStringSubmatch(out.String(), -1)
	if len(rows) != len(recs) {
		t.Fatalf("status printed %d rows, Records has %d:\n%s", len(rows), len(recs), out.String())
	}
	for i, r := range recs {
		runID := r.RunID
		switch {
		case r.Started.IsZero() && runID == "": // skipped or missed: no run
			runID = "-"
		case r.Started.IsZero() || runID == "":
			t.Fatalf("record %+v: a run ID without a run, or a run without one", r)
		}
		want := []string{r.Slot.UTC().Format(time.RFC3339), "scheduled", string(r.State), r.Owner, strconv.Itoa(r.Attempt), strconv.FormatInt(r.Fence, 10), runID}
		if strings.Join(rows[i][1:], " ") != strings.Join(want, " ") {
			t.Fatalf("status row %d = %v, record %v", i, rows[i][1:], want)
		}
	}
}

// TestHelp: worker, worker help and worker -h list every command, one line
// each, on stdout, and exit 0; so does a command's -h.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"help"}, {"-h"}, {"--help"}} {
		var out, errb bytes.Buffer
		if code := Command(context.Background(), args, ticker("x"), &out, &errb); code != 0 {
			t.Fatalf("%q: exit %d, stderr %q", args, code, errb.String())
		}
		for _, cmd := range []string{"run", "check", "status", "pause", "resume", "backfill", "trigger", "help"} {
			if !regexp.MustCompile(`(?m)^  ` + cmd + `\s+\S`).MatchString(out.String()) {
				t.Errorf("%q: no line for %s in:\n%s", args, cmd, out.String())
			}
		}
	}
	var out, errb bytes.Buffer
	if code := Command(context.Background(), []string{"check", "-h"}, ticker("x"), &out, &errb); code != 0 || !strings.Contains(errb.String(), "-config") {
		t.Fatalf("check -h: exit %d, stderr %q", code, errb.String())
	}
}

// TestCheckOutputLoads: the config check prints, defaults filled in,
// loads as it is, to the same config: a user may start from it.
func TestCheckOutputLoads(t *testing.T) {
	path := writeConfig(t, "jobs:\n  - name: tick\n    schedule: \"@hourly\"\n  - name: tock\n    schedule: \"@daily\"\n    on_owner_lost: retry\n")
	var out, errb bytes.Buffer
	if code := Command(context.Background(), []string{"check", "-config", path}, tickTock, &out, &errb); code != 0 {
		t.Fatalf("check: exit %d: %s", code, errb.String())
	}
	_, resolved, ok := strings.Cut(out.String(), "# the config as the worker reads it, defaults filled in\n")
	if !ok {
		t.Fatalf("no resolved config in:\n%s", out.String())
	}
	resolved, _, _ = strings.Cut(resolved, "\n\n")
	if strings.Contains(resolved, "replica_id") {
		t.Errorf("check shows the default replica ID, this process's, which every replica would then share:\n%s", resolved)
	}
	again, err := Load("config.yaml", []byte(resolved), []string{"tick", "tock"})
	if err != nil {
		t.Fatalf("check's output does not load: %v\n%s", err, resolved)
	}
	shown, err := again.resolved()
	if err != nil {
		t.Fatal(err)
	}
	if string(shown) != resolved+"\n" {
		t.Fatalf("check's output loads to another config:\n%s\nagain:\n%s", resolved, shown)
	}
}

// TestCheckPrintsTheResolvedConfig: check shows the defaults it filled in,
// each job's included, and masks the password.
func TestCheckPrintsTheResolvedConfig(t *testing.T) {
	path := writeConfig(t, "redis:\n  password: hunter2\nlease:\n  ttl: 9s\njobs:\n  - name: tick\n    schedule: \"@hourly\"\n")
	var out, errb bytes.Buffer
	if code := Command(context.Background(), []string{"check", "-config", path}, ticker("x"), &out, &errb); code != 0 {
		t.Fatalf("check: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"\n  ttl: 9s\n  renew_every: 3s\n", "\n  max_skew: 2s\n", "\n  listen: :8080\n", "key_prefix: slotcron\n",
		"\n  - name: tick\n    schedule: '@hourly'\n", "    misfire_grace: 1m0s\n", "    retention: 24h0m0s\n", "password: (set, not shown)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "hunter2") {
		t.Fatalf("check printed the password:\n%s", out.String())
	}
}
