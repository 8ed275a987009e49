package locking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/slotcron/slotcron/internal/rediskit"
	"github.com/slotcron/slotcron/internal/validity"
)

// Redlock is the Redlock algorithm over N independent Redis masters: a lease
// holds when a majority of them (N/2+1) hold the key with its token.
//
// Redlock is an efficiency lock. It keeps two processes from doing the same
// work most of the time, but it cannot make a guarantee that correctness may
// rest on: it assumes bounded network delay, bounded process pauses and
// bounded clock drift, and a process paused past its TTL (a GC pause, a page
// fault, SIGSTOP) wakes up still believing it holds the lock (Kleppmann, "How
// to do distributed locking", 2016). What makes a lock correct is fencing: a
// number that grows with every grant, which the protected store checks. Redlock
// cannot produce one, since its nodes count separately and two majorities can
// see different counts, so WithFencing is refused here. If you need
// correctness, use a single-master Lease with WithFencing, or a consensus
// system's lock, and fence your writes.
//
// Each attempt sends its requests to every node at once, each bounded by the
// node timeout, and succeeds as soon as a majority holds the key; a failed
// attempt waits for every answer first, so that its unlock follows each SET. The
// lease is valid for TTL − elapsed − (TTL × 1% + 2ms) from the attempt's
// start. A failed attempt unlocks on every node and, after a random delay, the
// next attempt begins, up to the retry bound.
//
// Give it clients with ContextTimeoutEnabled so that a frozen node's request
// ends at the node timeout; otherwise it ends at the client's read timeout, in
// the background, after Redlock has already moved on.
type Redlock struct {
	nodes       []RedisClient
	quorum      int
	nodeTimeout time.Duration
	retries     int
	retryDelay  time.Duration
}

// RedlockOption configures NewRedlock.
type RedlockOption func(*Redlock) error

// WithNodeTimeout bounds each request to each node. Default 50ms: small next
// to the TTL, as the algorithm asks.
func WithNodeTimeout(d time.Duration) RedlockOption {
	return func(r *Redlock) error {
		if d <= 0 {
			return fmt.Errorf("locking: WithNodeTimeout: timeout must be > 0, got %v", d)
		}
		r.nodeTimeout = d
		return nil
	}
}

// WithRetries sets how many times a failed acquisition or extension is tried
// again (default 3), each after a random delay in [0, maxDelay] (default 200ms).
func WithRetries(n int, maxDelay time.Duration) RedlockOption {
	return func(r *Redlock) error {
		if n < 0 || maxDelay < 0 {
			return fmt.Errorf("locking: WithRetries: need n >= 0 and maxDelay >= 0, got %d, %v", n, maxDelay)
		}
		r.retries, r.retryDelay = n, maxDelay
		return nil
	}
}

// NewRedlock returns a Redlock over nodes, which must be independent masters
// (not replicas of one another, not shards of one cluster). It sends nothing.
func NewRedlock(nodes []RedisClient, opts ...RedlockOption) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, errors.New("locking: NewRedlock: no nodes")
	}
	if slices.Contains(nodes, nil) {
		return nil, errors.New("locking: NewRedlock: nil node")
	}
	r := &Redlock{nodes: nodes, quorum: len(nodes)/2 + 1, nodeTimeout: 50 * time.Millisecond, retries: 3, retryDelay: 200 * time.Millisecond}
	for _, opt := range opts {
		if err := opt(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Quorum returns how many nodes must agree: N/2+1.
func (r *Redlock) Quorum() int { return r.quorum }

// Obtain takes key on a majority of the nodes for ttl, trying up to 1+retries
// times. It returns an error wrapping ErrNotObtained, with each node's answer,
// when no attempt reached a majority in time. It blocks until then or until ctx
// ends. WithWatchdog keeps the lease with a quorum on every renewal.
func (r *Redlock) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lease, error) {
	o, err := prepare("Redlock.Obtain", key, ttl, opts)
	if err != nil {
		return nil, err
	}
	if o.fencing {
		return nil, errors.New("locking: Redlock.Obtain: WithFencing is not supported: independent nodes cannot issue one growing fence (see the Redlock doc)")
	}
	if o.backoffSet {
		return nil, errors.New("locking: Redlock.Obtain: WithBackoff does not apply; use WithRetries on NewRedlock")
	}
	h := redlockHold{r: r, key: key, token: rediskit.NewToken(), channel: releaseChannel(key), unlock: releaseKeys(key)}
	var lastErr error
	for attempt := 0; attempt <= r.retries; attempt++ {
		if attempt > 0 && !r.pause(ctx) {
			break
		}
		start := time.Now()
		answers := r.each(ctx, func(ctx context.Context, c RedisClient) (int64, error) {
			res, err := obtainScript.Run(ctx, c, []string{key}, h.token, ttl.Milliseconds(), "0").Int64Slice()
			if err != nil || len(res) != 2 {
				return 0, cmp(err, "unexpected reply")
			}
			return res[0], nil
		}, func(a tally) bool {
			// Only success decides early. A failure waits for every answer (at
			// most the node timeout), so that the unlock below reaches each node
			// after its SET, not before it.
			return a.yes >= r.quorum
		})
		if answers.yes >= r.quorum && time.Since(start) < validity.SafeTTL(ttl) {
			l := newLease(h, key, h.token, 0, ttl, start, ctx)
			if o.watchdog {
				_ = l.KeepAlive()
			}
			return l, nil
		}
		lastErr = fmt.Errorf("%w: %d of %d nodes (quorum %d) after %v: %s",
			ErrNotObtained, answers.yes, len(r.nodes), r.quorum, time.Since(start).Round(time.Microsecond), answers)
		// Unlock everywhere, on a context that outlives a cancelled ctx. The
		// next attempt takes the same token: this unlock leaves no receipt of
		// it, or a lease that attempt wins and then loses would find the
		// receipt at its Release and answer nil.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		undo := h
		undo.unlock = []string{key}
		_, _ = undo.release(uctx)
		cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, lastErr
}

// pause sleeps a random delay before a retry; false when ctx ended first.
func (r *Redlock) pause(ctx context.Context) bool {
	t := time.NewTimer(rand.N(r.retryDelay + 1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// tally counts the nodes' answers to one request: yes (1), no (0), failed (an
// error or no answer within the node timeout).
type tally struct {
	yes, no, failed int
	values          []int64 // the answers of the nodes that answered, for pttl
	errs            []error
}

func (a tally) String() string {
	s := fmt.Sprintf("%d yes, %d no, %d failed", a.yes, a.no, a.failed)
	if len(a.errs) > 0 {
		s += fmt.Sprintf(" (%v)", errors.Join(a.errs...))
	}
	return s
}

// each sends f to every node at once, each call bounded by the node timeout,
// and returns the tally once decided(tally) is true, every node has answered,
// or the node timeout has passed (the nodes still silent count as failed).
// A call's answer counts as yes when it is 1 and no otherwise.
func (r *Redlock) each(ctx context.Context, f func(context.Context, RedisClient) (int64, error), decided func(tally) bool) tally {
	type answer struct {
		v   int64
		err error
	}
	answers := make(chan answer, len(r.nodes)) // late answers never block their sender
	for _, node := range r.nodes {
		go func() {
			nctx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
			defer cancel()
			v, err := f(nctx, node)
			answers <- answer{v, err}
		}()
	}
	timeout := time.NewTimer(r.nodeTimeout)
	defer timeout.Stop()
	var t tally
	for range r.nodes {
		select {
		case a := <-answers:
			switch {
			case a.err != nil:
				t.failed++
				t.errs = append(t.errs, a.err)
			case a.v == 1:
				t.yes++
				t.values = append(t.values, a.v)
			default:
				t.no++
				t.values = append(t.values, a.v)
			}
			if decided != nil && decided(t) {
				return t
			}
		case <-timeout.C:
			silent := len(r.nodes) - t.yes - t.no - t.failed
			t.failed += silent
			t.errs = append(t.errs, fmt.Errorf("%d node(s) silent after %v", silent, r.nodeTimeout))
			return t
		}
	}
	return t
}

// cmp returns err, or an error saying what when err is nil.
func cmp(err error, what string) error {
	if err != nil {
		return err
	}
	return errors.New(what)
}

// redlockHold is a lease held on a majority of the nodes.
type redlockHold struct {
	r       *Redlock
	key     string
	token   string
	channel string
	unlock  []string // the release script's keys: releaseKeys(key)
}

// extend needs a quorum of confirmations. A majority that no longer holds the
// token is a loss (false); anything else short of a quorum is retried, up to
// the retry bound, and then reported as an error.
func (h redlockHold) extend(ctx context.Context, ttl time.Duration) (bool, error) {
	var last tally
	for attempt := 0; attempt <= h.r.retries; attempt++ {
		if attempt > 0 && !h.r.pause(ctx) {
			break
		}
		last = h.r.each(ctx, func(ctx context.Context, c RedisClient) (int64, error) {
			return extendScript.Run(ctx, c, []string{h.key}, h.token, ttl.Milliseconds()).Int64()
		}, func(a tally) bool { return a.yes >= h.r.quorum || a.no > len(h.r.nodes)-h.r.quorum })
		if last.yes >= h.r.quorum {
			return true, nil
		}
		if last.no > len(h.r.nodes)-h.r.quorum {
			return false, nil
		}
	}
	return false, fmt.Errorf("no quorum of %d: %s", h.r.quorum, last)
}

// release unlocks on every node; true when at least one node still held the token.
func (h redlockHold) release(ctx context.Context) (bool, error) {
	a := h.r.each(ctx, func(ctx context.Context, c RedisClient) (int64, error) {
		return releaseScript.Run(ctx, c, h.unlock, h.token, h.channel, receiptTTL.Milliseconds()).Int64()
	}, nil)
	if a.yes == 0 && a.failed > 0 {
		return false, fmt.Errorf("release on %d nodes: %s", len(h.r.nodes), a)
	}
	return a.yes > 0, nil
}

// pttl is the time until fewer than a quorum of nodes would hold the token:
// the quorum-th longest remaining TTL among the nodes that hold it.
func (h redlockHold) pttl(ctx context.Context) (int64, error) {
	a := h.r.each(ctx, func(ctx context.Context, c RedisClient) (int64, error) {
		return pttlScript.Run(ctx, c, []string{h.key}, h.token).Int64()
	}, nil)
	var held []int64
	for _, v := range a.values {
		if v >= 0 {
			held = append(held, v)
		}
	}
	if len(held) < h.r.quorum {
		if a.failed > 0 {
			return 0, fmt.Errorf("pttl: %s", a)
		}
		return -3, nil
	}
	slices.Sort(held)
	slices.Reverse(held)
	return held[h.r.quorum-1], nil
}
