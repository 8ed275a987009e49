// Command idle is the worker with ten no-op jobs registered (idle-0 ...
// idle-9), for bench/idle.sh: what a worker costs between slots.
package main

import (
	"context"
	"fmt"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/worker"
)

func main() {
	worker.Main(func(reg *jobs.Registry, env worker.Env) error {
		for i := range 10 {
			if err := reg.Register(fmt.Sprintf("idle-%d", i), func(context.Context, jobs.Run) error { return nil }); err != nil {
				return err
			}
		}
		return nil
	})
}
