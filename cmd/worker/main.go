// Command worker runs a slotcron cron table on one replica. Run one per
// replica, all with the same config:
//
//	worker run -config config.yaml      # until SIGTERM or SIGINT; a second signal forces the exit
//	worker check -config config.yaml    # validate, print each job's next 3 slots
//	worker status -config config.yaml   # lease holders and the last 10 slot records
//
// This binary registers the noon lottery (examples/lottery/lottery). To run
// your own jobs, write the same main with your own Registrar; see the README.
package main

import (
	"github.com/slotcron/slotcron/examples/lottery/lottery"
	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/worker"
)

func main() {
	worker.Main(func(reg *jobs.Registry, env worker.Env) error {
		return lottery.Register(reg, env.Redis, env.KeyPrefix)
	})
}
