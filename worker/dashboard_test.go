package worker

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slotstore"
)

// TestDashboard: two workers run a job on a real Redis; the page at / shows
// the job with its schedule and policies, a done slot naming the replica
// that ran it with the run's result and a link to its trace, both replicas
// agreeing, and the job's pause once it is paused. Read-only: no token.
func TestDashboard(t *testing.T) {
	srv := redistest.StartOwned(t)
	path := writeConfig(t, `redis:
  addrs: ["`+srv.Addr()+`"]
  key_prefix: dash
http:
  listen: ""
tracing:
  ui_url: http://jaeger.example:16686/
shutdown_grace: 1s
jobs:
  - name: tick
    schedule: "@every 1s"
`)
	register := func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, run jobs.Run) error {
			return jobs.SetResult(ctx, "ticked by "+run.Replica)
		})
	}
	startWorkers(t, path, register, "d1", "d2")

	cfg, err := LoadFile(path, []string{"tick"})
	if err != nil {
		t.Fatal(err)
	}
	store, _ := slotstore.New(srv.Client(), "dash")
	web := httptest.NewServer(handler(srv.Client(), nil, cfg, store, "", http.NotFoundHandler()))
	defer web.Close()
	page := func(query ...string) string {
		resp, err := http.Get(web.URL + "/" + strings.Join(query, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("GET /: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		return string(b)
	}
	var html string
	waitFor(t, 30*time.Second, func() bool {
		html = page()
		return strings.Contains(html, `<span class="state done">done</span>`)
	})
	for _, want := range []string{
		`<h2><code>tick</code> </h2>`,
		`<code>@every 1s</code> <span class="words">(every 1s)</span> · overlap skip · misfire grace 1m0s · catch-up last · owner lost: abandon`,
		`<td><code>d1</code></td>`, `<td><code>d2</code></td>`, `<td>2s</td><td class="ok">agrees</td>`,
		`<h2>Replicas <span class="muted">2 live</span></h2>`,
		`<a href="http://jaeger.example:16686/trace/`,
		`<meta http-equiv="refresh" content="5">`,
		`/trace/`, `?uiFind=slotcron.job`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(html, "Run now") || strings.Contains(html, `id="token"`) {
		t.Errorf("admin buttons on a worker with no admin token")
	}
	if !strings.Contains(html, "ticked by d1") && !strings.Contains(html, "ticked by d2") {
		t.Errorf("no run's result on the page")
	}
	// ?refresh=N sets the reload's period; 0 turns it off (a headless
	// browser's screenshot with a virtual time budget would never end).
	if still := page("?refresh=0"); strings.Contains(still, `http-equiv="refresh"`) || !strings.Contains(still, "does not refresh itself") {
		t.Errorf("?refresh=0: the page still reloads itself")
	}
	if slow := page("?refresh=60"); !strings.Contains(slow, `<meta http-equiv="refresh" content="60">`) || !strings.Contains(slow, "refreshes every 60s") {
		t.Errorf("?refresh=60: no reload every 60s")
	}
	for _, bad := range []string{"-1", "x", "3601"} {
		resp, err := http.Get(web.URL + "/?refresh=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("?refresh=%s: %d; want 400", bad, resp.StatusCode)
		}
	}
	if _, _, err := store.Pause(context.Background(), "tick", "<b>maintenance</b>", "ops@host"); err != nil {
		t.Fatal(err)
	}
	html = page()
	if !strings.Contains(html, `<span class="state paused">paused</span>`) || !strings.Contains(html, "by ops@host: &lt;b&gt;maintenance&lt;/b&gt;") {
		t.Errorf("the page does not show the pause, escaped:\n%s", html)
	}
	// A replica of an older slot protocol shows as such: the others claim
	// nothing while it is live.
	now := srv.Client().Time(context.Background()).Val()
	srv.Client().HSet(context.Background(), "dash:replicas", "v1-pod",
		"i1 "+strconv.FormatInt(now.UnixMilli(), 10)+` {"version":"v0.9.0","started_ms":1,"offset_ns":0,"table":"t"}`)
	html = page()
	if !strings.Contains(html, `<td><code>v1-pod</code></td><td>v0.9.0</td><td class="bad" title="newer replicas claim nothing while a replica of an older slot protocol is live">1 OLDER</td>`) {
		t.Errorf("with a replica of protocol 1 live, the page does not mark it OLDER")
	}
	// It publishes no max_skew: unknown, not different.
	if _, row, ok := strings.Cut(html, `<td><code>v1-pod</code></td>`); !ok || !strings.Contains(row[:strings.Index(row, "</tr>")], `<td>-</td>`) {
		t.Errorf("the older replica's max skew is not shown as unknown (-)")
	}
	// d1's own row says protocol 2.
	if _, row, ok := strings.Cut(html, `<td><code>d1</code></td>`); !ok {
		t.Errorf("no row for replica d1")
	} else if row, _, _ = strings.Cut(row, "</tr>"); !strings.Contains(row, `<td>2</td>`) {
		t.Errorf("d1's row does not say protocol 2: %s", row)
	}
	// A retry whose owner died waits for its turn (claim.lua): no run holds
	// the job, and none starts; the page and worker status say so rather
	// than "free".
	dead := now.Add(-30 * time.Second).Truncate(time.Second)
	srv.Client().HSet(context.Background(), "dash:{tick}:state", "turn",
		"tok "+strconv.FormatInt(dead.Unix(), 10)+" "+strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10)+" r9")
	want := "free, kept for the retry of slot " + dead.UTC().Format("15:04:05") + " by <code>r9</code> (its owner lost its lease)"
	waitFor(t, 10*time.Second, func() bool { html = page(); return strings.Contains(html, want) })
	var out, errb bytes.Buffer
	if code := Command(context.Background(), []string{"status", "-config", path}, register, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "lease: free, kept for r9's retry of slot "+dead.UTC().Format(time.RFC3339)+" (its owner lost its lease)") {
		t.Errorf("worker status with a retry's turn: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if t.Failed() {
		t.Log(html)
	}
}
