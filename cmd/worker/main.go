// Command worker runs a slotcron cron table on one replica. Run one per
// replica, all with the same config:
//
//	worker run -config config.yaml      # until SIGTERM or SIGINT; a second signal forces the exit
//	worker check -config config.yaml    # validate, print each job's next 3 slots
//	worker status -config config.yaml   # lease holders and the last 10 slot records
//
// This binary registers the noon lottery (examples/lottery/lottery) and nap
// (examples/nap), a job that sleeps 6s, for watching a lease renewed and
// lost mid-run. To run your own jobs, write the same main with your own
// Registrar; see the README.
package main

import (
	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/examples/nap"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/worker"
)

func main() {
	worker.Main(func(reg *jobs.Registry, env worker.Env) error {
		if err := lottery.Register(reg, env.Redis, env.KeyPrefix); err != nil {
			return err
		}
		return nap.Register(reg)
	})
}
