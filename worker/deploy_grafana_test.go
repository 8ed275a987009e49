package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// dashboardPath is the Grafana dashboard that deploy/ ships.
var dashboardPath = filepath.Join("..", "deploy", "grafana", "slotcron.json")

// TestDeployGrafanaDashboard: every metric that a query of the Grafana
// dashboard names is one that the worker's own /metrics serves, and every
// slotcron_ metric it serves has a panel. A worker (Command run, with its
// real telemetry and HTTP handler) runs a job on a Redis of its own, and the
// test makes each instrument report by causing its event:
//   - runs of 800ms with a 2s lease (TTL/3 renewals): claims, dispatch delay,
//     job duration, lease renewals; clock offset and table disagreements are
//     recorded at start and at each heartbeat;
//   - redis.wait_replicas: 1 on a Redis without replicas: unreplicated claims
//     and final records;
//   - one run deletes its own slot record, as Redis losing it would: the next
//     renewal finds it gone (lease lost, data loss; if that renewal is late
//     enough for the lease to run out first, the run's finish finds it gone);
//   - another instance heartbeats under the worker's replica ID (slotstore's
//     Heartbeat, as a second process would): a duplicate replica ID;
//   - the job is paused: claims with outcome paused;
//   - before it, another worker ran the job and stopped 3s earlier, so this
//     one starts with slots that no replica ran: claims with outcome missed
//     (catchup: last runs the latest and records the others missed).
//
// It waits for each event's log line, then scrapes /metrics and checks the
// dashboard's metric names (and each literal label=value matcher) against it.
func TestDeployGrafanaDashboard(t *testing.T) {
	exprs := dashboardExprs(t)

	srv := redistest.StartOwned(t) // no replicas: every WAIT falls short
	listen := freeAddr(t)
	const prefix, id = "gf", "gf-1"
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: %s
  wait_replicas: 1
  wait_timeout: 20ms
lease:
  ttl: 2s
clock:
  max_skew: 500ms
http:
  listen: %q
shutdown_grace: 2s
jobs:
  - name: tick
    schedule: "@every 1s"
    misfire_grace: 1s # a slot the catch-up does not run is recorded missed once its grace has passed
`, srv.Addr(), prefix, listen))

	var dropRecord atomic.Bool
	register := func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, run jobs.Run) error {
			if dropRecord.CompareAndSwap(true, false) {
				// Redis "loses" this run's slot record; the lease's next
				// renewal finds it gone and cancels ctx.
				if err := env.Redis.Del(ctx, slotstore.RecordKey(env.KeyPrefix, run.Job, run.Slot)).Err(); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(10 * time.Second):
					return fmt.Errorf("the lease was not lost within 10s of its record's deletion")
				}
			}
			select {
			case <-time.After(800 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	}
	t.Setenv(HTTPListenEnv, listen)
	t.Setenv(ReplicaIDEnv, "gf-0")
	log, stop := runWorker(t, path, register)
	waitLog(t, log, `"msg":"job finished`)
	stop()
	// Slots older than max_skew at the next start are caught up: the latest
	// runs, the others are recorded missed.
	time.Sleep(3 * time.Second)

	t.Setenv(ReplicaIDEnv, id)
	log, _ = runWorker(t, path, register)

	dropRecord.Store(true)
	impostor(t, srv, prefix, id)

	// Each event's line, logged after its instrument reported.
	for _, line := range []string{
		`"msg":"slot missed"`,
		`slot won, but fewer replicas acknowledged the claim`,
		`job finished, but fewer replicas acknowledged its record`,
		`lease lost: the job's context is cancelled`,
		`"msg":"Redis lost data: a `,
		`another live process now uses this replica's ID`,
	} {
		waitLog(t, log, line)
	}
	store, err := slotstore.New(srv.Client(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Pause(context.Background(), "tick", "dashboard test", "test"); err != nil {
		t.Fatal(err)
	}
	waitLog(t, log, `slot recorded paused: the job is paused`)

	families := scrape(t, "http://"+listen+"/metrics")
	shown := map[string]bool{} // the families the dashboard's queries read
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			fam, ok := familyName(families, name)
			if !ok {
				t.Errorf("the dashboard queries %s, which /metrics does not serve (in %s)", name, e)
			}
			shown[fam] = ok
		}
		for _, m := range literalMatchers(e) {
			fam, ok := exportedFamily(families, m.metric)
			if ok && !hasLabel(fam, m.label, m.value) {
				t.Errorf("the dashboard selects %s{%s=%q}, but no series of %s has it (in %s)", m.metric, m.label, m.value, fam.GetName(), e)
			}
		}
	}
	// group_left (labels) copies labels from the right-hand side: the
	// replica ID from target_info.
	for _, e := range exprs {
		for _, g := range groupLeft.FindAllStringSubmatch(e, -1) {
			fam, ok := exportedFamily(families, g[2])
			for _, label := range strings.Split(g[1], ",") {
				if label = strings.TrimSpace(label); ok && !hasLabelName(fam, label) {
					t.Errorf("the dashboard copies %s from %s, which has no such label (in %s)", label, g[2], e)
				}
			}
		}
	}
	if ti, ok := families["target_info"]; !ok || !hasLabel(ti, "service_instance_id", id) {
		t.Errorf("target_info does not name the replica %s in service_instance_id", id)
	}
	if len(shown) == 0 {
		t.Fatalf("no metric name found in the dashboard's %d queries", len(exprs))
	}
	for name := range families {
		if strings.HasPrefix(name, "slotcron_") && !shown[name] {
			t.Errorf("/metrics serves %s, but no panel of the dashboard shows it", name)
		}
	}
	if t.Failed() {
		t.Logf("/metrics serves: %s", strings.Join(keys(families), ", "))
	}
}

// metricName matches the metric names a query uses: the worker's, and
// target_info (the resource: service.instance.id names the replica).
var metricName = regexp.MustCompile(`\b(slotcron_[A-Za-z0-9_]*[A-Za-z0-9]|target_info)\b`)

// dashboardExprs returns every PromQL text of the dashboard: the panels'
// queries and the variables' (label_values(...)). It fails if a panel has no
// query or uses another data source than the $datasource variable.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource struct {
				Type string `json:"type"`
				UID  string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Definition string          `json:"definition"`
				Query      json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var exprs []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			exprs = append(exprs, q.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query: %v", v.Name, err)
		}
		exprs = append(exprs, v.Definition, q.Query)
	}
	return exprs
}

// runWorker runs Command run with the config at path, and returns its log
// once its scheduler has started, and a stop that ends it (run at cleanup
// too). The test fails if it exits non-zero.
func runWorker(t *testing.T, path string, register Registrar) (log *syncBuffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	log = &syncBuffer{}
	go func() { exit <- Command(ctx, []string{"run", "-config", path}, register, io.Discard, log) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if code := <-exit; code != 0 {
				t.Errorf("the worker exited %d:\n%s", code, log.String())
			}
		})
	}
	t.Cleanup(stop)
	waitLog(t, log, `"msg":"scheduler started"`)
	return log, stop
}

// waitLog waits until log holds line; after 30s it fails the test, showing
// the log.
func waitLog(t *testing.T, log *syncBuffer, line string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), line); {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not log %q within 30s; its log:\n%s", line, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// impostor publishes a second live instance under replica id in the
// registry of prefix, as a second process started with that ID would once
// the first one's entry were gone: it removes the worker's entry and
// heartbeats before the worker does again.
func impostor(t *testing.T, srv *redistest.Server, prefix, id string) {
	t.Helper()
	store, err := slotstore.New(srv.Client(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	waitFor(t, 30*time.Second, func() bool {
		if err := srv.Client().HDel(ctx, prefix+":replicas", id).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := store.Heartbeat(ctx, slot.Replica{ID: id, Instance: "impostor", Started: time.Now()}, 15*time.Second)
		return err == nil
	})
}

// scrape GETs url and parses the Prometheus text it serves.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return families
}

// familyName returns the family that serves the series name: itself, or
// for name_bucket, name_sum and name_count, its histogram.
func familyName(families map[string]*dto.MetricFamily, name string) (string, bool) {
	if f, ok := families[name]; ok && f.GetType() != dto.MetricType_HISTOGRAM && f.GetType() != dto.MetricType_SUMMARY {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if !found {
			continue
		}
		if f, ok := families[base]; ok && (f.GetType() == dto.MetricType_HISTOGRAM ||
			(f.GetType() == dto.MetricType_SUMMARY && suffix != "_bucket")) {
			return base, true
		}
	}
	return "", false
}

func exportedFamily(families map[string]*dto.MetricFamily, name string) (*dto.MetricFamily, bool) {
	n, ok := familyName(families, name)
	if !ok {
		return nil, false
	}
	return families[n], true
}

func hasLabel(f *dto.MetricFamily, label, value string) bool {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return true
			}
		}
	}
	return false
}

func hasLabelName(f *dto.MetricFamily, label string) bool {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				return true
			}
		}
	}
	return false
}

type matcher struct{ metric, label, value string }

var (
	selector  = regexp.MustCompile(`\b(slotcron_[A-Za-z0-9_]*[A-Za-z0-9]|target_info)\s*\{([^}]*)\}`)
	groupLeft = regexp.MustCompile(`group_left\s*\(([^)]*)\)\s*(slotcron_[A-Za-z0-9_]*[A-Za-z0-9]|target_info)\b`)
	equality  = regexp.MustCompile(`([A-Za-z_$][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// literalMatchers returns the label="value" matchers of expr's selectors
// whose label and value hold no dashboard variable.
func literalMatchers(expr string) []matcher {
	var out []matcher
	for _, s := range selector.FindAllStringSubmatch(expr, -1) {
		for _, m := range equality.FindAllStringSubmatch(s[2], -1) {
			if m[2] == "=" && !strings.Contains(m[1]+m[3], "$") {
				out = append(out, matcher{s[1], m[1], m[3]})
			}
		}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
