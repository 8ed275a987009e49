package worker

import (
	"bytes"
	"context"
	"fmt"
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

// TestBackfillFillsExactlyTheGaps: a job's past 10 slots, 3 of which have a
// record (done, failed, missed). Two workers run the table meanwhile, and two
// operators backfill the same range at once, one with -parallel 3: each of
// the 7 gaps runs exactly once, the 3 slots with a record are left alone,
// and -dry-run before says exactly that.
func TestBackfillFillsExactlyTheGaps(t *testing.T) {
	srv := redistest.StartOwned(t)
	rdb := srv.Client()
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: bf
http:
  listen: ""
shutdown_grace: 1s
jobs:
  - name: tick
    schedule: "@every 1s"
    catchup: none
    catchup_window: 5s
`, srv.Addr()))
	register := func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, run jobs.Run) error {
			return env.Redis.RPush(ctx, "bf:ran", run.Slot.Unix()).Err()
		})
	}
	ctx := context.Background()
	store, _ := slotstore.New(rdb, "bf")
	from := time.Now().Add(-time.Hour).Truncate(time.Second)
	to := from.Add(9 * time.Second)
	recorded := map[int64]slot.State{2: slot.StateDone, 5: slot.StateFailed, 7: slot.StateMissed}
	for i, state := range recorded {
		c := slot.Claim{Kind: slot.ClaimCatchup, Job: "tick", Slot: from.Add(time.Duration(i) * time.Second), Replica: "earlier",
			LeaseTTL: time.Second, Retention: 24 * time.Hour}
		if state == slot.StateMissed {
			c.Kind, c.Reason = slot.ClaimMiss, "misfire"
		}
		res, err := store.Claim(ctx, []slot.Claim{c})
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res[0].Err)
		}
		if state != slot.StateMissed {
			if errs := store.Finish(ctx, []slot.FinishRequest{{Lease: res[0].Lease, State: state}}); errs[0] != nil {
				t.Fatal(errs[0])
			}
		}
	}
	cmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Command(ctx, append(args, "-config", path), register, &out, &errb)
		return code, out.String(), errb.String()
	}
	rng := []string{"-from", from.UTC().Format(time.RFC3339), "-to", to.UTC().Format(time.RFC3339)}

	code, out, errs := cmd(append([]string{"backfill", "tick", "-dry-run"}, rng...)...)
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errs)
	}
	for i := int64(0); i < 10; i++ {
		want := fmt.Sprintf("%s  would run", from.Add(time.Duration(i)*time.Second).UTC().Format(time.RFC3339))
		if st, ok := recorded[i]; ok {
			want = fmt.Sprintf("%s  left alone: %s by earlier", from.Add(time.Duration(i)*time.Second).UTC().Format(time.RFC3339), st)
		}
		if !strings.Contains(out, want+"\n") {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "10 slots of \"@every 1s\"") || !strings.Contains(out, "7 without a record") || rdb.Exists(ctx, "bf:ran").Val() != 0 {
		t.Fatalf("dry run:\n%s", out)
	}

	// Refused, and nothing recorded: with no replica live (the outage's
	// slots are not recorded yet); a range older than the retention (records
	// may have expired); a paused job (its gaps would be recorded paused).
	refused := func(why string, args ...string) {
		t.Helper()
		code, _, errs := cmd(append([]string{"backfill", "tick"}, args...)...)
		if code != 2 || !strings.Contains(errs, why) {
			t.Fatalf("backfill %v: exit %d, %q; want 2 and %q", args, code, errs, why)
		}
	}
	refused("no replica is live", rng...)
	refused("older than the job's retention (24h0m0s) allows", "-from", time.Now().Add(-25*time.Hour).UTC().Format(time.RFC3339), "-to", to.UTC().Format(time.RFC3339))

	// Two workers run the table; two backfills race over the range.
	stop := startWorkers(t, path, register, "w0", "w1")
	if _, err := store.Pause(ctx, "tick", "maintenance", "ops@host"); err != nil {
		t.Fatal(err)
	}
	refused("tick is paused (by ops@host: maintenance): resume it first", rng...)
	if _, err := store.Resume(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i, extra := range [][]string{nil, {"-parallel", "3"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, errs := cmd(append(append([]string{"backfill", "tick"}, rng...), extra...)...)
			if code != 0 {
				t.Errorf("backfill %v: exit %d: %s", extra, code, errs)
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	stop()

	ran := map[string]int{}
	for _, s := range rdb.LRange(ctx, "bf:ran", 0, -1).Val() {
		ran[s]++
	}
	for i := int64(0); i < 10; i++ {
		at := from.Add(time.Duration(i) * time.Second)
		n := ran[strconv.FormatInt(at.Unix(), 10)]
		rec, _, _ := store.Record(ctx, "tick", at)
		if st, ok := recorded[i]; ok {
			if n != 0 || rec.State != st || rec.Owner != "earlier" {
				t.Errorf("slot +%d had a record: ran %d times, record %+v", i, n, rec)
			}
		} else if n != 1 || rec.State != slot.StateDone || !strings.HasPrefix(rec.Owner, "backfill-") {
			t.Errorf("gap +%d: ran %d times, record %+v", i, n, rec)
		}
	}
	// Between them, the two backfills ran each gap once. (The one that read
	// the records later may have found fewer gaps: "ran 0 of 4".)
	total := 0
	for _, out := range outs {
		for _, m := range regexp.MustCompile(`ran (\d+) of \d+`).FindAllStringSubmatch(out, -1) {
			n, _ := strconv.Atoi(m[1])
			total += n
		}
	}
	if total != 7 {
		t.Fatalf("the backfills ran %d slots between them, want 7:\n%s\n%s", total, outs[0], outs[1])
	}
}
