package worker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slotstore"
)

// webhookReceiver records what it is sent, checks every signature as the
// README documents it (not with Sign: a receiver has only the docs), and
// fails the first failFirst attempts of each delivery, alternately with a
// 500 and a 400: any answer but 2xx is a failed attempt.
type webhookReceiver struct {
	t         *testing.T
	secret    []byte
	failFirst int

	mu        sync.Mutex
	attempts  map[string]int          // by delivery ID
	delivered map[string]alertPayload // by event ID: answered 2xx
	twice     []string                // event IDs answered 2xx more than once
}

func (wr *webhookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ts := r.Header.Get(HeaderTimestamp)
	mac := hmac.New(sha256.New, wr.secret)
	mac.Write([]byte(ts + "." + string(body))) // sha256=<hex HMAC-SHA256(secret, X-Slotcron-Timestamp + "." + body)>
	if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); !hmac.Equal([]byte(want), []byte(r.Header.Get(HeaderSignature))) {
		wr.t.Errorf("bad signature %q on %s", r.Header.Get(HeaderSignature), body)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var p alertPayload
	if err := json.Unmarshal(body, &p); err != nil || r.Header.Get(HeaderEvent) != p.Event {
		wr.t.Errorf("payload %s: %v", body, err)
	}
	wr.mu.Lock()
	defer wr.mu.Unlock()
	id := r.Header.Get(HeaderDelivery)
	wr.attempts[id]++
	if n := wr.attempts[id]; n <= wr.failFirst {
		if n%2 == 0 {
			http.Error(w, "not now", http.StatusBadRequest)
		} else {
			http.Error(w, "try again", http.StatusInternalServerError)
		}
		return
	}
	if _, ok := wr.delivered[p.ID]; ok {
		wr.twice = append(wr.twice, p.ID)
	}
	wr.delivered[p.ID] = p
}

func (wr *webhookReceiver) snapshot() (map[string]alertPayload, map[string]int, []string) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	d, a := map[string]alertPayload{}, map[string]int{}
	for k, v := range wr.delivered {
		d[k] = v
	}
	for k, v := range wr.attempts {
		a[k] = v
	}
	return d, a, append([]string(nil), wr.twice...)
}

// TestWebhooks: three workers run a job whose first three runs fail. Each
// failure is POSTed once to each of two webhooks, signed, by the replica
// that recorded it, although every replica has the hook; the webhook that
// fails the first two attempts of each delivery gets it on the third; the
// webhook that is down gets alerts.max_attempts (3) attempts of each, and
// each is then recorded failed. A pause is sent once too, although its first
// reply was lost and it was asked for twice. Restarted, the workers send
// nothing again.
func TestWebhooks(t *testing.T) {
	srv := redistest.StartOwned(t)
	rdb := srv.Client()
	secret := "whsec-test"
	ok := &webhookReceiver{t: t, secret: []byte(secret), attempts: map[string]int{}, delivered: map[string]alertPayload{}}
	flaky := &webhookReceiver{t: t, secret: []byte(secret), failFirst: 2, attempts: map[string]int{}, delivered: map[string]alertPayload{}}
	down := &webhookReceiver{t: t, secret: []byte(secret), failFirst: math.MaxInt, attempts: map[string]int{}, delivered: map[string]alertPayload{}}
	okSrv, flakySrv, downSrv := httptest.NewServer(ok), httptest.NewServer(flaky), httptest.NewServer(down)
	defer okSrv.Close()
	defer flakySrv.Close()
	defer downSrv.Close()
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: wh
http:
  listen: ""
shutdown_grace: 2s
alerts:
  webhooks: [%q, %q, %q]
  events: [failed, paused]
  secret_env: TEST_WEBHOOK_SECRET
  max_attempts: 3
jobs:
  - name: boom
    schedule: "@every 1s"
`, srv.Addr(), okSrv.URL+"/hook", flakySrv.URL+"/hook", downSrv.URL+"/hook"))
	register := func(reg *jobs.Registry, env Env) error {
		return reg.Register("boom", func(ctx context.Context, run jobs.Run) error {
			n, err := env.Redis.Incr(ctx, "wh:test:runs").Result()
			if err != nil {
				return err
			}
			if n <= 3 {
				return fmt.Errorf("run %d fails", n)
			}
			return nil
		})
	}

	// Without the secret, run refuses to start.
	var errb bytes.Buffer
	if code := Command(context.Background(), []string{"run", "-config", path}, register, io.Discard, &errb); code != 2 ||
		!strings.Contains(errb.String(), "TEST_WEBHOOK_SECRET (alerts.secret_env) is empty") {
		t.Fatalf("run without the secret: exit %d: %s", code, errb.String())
	}
	t.Setenv("TEST_WEBHOOK_SECRET", secret)

	stop := startWorkers(t, path, register, "h0", "h1", "h2")
	waitFor(t, 30*time.Second, func() bool { n, _ := rdb.Get(context.Background(), "wh:test:runs").Int(); return n >= 5 })
	// The pause's first try reaches Redis and its reply is lost (as if
	// go-redis sent it again after a timeout, or the command failed and was
	// run again): the pause stands, and no alert was added for it.
	store, err := slotstore.New(rdb, "wh")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Pause(context.Background(), "boom", "enough", "ops@host"); err != nil {
		t.Fatal(err)
	}
	// Asked for again, the pause's alert goes, once: the second time, with
	// another note, it is the same pause.
	var out, eb bytes.Buffer
	for _, note := range []string{"enough", "enough, really"} {
		if code := Command(context.Background(), []string{"pause", "boom", "-note", note, "-config", path}, register, &out, &eb); code != 0 {
			t.Fatalf("pause: %d %s", code, eb.String())
		}
	}
	// 3 failures and a pause: each on its third attempt at the flaky
	// webhook, after backoffs of 1s and 2s.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d1, _, _ := ok.snapshot()
		d2, attempts, _ := flaky.snapshot()
		if len(d1) >= 4 && len(d2) >= 4 {
			break
		}
		if time.Now().After(deadline) { // a delivery taken for delivered without a 2xx is not sent again
			t.Fatalf("after 30s the webhooks had answered 2xx to %d and %d of the 4 alerts; the flaky one's attempts: %v", len(d1), len(d2), attempts)
		}
	}
	// The down webhook's deliveries are recorded failed after their third
	// attempt, and not retried.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, attempts, _ := down.snapshot()
		var states []string
		for id := range attempts {
			state, n, err := store.DeliveryState(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if state != "failed" || n != 3 {
				states = append(states, fmt.Sprintf("%s: %s after %d attempts", id, state, n))
			}
		}
		if len(attempts) >= 4 && len(states) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, of the %d alerts the down webhook was sent, these are not recorded failed after 3 attempts (max_attempts): %v", len(attempts), states)
		}
	}
	stop()

	check := func(when string) {
		t.Helper()
		delivered, attempts, _ := down.snapshot()
		if len(delivered) != 0 || len(attempts) != 4 {
			t.Errorf("%s, the down webhook: %d alerts answered 2xx and %d sent, want 0 and 4", when, len(delivered), len(attempts))
		}
		for id, n := range attempts {
			if n != 3 {
				t.Errorf("%s, the down webhook: delivery %s had %d attempts, want 3 (max_attempts)", when, id, n)
			}
		}
		for name, wr := range map[string]*webhookReceiver{"ok": ok, "flaky": flaky} {
			delivered, attempts, twice := wr.snapshot()
			if len(twice) > 0 {
				t.Errorf("%s, webhook %s: delivered twice: %v", when, name, twice)
			}
			failed, paused := 0, 0
			for id, p := range delivered {
				switch p.Event {
				case "failed":
					failed++
					if p.Job != "boom" || p.Slot == "" || p.RunID == "" || p.Attempt != 1 || !strings.Contains(p.Error, "fails") ||
						!strings.HasPrefix(p.Replica, "h") || p.Deployment != "wh" {
						t.Errorf("%s: payload %+v", id, p)
					}
				case "paused":
					paused++
					if p.Job != "boom" || !strings.Contains(p.Error, "enough") {
						t.Errorf("%s: payload %+v", id, p)
					}
				default:
					t.Errorf("%s: event %q was not asked for", id, p.Event)
				}
			}
			if failed != 3 || paused != 1 {
				t.Errorf("%s, webhook %s: %d failed and %d paused events, want 3 and 1: %v", when, name, failed, paused, delivered)
			}
			for id, n := range attempts {
				if want := wr.failFirst + 1; n != want {
					t.Errorf("%s, webhook %s: delivery %s had %d attempts, want %d", when, name, id, n, want)
				}
			}
		}
	}
	check("after the run")

	// Restarted (and resumed), the workers send nothing again.
	if code := Command(context.Background(), []string{"resume", "boom", "-config", path}, register, &out, &eb); code != 0 {
		t.Fatalf("resume: %d %s", code, eb.String())
	}
	startWorkers(t, path, register, "h0", "h1", "h2")
	time.Sleep(3 * time.Second)
	check("after a restart")
}
