// Command lottery is the noon-lottery demo: it runs N replicas of the lottery
// as separate processes against one Redis and shows that each slot is drawn
// once.
//
//	go run ./examples/lottery                          # embedded Redis, 3 replicas, every 2s, 5 slots
//	go run ./examples/lottery -redis 127.0.0.1:6379    # a real Redis
//	go run ./examples/lottery -schedule '0 0 12 * * *' # the real noon schedule
//	go run ./examples/lottery -jaeger 127.0.0.1:4317   # and send the traces to Jaeger
//
// It prints a line per slot (the winner, the losers, the fence and the first
// winners) and a verdict, and exits non-zero when a slot was drawn twice or
// not at all. On a real Redis (-redis) it writes under a fresh key prefix,
// and removes its keys when it ends.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/slotcron/slotcron/slot"
)

type options struct {
	redis    string
	replicas int
	every    time.Duration
	schedule string
	slots    int
	jaeger   string
	verbose  bool

	// replica mode, set by the parent
	role      string
	replicaID string
	prefix    string // the key prefix: the default on the embedded Redis, a fresh one on -redis
}

func main() {
	var o options
	flag.StringVar(&o.redis, "redis", "", "Redis host:port (default: an embedded Redis)")
	flag.IntVar(&o.replicas, "replicas", 3, "how many replica processes to run")
	flag.DurationVar(&o.every, "every", 2*time.Second, "the schedule: a draw every this long (a whole number of seconds)")
	flag.StringVar(&o.schedule, "schedule", "", "a cron schedule instead of -every, e.g. '0 0 12 * * *'")
	flag.IntVar(&o.slots, "slots", 5, "how many slots to run")
	flag.StringVar(&o.jaeger, "jaeger", "", "send traces over OTLP/gRPC to this host:port (Jaeger)")
	flag.BoolVar(&o.verbose, "v", false, "show the replicas' logs")
	flag.StringVar(&o.role, "role", "demo", "internal: demo or replica")
	flag.StringVar(&o.replicaID, "replica-id", "", "internal: the replica's ID")
	flag.StringVar(&o.prefix, "prefix", slot.DefaultKeyPrefix, "internal: the key prefix")
	flag.Parse()
	if o.schedule == "" {
		o.schedule = fmt.Sprintf("@every %s", o.every)
	}
	var code int
	switch o.role {
	case "replica":
		code = replica(o)
	case "demo":
		code = demo(o)
	default:
		fmt.Fprintf(os.Stderr, "lottery: unknown -role %q\n", o.role)
		code = 2
	}
	os.Exit(code)
}
