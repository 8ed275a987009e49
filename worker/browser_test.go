package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// browserPath finds a Chromium or Chrome, or fails the test saying what to
// install: a dashboard test that cannot run must not pass quietly.
func browserPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLOTCRON_BROWSER"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no browser for the dashboard test: install Chromium (Debian: apt-get install -y chromium; .ci/run does) or set SLOTCRON_BROWSER to a Chrome binary")
	return ""
}

// TestDashboardInABrowser loads the dashboard of three replicas, running
// against a real Redis, in headless Chromium, and checks what a person
// would: the job's row and its schedule in words, a done slot naming the
// replica that ran it, the three replicas. It types into the page while it
// refreshes itself, and sees what was typed stay. Then, with the admin
// token typed in, it clicks Run now and sees the manual run appear, done, in
// the slots. Last, behind a proxy that loses Run now's answers, it checks
// that Run now's key makes asking again safe.
func TestDashboardInABrowser(t *testing.T) {
	chrome := browserPath(t)
	srv := redistest.StartOwned(t)
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: br
shutdown_grace: 1s
jobs:
  - name: tick
    schedule: "*/2 * * * * *"
  - name: rare # once a year: its manual slots find no scheduled run holding it
    schedule: "0 0 0 1 1 *"
`, srv.Addr()))
	register := func(reg *jobs.Registry, env Env) error {
		for _, name := range []string{"tick", "rare"} {
			if err := reg.Register(name, func(ctx context.Context, run jobs.Run) error {
				return jobs.SetResult(ctx, "ticked by "+run.Replica)
			}); err != nil {
				return err
			}
		}
		return nil
	}
	t.Setenv(AdminTokenEnv, "s3cret")
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	ids := []string{"web-a", "web-b", "web-c"}
	startWorkersEnv(t, path, register, func(i int) { t.Setenv(HTTPListenEnv, addrs[i]) }, ids...)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 150*time.Second) // the browser; the steps bound their own waits
	defer cancelT()

	url := "http://" + addrs[1] + "/"
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`section.job`))); err != nil {
		t.Fatalf("loading the dashboard: %v", err)
	}
	// until evaluates js until it is true. The page reloads itself, which
	// ends an evaluation in flight: that is a retry, not a failure.
	until := func(limit time.Duration, js string) bool {
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
				return true
			}
			time.Sleep(200 * time.Millisecond)
		}
		return false
	}
	text := func(js string) string {
		t.Helper()
		var err error
		for range 5 { // a reload in between is a retry
			var v string
			if v, err = chromedp.Run(ctx, chromedp.Evaluate[string](js)); err == nil {
				return v
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: %v", js, err)
		return ""
	}
	// A slot runs every 2s: wait for a done one (the page reloads itself).
	if !until(30*time.Second, `document.querySelector('section.job .state.done') !== null`) {
		t.Fatal("no done slot on the page")
	}
	job := text(`document.querySelector('section.job').innerText`)
	replicas := text(`document.querySelector('section:not(.job)').innerText`)
	for _, want := range []string{"tick", "*/2 * * * * *", "every 2 seconds", "overlap skip", "done", "ticked by web-"} {
		if !strings.Contains(job, want) {
			t.Errorf("the job's section lacks %q:\n%s", want, job)
		}
	}
	for _, id := range ids {
		if !strings.Contains(replicas, id) {
			t.Errorf("the replica list lacks %s:\n%s", id, replicas)
		}
	}
	if !strings.Contains(replicas, "3 live") {
		t.Errorf("the replica list does not say 3 live:\n%s", replicas)
	}
	// The done row names its replica.
	if row := text(`document.querySelector('section.job .state.done').closest('tr').innerText`); !strings.Contains(row, "web-") {
		t.Errorf("a done row names no replica: %q", row)
	}

	// While an input is the active element, or a note holds text, the page
	// does not reload, even when it reloads itself every second: what is
	// being typed stays, and the input keeps the focus. Headless Chromium's
	// window never has the focus (so :focus matches nothing), as a user's
	// does not while they copy the token from another window. The mark set
	// with the text is lost with any reload; a reload already under way as
	// it is set (the timer's tick came just before) shows once it commits,
	// which a wait past the next tick leaves time for, and is tried again.
	// The rest of the page is refreshed in place meanwhile: the header's
	// time and the job's next slots move on.
	shown := `document.querySelector('header .muted').textContent + ' | ' + document.querySelectorAll('section.job p.policy')[1].textContent`
	// typeInto loads page, types note into the first job's note with setup
	// run after it (what it leaves active is active), sets the mark, and
	// returns the JavaScript that tells whether all of that still holds.
	typeInto := func(name, page, note, setup, active string) string {
		t.Helper()
		js := `window.slotcronMark = 1; { const n = document.querySelector('.actions .note'); n.value = '` + note + `'; ` + setup + `; } true`
		kept := `window.slotcronMark === 1 && document.querySelector('.actions .note').value === '` + note + `' && ` +
			`(document.activeElement.id || document.activeElement.className || document.activeElement.tagName) === '` + active + `'`
		for range 3 {
			if err := chromedp.Do(ctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`.actions .note`))); err != nil {
				t.Fatalf("%s: loading %s: %v", name, page, err)
			}
			if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
				time.Sleep(1300 * time.Millisecond) // past the next tick of ?refresh=1
				if until(time.Second, kept) {
					return kept
				}
			}
		}
		t.Fatalf("%s: the note did not keep what was typed for 1.3s, three times", name)
		return ""
	}
	for _, c := range []struct{ name, note, setup, active string }{
		{"the note active", "half a note", `n.focus()`, "note"},
		{"the note holding text, the token active", "half a note", `document.getElementById('token').focus()`, "token"},
		{"the note holding text, nothing active", "half a note", `n.blur()`, "BODY"},
		{"the note empty, the token active", "", `document.getElementById('token').focus()`, "token"},
	} {
		kept := typeInto(c.name, url+"?refresh=1", c.note, c.setup, c.active)
		before := text(shown)
		time.Sleep(3 * time.Second) // three of the page's reload intervals
		if !until(time.Second, kept) {
			t.Errorf("%s: the page reloaded, or the input lost the focus: what was typed is lost (active: %s)", c.name,
				text(`document.activeElement.outerHTML.slice(0, 120)`))
		}
		// A tick whose fetch is slow on a busy machine is skipped, not
		// queued: the bound only guards against a page that never refreshes.
		if !until(10*time.Second, shown+` !== `+strconv.Quote(before)) {
			t.Errorf("%s: the page was not refreshed in place in 13s: it still shows %q", c.name, before)
		}
	}

	// A refresh in place whose request is never answered (a proxy in front
	// of the worker holds it) gives up, and a later one refreshes the page:
	// one lost request must not leave the page stale while the typing goes
	// on.
	var hang atomic.Bool
	hung, release := make(chan struct{}, 1), make(chan struct{})
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.Out.URL.Scheme, r.Out.URL.Host = "http", addrs[1]
	}}
	// keys gets the key of each Run now that reaches the proxy; with
	// loseAnswer set, the worker gets the request, and runs it, but its
	// answer is lost; with gatewayTimeout set, the proxy answers 504
	// instead of the worker's answer.
	var loseAnswer, gatewayTimeout atomic.Bool
	keys := make(chan string, 16)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/" && hang.CompareAndSwap(true, false) {
			hung <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/trigger") {
			body, _ := io.ReadAll(r.Body)
			form, _ := neturl.ParseQuery(string(body))
			keys <- form.Get("key")
			r.Body = io.NopCloser(bytes.NewReader(body))
			if loseAnswer.Load() {
				rp.ServeHTTP(httptest.NewRecorder(), r)
				select {
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
			if gatewayTimeout.Load() {
				rp.ServeHTTP(httptest.NewRecorder(), r)
				http.Error(w, "the worker did not answer in time", http.StatusGatewayTimeout)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handler
	kept := typeInto("the note active, behind the proxy", proxy.URL+"/?refresh=1", "held", `n.focus()`, "note")
	hang.Store(true)
	select {
	case <-hung:
	case <-time.After(15 * time.Second):
		t.Fatal("no refresh in place reached the proxy in 15s")
	}
	before := text(shown)
	// It gives up after 10s; the bound only guards against a hang.
	if !until(30*time.Second, shown+` !== `+strconv.Quote(before)) {
		t.Errorf("a refresh in place whose request was never answered stopped the refreshes: the page still shows %q after 30s", before)
	}
	if !until(time.Second, kept) {
		t.Errorf("behind the proxy, the page reloaded, or the note lost the focus (active: %s)", text(`document.activeElement.outerHTML.slice(0, 120)`))
	}
	// The refreshes in place left the page's script as it was: a click
	// sends one request, not one per copy of the script that ran.
	posts := text(`(() => {
		window.slotcronPosts = 0;
		const get = window.fetch;
		window.fetch = (u, o) => {
			if (o && o.method === 'POST') { window.slotcronPosts++; return new Promise(() => {}); }
			return get(u, o);
		};
		document.querySelector('.actions button[data-action="trigger"]').click();
		return String(window.slotcronPosts);
	})()`)
	if posts != "1" {
		t.Errorf("after refreshes in place, a click on Run now sent %s requests, want 1", posts)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`.actions .note`))); err != nil {
		t.Fatalf("loading the dashboard again: %v", err)
	}

	// Run now, with the token.
	// While an input has the focus the page does not reload; a reload
	// before the typing starts is tried again, from empty fields.
	var err error
	for range 3 {
		chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('token').value = ''; document.querySelector('.actions .note').value = ''; true`))
		if err = chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.CSS(`#token`), "s3cret"),
			chromedp.SendKeys(chromedp.CSS(`.actions .note`), "from the browser test"),
		); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("typing the token and the note: %v", err)
	}
	// The click, and the token active again at once (typed again, say):
	// the refresh that follows the answer must keep it. (A click from the
	// page's script moves no focus.)
	if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.slotcronMark = 2; document.querySelector('.actions button[data-action="trigger"]').click(); document.getElementById('token').focus(); true`)); err != nil || !ok {
		t.Fatalf("Run now: %v", err)
	}
	if !until(15*time.Second, `document.querySelector('.actions .result').textContent.startsWith('manual slot')`) {
		t.Fatalf("Run now got no answer (the page shows %q)", text(`document.querySelector('.actions .result').textContent`))
	}
	if result := text(`document.querySelector('.actions .result').textContent`); !strings.Contains(result, ": won on web-b") {
		t.Errorf("Run now answered %q; want the manual slot won by the replica that served the page", result)
	}
	answered := time.Now()
	// The page refreshes 1.5s after the answer. The note went with the
	// action and is cleared; with the token active, it refreshes in place:
	// the mark stays, and the manual run appears.
	if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('.actions .note').value === ''`)); err != nil || !ok {
		t.Fatalf("after Run now's answer, the note was not cleared (%v)", err)
	}
	if !until(20*time.Second, `[...document.querySelectorAll('section.job tr')].some(r => r.querySelector('.manual') && r.querySelector('.state.done'))`) {
		t.Fatal("the manual run did not appear done")
	}
	// The timer may show the run before the answer's refresh: wait past it,
	// and past a reload's commit, before judging.
	time.Sleep(time.Until(answered.Add(3 * time.Second)))
	if !until(time.Second, `window.slotcronMark === 2 && document.activeElement.id === 'token'`) {
		t.Error("the page reloaded after Run now while the token was active")
	}
	row := text(`document.querySelector('section.job .manual').closest('tr').innerText`)
	if !strings.Contains(row, "web-b") || !strings.Contains(row, "from the browser test") {
		t.Errorf("the manual run's row: %q", row)
	}

	// Run now behind the proxy, which passes the request on (the worker
	// runs it) and loses the answer, for the job rare. A double click sends
	// one request, with a key; the page keeps still while it waits (a reload
	// would drop the answer), then says that the run may have started, and
	// keeps the key, reloads and all: Run now asks again with it, and the
	// slot runs once.
	store, err := slotstore.New(srv.Client(), "br")
	if err != nil {
		t.Fatal(err)
	}
	const box = `document.querySelector('.actions[data-job="rare"]')`
	result := box + `.querySelector('.result').textContent`
	drain := func() {
		for len(keys) > 0 {
			<-keys
		}
	}
	loseAnswer.Store(true)
	var k string
	for try := 0; ; try++ {
		if try == 3 {
			t.Fatal("Run now behind the proxy: a reload came between the click and its request, or dropped the answer's wait, three times")
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(proxy.URL+"/?refresh=1"), chromedp.WaitVisible(chromedp.CSS(`.actions .note`))); err != nil {
			t.Fatalf("loading the dashboard behind the proxy: %v", err)
		}
		drain()
		disabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.slotcronMark = 3;
			document.getElementById('token').value = 's3cret'; sessionStorage.setItem('slotcron-admin-token', 's3cret');
			{ const b = `+box+`.querySelector('button[data-action="trigger"]'); b.click(); b.click(); b.disabled }`))
		if err != nil {
			continue // a reload ended the evaluation
		}
		if !disabled {
			t.Error("while Run now awaits its answer, its button is not disabled")
		}
		select {
		case k = <-keys:
		case <-time.After(15 * time.Second):
			continue // a reload under way as the click came dropped the request
		}
		// Past the page's next tick: a reload already under way as the
		// click came commits, and is tried again (the key is kept).
		time.Sleep(1300 * time.Millisecond)
		if until(time.Second, `window.slotcronMark === 3 && `+result+` === '…'`) {
			break
		}
	}
	time.Sleep(2 * time.Second) // two more ticks of ?refresh=1
	if !until(time.Second, `window.slotcronMark === 3 && `+result+` === '…'`) {
		t.Errorf("while Run now awaited its answer, the page reloaded (it shows %q)", text(result))
	}
	if slot.CheckManualID(k) != nil {
		t.Errorf("Run now sent the key %q", k)
	}
	// It gives up after 10s (the bound only guards against a hang), and
	// the page then reloads: its message, or the reloaded page's, says so.
	const askAgain = "it may have run. Run now asks again with the same key, which runs once at most"
	if !until(30*time.Second, `(`+result+`.startsWith('Run now got no answer in 10s: ') || `+result+`.startsWith('an earlier Run now did not learn its outcome: ')) && `+
		result+`.endsWith('`+askAgain+`')`) {
		t.Fatalf("Run now, its answer lost: the page shows %q after 30s", text(result))
	}
	if len(keys) != 0 {
		t.Errorf("a double click on Run now sent a second request, with key %q", <-keys)
	}
	waitFor(t, 20*time.Second, func() bool {
		rec, ok, _ := store.ManualRecord(context.Background(), "rare", k)
		return ok && rec.State == slot.StateDone
	})
	loseAnswer.Store(false)
	if err := chromedp.Do(ctx, chromedp.Navigate(proxy.URL+"/?refresh=0"), chromedp.WaitVisible(chromedp.CSS(`.actions .note`))); err != nil {
		t.Fatalf("loading the dashboard behind the proxy again: %v", err)
	}
	if got := text(result); got != "an earlier Run now did not learn its outcome: "+askAgain {
		t.Errorf("reloaded after Run now's answer was lost, the page shows %q", got)
	}
	// press clicks one of rare's buttons with the note active (the refresh
	// after an answer is then in place, and the answer stays on the page),
	// and returns the key of the Run now that reached the proxy ("" for
	// another action).
	press := func(action string) string {
		t.Helper()
		drain()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](box+`.querySelector('.note').focus(); `+
			box+`.querySelector('button[data-action="`+action+`"]').click(); true`)); err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		if action != "trigger" {
			return ""
		}
		select {
		case key := <-keys:
			return key
		case <-time.After(15 * time.Second):
			t.Fatal("Run now sent no request in 15s")
			return ""
		}
	}
	shows := func(what, want string) {
		t.Helper()
		if !until(15*time.Second, result+` === `+strconv.Quote(want)) {
			t.Errorf("%s: the page shows %q, want %q", what, text(result), want)
		}
	}
	setToken := func(tok string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('token').value = '`+tok+`'; true`)); err != nil {
			t.Fatal(err)
		}
	}
	// A pause answered in between leaves the key as it is.
	press("pause")
	shows("Pause", "paused")
	if _, err := store.Resume(context.Background(), "rare"); err != nil {
		t.Fatal(err)
	}
	if again := press("trigger"); again != k {
		t.Errorf("Run now after a lost answer (and a pause) sent the key %q, want the same key %q", again, k)
	}
	shows("Run now asked again with its key", "manual slot "+k+": done on web-b (the key was sent before: it runs once)")

	// Answered, the key is settled: the next Run now is a new slot. So is
	// the one after a refusal of a new key (401: nothing was done).
	setToken("wrong")
	refused := press("trigger")
	if refused == k || slot.CheckManualID(refused) != nil {
		t.Errorf("Run now after an answer sent the key %q (the one before: %q)", refused, k)
	}
	if !until(15*time.Second, result+`.startsWith('401: ')`) {
		t.Errorf("Run now with a wrong token: the page shows %q", text(result))
	}
	setToken("s3cret")
	next := press("trigger")
	if next == refused || next == k || slot.CheckManualID(next) != nil {
		t.Errorf("Run now after a 401 for a new key sent the key %q (the ones before: %q, %q)", next, refused, k)
	}
	shows("Run now with a new key", "manual slot "+next+": won on web-b")

	// A 504 from the proxy, which passed the click on: the run may have
	// started, so the key stays, through a 401 too (which says nothing of
	// the earlier request), and asking again runs nothing more.
	gatewayTimeout.Store(true)
	third := press("trigger")
	if third == next || slot.CheckManualID(third) != nil {
		t.Errorf("Run now after an answer sent the key %q (the one before: %q)", third, next)
	}
	shows("Run now answered 504", "504: the worker did not answer in time\n ("+askAgain+")")
	gatewayTimeout.Store(false)
	setToken("wrong")
	if again := press("trigger"); again != third {
		t.Errorf("Run now after a 504 sent the key %q, want the same key %q", again, third)
	}
	if !until(15*time.Second, result+`.startsWith('401: ')`) {
		t.Errorf("Run now with a wrong token: the page shows %q", text(result))
	}
	setToken("s3cret")
	if again := press("trigger"); again != third {
		t.Errorf("Run now after a 504 and a 401 sent the key %q, want the same key %q", again, third)
	}
	if !until(15*time.Second, result+`.startsWith('manual slot `+third+`: ')`) || !strings.HasSuffix(text(result), " on web-b (the key was sent before: it runs once)") {
		t.Errorf("Run now asked again after a 504: the page shows %q", text(result))
	}
}
