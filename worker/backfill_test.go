package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestBackfillFillsExactlyTheGaps: a job's past 10 slots, 3 of which have a
// record (done, failed, missed); the slot recorded missed never started, and
// the 7 others have no record. Two workers start: the slots after the
// latest record (+8, +9), older than the catch-up window, they record
// missed. Two operators then backfill the same range at once, one with
// -parallel 3, beside the workers: each of the 8 slots that never started
// (the 5 gaps, and the 3 recorded missed, by an earlier replica or by the
// workers) runs exactly once and ends done; the done and failed slots are
// left alone; and -dry-run, before the workers start and once they have,
// says exactly that. (Before, a backfill ran no slot recorded missed.)
func TestBackfillFillsExactlyTheGaps(t *testing.T) {
	srv := redistest.StartOwned(t)
	rdb := srv.Client()
	path := tickConfig(t, srv.Addr(), "bf")
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

	// dryRun checks what -dry-run says of each slot, given who recorded
	// each slot recorded missed, and its summary.
	dryRun := func(missedBy map[int64]string, summary string) {
		t.Helper()
		code, out, errs := cmd(append([]string{"backfill", "tick", "-dry-run"}, rng...)...)
		if code != 0 {
			t.Fatalf("dry run: exit %d: %s", code, errs)
		}
		for i := int64(0); i < 10; i++ {
			at := from.Add(time.Duration(i) * time.Second).UTC().Format(time.RFC3339)
			want := at + "  would run"
			if by, ok := missedBy[i]; ok {
				want = fmt.Sprintf("%s  would run (recorded missed by %s)", at, by)
			} else if st, ok := recorded[i]; ok {
				want = fmt.Sprintf("%s  left alone: %s by earlier", at, st)
			}
			if !strings.Contains(out, want+"\n") {
				t.Errorf("dry run lacks %q:\n%s", want, out)
			}
		}
		if !strings.Contains(out, "10 slots of \"@every 1s\"") || !strings.Contains(out, summary+"\n") {
			t.Fatalf("dry run, want %q:\n%s", summary, out)
		}
		// (The workers run the job's live slots meanwhile: none of these.)
		for _, s := range rdb.LRange(ctx, "bf:ran", 0, -1).Val() {
			if n, _ := strconv.ParseInt(s, 10, 64); n >= from.Unix() && n <= to.Unix() {
				t.Fatalf("slot %s of the range ran in a dry run", s)
			}
		}
	}
	dryRun(map[int64]string{7: "earlier"}, "8 to run (7 without a record, 1 recorded missed)")

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
	refused("is in the future on Redis's clock", "-from", from.UTC().Format(time.RFC3339), "-to", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	refused("older than the job's retention (24h0m0s) allows on Redis's clock", "-from", time.Now().Add(-25*time.Hour).UTC().Format(time.RFC3339), "-to", to.UTC().Format(time.RFC3339))

	// Two workers run the table. The slots after the latest record (+7),
	// older than the catch-up window, they record missed; two backfills
	// then race over the range.
	stop := startWorkers(t, path, register, "w0", "w1")
	missedBy := map[int64]string{7: "earlier"}
	for _, i := range []int64{8, 9} {
		waitFor(t, 30*time.Second, func() bool {
			rec, ok, err := store.Record(ctx, "tick", from.Add(time.Duration(i)*time.Second))
			if err != nil || !ok {
				return false
			}
			if rec.State != slot.StateMissed || (rec.Owner != "w0" && rec.Owner != "w1") || !strings.Contains(rec.Error, "older than the catch-up window") {
				t.Fatalf("slot +%d once the workers started: %+v; want recorded missed by one of them, older than the catch-up window", i, rec)
			}
			missedBy[i] = rec.Owner
			return true
		})
	}
	dryRun(missedBy, "8 to run (5 without a record, 3 recorded missed)")
	if _, _, err := store.Pause(ctx, "tick", "maintenance", "ops@host"); err != nil {
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
		if st, ok := recorded[i]; ok && st != slot.StateMissed {
			if n != 0 || rec.State != st || rec.Owner != "earlier" {
				t.Errorf("slot +%d had a record: ran %d times, record %+v", i, n, rec)
			}
		} else if n != 1 || rec.State != slot.StateDone || !strings.HasPrefix(rec.Owner, "backfill-") || rec.Attempt != 1 {
			t.Errorf("slot +%d never started (recorded missed by %q): ran %d times, record %+v; want run once, done by a backfill", i, missedBy[i], n, rec)
		} else if by := missedBy[i]; (rec.Missed == nil) != (by == "") || (by != "" && (rec.Missed.By != by || rec.Missed.Reason == "")) {
			t.Errorf("slot +%d (recorded missed by %q): its run's record keeps of the missed one %+v", i, by, rec.Missed)
		} else if by != "" && !strings.Contains(resultOrError(rec), "backfilled; was missed ("+by+"): ") {
			t.Errorf("slot +%d: status shows %q; want what the missed record said", i, resultOrError(rec))
		}
	}
	// Between them, the two backfills ran each of the 8 slots once. (The
	// one that claimed later may have found them run: "ran 0 of 8".)
	total := 0
	for _, out := range outs {
		for _, m := range regexp.MustCompile(`ran (\d+) of \d+`).FindAllStringSubmatch(out, -1) {
			n, _ := strconv.Atoi(m[1])
			total += n
		}
	}
	if total != 8 {
		t.Fatalf("the backfills ran %d slots between them, want 8:\n%s\n%s", total, outs[0], outs[1])
	}
}

// loseSlotReplies is a go-redis hook that executes every script call on a
// slot record and loses its reply, as a network that drops replies does.
type loseSlotReplies struct{}

var errReplyLost = errors.New("loseSlotReplies: i/o timeout (the reply was lost)")

func onSlot(cmd redis.Cmder) bool {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return false
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, ":slot:") {
			return true
		}
	}
	return false
}

func (loseSlotReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (loseSlotReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil || !onSlot(cmd) {
			return err
		}
		cmd.SetErr(errReplyLost)
		return errReplyLost
	}
}

func (loseSlotReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Err() == nil && onSlot(cmd) {
				cmd.SetErr(errReplyLost)
				err = errReplyLost
			}
		}
		return err
	}
}

// TestBackfillExitsOneWhenAClaimFails: every reply of a backfill's claims is
// lost (they reach Redis and win). The command must say, for each slot,
// that its claim failed and that a try may have won, and exit 1: a script
// that runs it must not take the backfill for done. Nothing ran; the slots
// are recorded running by the backfill, for a live replica to settle. (The
// job allows overlap: else the first slot's lease, which nobody renews,
// would hold the job, and the second's claims would find it busy.)
func TestBackfillExitsOneWhenAClaimFails(t *testing.T) {
	srv := redistest.StartOwned(t)
	rdb := srv.Client()
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: bfl
http:
  listen: ""
shutdown_grace: 1s
jobs:
  - name: tick
    schedule: "@every 1m"
    catchup: none
    overlap: allow
`, srv.Addr()))
	ran := func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, run jobs.Run) error {
			return env.Redis.RPush(ctx, "bfl:ran", run.Slot.Unix()).Err()
		})
	}
	startWorkers(t, path, ran, "w0")
	from := time.Now().Add(-time.Hour).Truncate(time.Minute)
	to := from.Add(time.Minute)
	var out, errb bytes.Buffer
	code := Command(context.Background(), []string{"backfill", "tick", "-config", path,
		"-from", from.UTC().Format(time.RFC3339), "-to", to.UTC().Format(time.RFC3339)},
		func(reg *jobs.Registry, env Env) error {
			env.Redis.AddHook(loseSlotReplies{})
			return ran(reg, env)
		}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "the claims of 2 slots failed") {
		t.Fatalf("backfill with every claim's reply lost: exit %d, stderr:\n%s\nwant 1, saying the claims of 2 slots failed", code, errb.String())
	}
	store, _ := slotstore.New(rdb, "bfl")
	for _, at := range []time.Time{from, to} {
		line := at.UTC().Format(time.RFC3339) + "  claim failed: "
		if !strings.Contains(out.String(), line) || !strings.Contains(out.String(), "if a try reached Redis and won, the slot is recorded running") {
			t.Errorf("backfill's output lacks %q and what a try that won means:\n%s", line, out.String())
		}
		if rec, ok, err := store.Record(context.Background(), "tick", at); err != nil || !ok || rec.State != slot.StateRunning || !strings.HasPrefix(rec.Owner, "backfill-") {
			t.Errorf("slot %v: %+v (found %v, %v); want running by the backfill (its claim won, the reply was lost)", at.UTC(), rec, ok, err)
		}
	}
	// (The live worker runs the job's slots as they come: not these.)
	for _, s := range rdb.LRange(context.Background(), "bfl:ran", 0, -1).Val() {
		if s == strconv.FormatInt(from.Unix(), 10) || s == strconv.FormatInt(to.Unix(), 10) {
			t.Errorf("slot %s ran; want no run (no claim was answered won)", s)
		}
	}
}

// tickConfig writes a worker config of one job, tick, due every second,
// under prefix on the Redis at addr.
func tickConfig(t *testing.T, addr, prefix string) string {
	return writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: %s
http:
  listen: ""
shutdown_grace: 1s
jobs:
  - name: tick
    schedule: "@every 1s"
    catchup: none
    catchup_window: 5s
`, addr, prefix))
}

// TestBackfillWhoseRunsFailExitsNonZero: every slot a backfill runs fails.
// The command did not do the work it was asked for, yet it exits 0, as if
// it had; trigger exits 1 for the same outcome ("1 when it ran here and
// failed"), so a script that runs backfill cannot tell.
func TestBackfillWhoseRunsFailExitsNonZero(t *testing.T) {
	srv := redistest.StartOwned(t)
	path := tickConfig(t, srv.Addr(), "bffail")
	register := func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, run jobs.Run) error {
			return errors.New("the upstream API refused the export")
		})
	}
	startWorkers(t, path, register, "w0") // a live replica, as backfill requires

	from := time.Now().Add(-time.Hour).Truncate(time.Second)
	to := from.Add(2 * time.Second)
	var out, errb bytes.Buffer
	code := Command(context.Background(), []string{"backfill", "tick", "-from", from.UTC().Format(time.RFC3339),
		"-to", to.UTC().Format(time.RFC3339), "-config", path}, register, &out, &errb)
	t.Logf("exit %d\nstdout:\n%s", code, out.String())
	if !strings.Contains(out.String(), "ran: failed") {
		t.Fatalf("want the backfilled runs to fail; stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	if code == 0 {
		t.Errorf("backfill exited 0 although every slot it ran failed")
	}
}

// TestBackfillRefusesATableTheReplicasDoNotRun: mid-deploy, the operator's
// config gives the job other settings than the live replicas run. A
// backfill with another schedule would run slots the deployment never
// scheduled (or judge them by another overlap, lease or retention), a
// trigger with another overlap could run the job beside the replicas'
// runs: each is refused, naming the replica and both settings. Before,
// they read the registry only for how many replicas were live, or not at
// all. Found by review.
func TestBackfillRefusesATableTheReplicasDoNotRun(t *testing.T) {
	srv := redistest.StartOwned(t)
	// conf is a config of one job, tick, with setting (a YAML line of the
	// job), under prefix.
	conf := func(prefix, setting string) string {
		return writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: %s
http:
  listen: ""
shutdown_grace: 1s
jobs:
  - name: tick
    catchup: none
    %s
`, srv.Addr(), prefix, setting))
	}
	ran := func(reg *jobs.Registry, env Env) error {
		return reg.Register("tick", func(ctx context.Context, run jobs.Run) error { return nil })
	}
	from := time.Now().Add(-time.Hour).Truncate(time.Hour)
	for _, tc := range []struct {
		command, prefix, theirs, mine string
		args                          []string
		wantCode                      int // 0: any but 0
		wantTheirs, wantMine          string
	}{
		{"backfill", "bfd", `schedule: "0 * * * * *"`, `schedule: "30 * * * * *"`,
			[]string{"-from", from.UTC().Format(time.RFC3339), "-to", from.Add(10 * time.Minute).UTC().Format(time.RFC3339)},
			0, `schedule="0 * * * * *"`, `schedule="30 * * * * *"`},
		{"trigger", "trd", "schedule: \"@every 1m\"\n    overlap: skip", "schedule: \"@every 1m\"\n    overlap: allow", nil,
			2, "overlap=skip", "overlap=allow"},
	} {
		t.Run(tc.command, func(t *testing.T) {
			startWorkers(t, conf(tc.prefix, tc.theirs), ran, "w0")
			var out, errb bytes.Buffer
			args := append([]string{tc.command, "tick", "-config", conf(tc.prefix, tc.mine)}, tc.args...)
			code := Command(context.Background(), args, ran, &out, &errb)
			if code == 0 || (tc.wantCode != 0 && code != tc.wantCode) || !strings.Contains(errb.String(), "replica w0 runs tick with other settings") ||
				!strings.Contains(errb.String(), tc.wantTheirs) || !strings.Contains(errb.String(), tc.wantMine) {
				t.Fatalf("%s with other settings than the live replica's: exit %d, stdout:\n%s\nstderr:\n%s\nwant refused, naming w0 and both settings",
					tc.command, code, out.String(), errb.String())
			}
			if strings.Contains(out.String(), "ran") {
				t.Errorf("a slot ran:\n%s", out.String())
			}
		})
	}
}
