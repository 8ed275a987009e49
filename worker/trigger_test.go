package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestTriggerCommand: three workers run a job on a real Redis. The same
// manual slot (one key) asked of all three at once over HTTP runs on exactly
// one; asked again, from HTTP or the command line, it runs nowhere. worker
// trigger without a key runs the job once, in its own process, and prints
// the record. Status lists the manual slots, with who asked and why.
func TestTriggerCommand(t *testing.T) {
	srv := redistest.StartOwned(t)
	rdb := srv.Client()
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: tg
shutdown_grace: 1s
jobs:
  - name: draw
    schedule: "0 0 12 1 1 *"
`, srv.Addr()))
	var mu sync.Mutex
	runs := map[string][]string{} // manual ID -> replicas that ran it
	register := func(reg *jobs.Registry, env Env) error {
		return reg.Register("draw", func(ctx context.Context, run jobs.Run) error {
			if run.Manual == nil {
				return fmt.Errorf("a scheduled run during the test: %v", run.Slot)
			}
			mu.Lock()
			runs[run.Manual.ID] = append(runs[run.Manual.ID], run.Replica)
			mu.Unlock()
			time.Sleep(300 * time.Millisecond)
			return jobs.SetResult(ctx, "drew for "+run.Manual.Note)
		})
	}
	t.Setenv(AdminTokenEnv, "s3cret")
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	startWorkersEnv(t, path, register, func(i int) { t.Setenv(HTTPListenEnv, addrs[i]) }, "t0", "t1", "t2")

	post := func(addr, key, note string) triggerView {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+addr+"/admin/jobs/draw/trigger",
			strings.NewReader(url.Values{"key": {key}, "note": {note}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return triggerView{}
		}
		defer resp.Body.Close()
		var v triggerView
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&v) != nil {
			t.Errorf("POST trigger on %s: %s", addr, resp.Status)
		}
		return v
	}
	answers := make([]triggerView, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { answers[i] = post(addr, "noon-redo", "the noon draw failed") })
	}
	wg.Wait()
	won := 0
	for _, a := range answers {
		switch a.Outcome {
		case "won":
			won++
		case "lost":
		default:
			t.Errorf("answer %+v", a)
		}
	}
	if won != 1 {
		t.Fatalf("%d replicas won the manual slot: %+v", won, answers)
	}
	store, _ := slotstore.New(rdb, "tg")
	waitFor(t, 10*time.Second, func() bool {
		rec, ok, _ := store.ManualRecord(context.Background(), "draw", "noon-redo")
		return ok && rec.State == slot.StateDone
	})
	// Again over HTTP, and from the command line: nothing runs. The answer
	// names the record's run and time, not this request's.
	var first triggerView
	for _, a := range answers {
		if a.Outcome == "won" {
			first = a
		}
	}
	if a := post(addrs[2], "noon-redo", "again"); a.Outcome != "lost" || a.State != "done" || a.RunID == "" ||
		a.RunID != first.RunID || !a.At.Equal(first.At) {
		t.Errorf("the same key again over HTTP: %+v; the winner's answer: %+v", a, first)
	}
	cmd := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := Command(context.Background(), append(args, "-config", path), register, &out, &errb)
		return out.String(), errb.String(), code
	}
	out, errs, code := cmd("trigger", "draw", "-key", "noon-redo")
	if code != 0 || !strings.Contains(out, "not run: the key noon-redo has a record already, done by t") {
		t.Errorf("worker trigger with a used key: exit %d\n%s%s", code, out, errs)
	}
	// Without a key: it runs here, once.
	out, errs, code = cmd("trigger", "draw", "-note", "a dry run for QA")
	if code != 0 || !strings.Contains(out, "ran here as trigger-") || !strings.Contains(out, "record: done") ||
		!strings.Contains(out, "drew for a dry run for QA") {
		t.Errorf("worker trigger: exit %d\n%s%s", code, out, errs)
	}
	// A paused job records the manual slot paused: the key is used, and
	// the command says so and fails, before and after the resume.
	if _, errs, code := cmd("pause", "draw"); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errs)
	}
	out, errs, code = cmd("trigger", "draw", "-key", "while-paused")
	if code != 3 || !strings.Contains(out, "not run: recorded paused") || !strings.Contains(out, "resume the job, then trigger it with another key") {
		t.Errorf("worker trigger of a paused job: exit %d\n%s%s", code, out, errs)
	}
	if _, errs, code := cmd("resume", "draw"); code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	out, errs, code = cmd("trigger", "draw", "-key", "while-paused")
	if code != 3 || !strings.Contains(out, "has a record already, paused by") || !strings.Contains(out, "trigger it with another key") {
		t.Errorf("worker trigger with a key recorded paused: exit %d\n%s%s", code, out, errs)
	}
	mu.Lock()
	if len(runs) != 2 || len(runs["noon-redo"]) != 1 {
		t.Errorf("runs by manual ID: %v", runs)
	}
	mu.Unlock()
	// Bad input is a usage error.
	for _, args := range [][]string{{"trigger", "nope"}, {"trigger", "draw", "-key", "a b"}, {"trigger"}} {
		if _, errs, code := cmd(args...); code != 2 || errs == "" {
			t.Errorf("%q: exit %d, %q", args, code, errs)
		}
	}
	out, _, _ = cmd("status")
	if !strings.Contains(out, "manual noon-redo") || !strings.Contains(out, "asked by http 127.0.0.1:") || !strings.Contains(out, "the noon draw failed; drew for the noon draw failed") {
		t.Errorf("status does not show the manual slot:\n%s", out)
	}
}
