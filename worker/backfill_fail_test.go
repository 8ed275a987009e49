package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/jobs"
)

// TestBackfillWhoseRunsFailExitsNonZero: every slot a backfill runs fails.
// The command did not do the work it was asked for, yet it exits 0, as if
// it had; trigger exits 1 for the same outcome ("1 when it ran here and
// failed"), so a script that runs backfill cannot tell.
func TestBackfillWhoseRunsFailExitsNonZero(t *testing.T) {
	srv := redistest.StartOwned(t)
	path := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: bffail
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
