// Command stuckworker is a worker whose one job, "stuck", ignores its
// context: the signal test uses it to show that a second SIGTERM ends the
// process at once while the first waits for the shutdown grace.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/worker"
)

func main() {
	worker.Main(func(reg *jobs.Registry, env worker.Env) error {
		return reg.Register("stuck", func(ctx context.Context, run jobs.Run) error {
			fmt.Fprintln(os.Stdout, "started")
			time.Sleep(time.Hour) // ignores ctx
			return nil
		})
	})
}
