package slotstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/rediskit"
	"github.com/slotcron/slotcron/slot"
)

// call is one script call of a batch.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// batch sends calls in one pipeline: one round trip on a single server (one
// per master involved on a cluster). Calls that meet an empty script cache
// (NOSCRIPT, after a restart or failover) are sent again with EVAL in a second
// pipeline. The returned commands carry each call's own result or error.
func (s *Store) batch(ctx context.Context, calls []call) []*redis.Cmd {
	cmds, _ := s.batchWait(ctx, calls, 0, 0)
	return cmds
}

// batchWait is batch, followed in the same pipeline by WAIT n timeout when n >
// 0: acked is how many replicas acknowledged every write of the batch (-1
// when WAIT got no answer).
func (s *Store) batchWait(ctx context.Context, calls []call, n int, timeout time.Duration) (cmds []*redis.Cmd, acked int) {
	cmds = make([]*redis.Cmd, len(calls))
	pipe := s.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	var wait *redis.Cmd
	if n > 0 {
		wait = pipe.Do(ctx, "WAIT", n, timeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := s.rdb.Pipeline()
		for _, i := range again {
			cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		if n > 0 {
			wait = pipe.Do(ctx, "WAIT", n, timeout.Milliseconds())
		}
		_, _ = pipe.Exec(ctx)
	}
	acked = -1
	if wait != nil {
		if n, err := wait.Int(); err == nil {
			acked = n
		}
	}
	return cmds, acked
}

// replies returns the n replies of a batched script call, one per item.
func replies(cmd *redis.Cmd, n int) ([]any, error) {
	vals, err := cmd.Slice()
	if err == nil && len(vals) != n {
		err = fmt.Errorf("%d replies for %d items", len(vals), n)
	}
	return vals, err
}

// callKind is what the calls of a batch may not mix: the script, and the
// arguments a call shares (the replica, ARGV[1], for claims).
type callKind struct {
	takeover bool
	replica  string
}

// maxPerCall bounds the items of one script call: Redis runs a script to the
// end before it serves anyone else, and a claim costs it about 35us (a
// 2-vCPU VM), so 64 claims keep a call near 2ms, well under the ~5ms beyond
// which other clients' short leases are at risk. A batch's calls still go
// out in one pipeline: one round trip.
const maxPerCall = 64

// split groups items 0..n-1 into the sets that may share a script call:
// items of the same kind and, on a Cluster, the same hash slot of their job,
// at most maxPerCall each. An unknown client gets one call per item.
func (s *Store) split(n int, item func(i int) (kind callKind, job string)) [][]int {
	type key struct {
		kind callKind
		slot uint16
	}
	var groups [][]int
	index := map[key]int{}
	for i := range n {
		if s.topology == topoSeparate {
			groups = append(groups, []int{i})
			continue
		}
		kind, job := item(i)
		k := key{kind: kind}
		if s.topology == topoCluster {
			k.slot = rediskit.HashSlot(job)
		}
		gi, ok := index[k]
		if !ok || len(groups[gi]) == maxPerCall {
			gi = len(groups)
			index[k] = gi
			groups = append(groups, make([]int, 0, min(n-i, maxPerCall)))
		}
		groups[gi] = append(groups[gi], i)
	}
	return groups
}

// replyReader reads a script's array reply; the first malformed element sets err.
type replyReader struct {
	vals []any
	err  error
}

func reply(vals []any) *replyReader { return &replyReader{vals: vals} }

func (r *replyReader) at(i int) any {
	if i >= len(r.vals) {
		if r.err == nil {
			r.err = fmt.Errorf("element %d missing", i)
		}
		return nil
	}
	return r.vals[i]
}

func (r *replyReader) str(i int) string {
	switch v := r.at(i).(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

func (r *replyReader) int(i int) int64 {
	switch v := r.at(i).(type) {
	case int64:
		return v
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil && r.err == nil {
			r.err = err
		}
		return n
	}
	if r.err == nil {
		r.err = errors.New("not a number")
	}
	return 0
}

// ms reads a PTTL: a duration, or -1 when the key has none or is gone.
func (r *replyReader) ms(i int) time.Duration {
	n := r.int(i)
	if n < 0 {
		return -1
	}
	return time.Duration(n) * time.Millisecond
}

// holderSlot reads the slot of the run that holds a job's lease into res:
// unix seconds (HolderSlot), or a manual slot's reference (HolderManual);
// "" when the lease's value was not ours to parse.
func (r *replyReader) holderSlot(i int, res *slot.Result) {
	hs := r.str(i)
	switch {
	case hs == "":
	case strings.HasPrefix(hs, manualRef("")):
		res.HolderManual = strings.TrimPrefix(hs, manualRef(""))
	default:
		res.HolderSlot = time.Unix(r.int(i), 0)
	}
}
