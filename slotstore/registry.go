package slotstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/slot"
)

// DeploymentsKey is the registry that every deployment on one Redis shares,
// whatever its key prefix: each prefix and its jobs.
const DeploymentsKey = "slotcron:deployments"

func (s *Store) registryKey() string { return s.prefix + ":replicas" }

// listsKey holds each replica's job list (field: its ID, value "<table
// hash> <json>"). It is under the prefix (an ACL may allow only the
// prefix's keys), in another Cluster slot than the registry, so no script
// touches both: Heartbeat and Leave write and read it with plain commands.
func (s *Store) listsKey() string { return s.prefix + ":replicas:jobs" }

// replicaJSON is the description a replica publishes in the registry.
type replicaJSON struct {
	Version  string `json:"version,omitempty"`
	Protocol int    `json:"protocol,omitempty"` // absent: protocol 1
	Started  int64  `json:"started_ms"`
	OffsetNS int64  `json:"offset_ns"`
	// MaxSkewNS is the replica's max_skew; absent (0) in older versions'
	// entries, which older readers skip (json ignores unknown fields).
	MaxSkewNS int64             `json:"max_skew_ns,omitempty"`
	Jobs      map[string]string `json:"jobs,omitempty"`
	Table     string            `json:"table,omitempty"`
	// Catchup is slot.Replica.Catchup: per job, the first and last slot
	// still to catch up, unix ms; absent when it catches nothing up.
	Catchup map[string][2]int64 `json:"catchup_ms,omitempty"`
}

// Heartbeat publishes me in the deployment's registry (<prefix>:replicas) and
// its prefix and jobs in the registry every deployment shares
// (DeploymentsKey), and reads both back: the live replicas (seen within
// stale, this one included), the stale ones that publish a catch-up (Gone:
// they stopped heartbeating without leaving) and the other live prefixes. Two round trips:
// the two script calls, one per key, then the job lists (syncLists). It
// returns an error wrapping
// slot.ErrDuplicateReplica, and writes nothing, when another live instance
// has me.ID. When the shared registry can't be written (an ACL that allows
// only the prefix's keys), Deployments is nil and that is no error.
func (s *Store) Heartbeat(ctx context.Context, me slot.Replica, stale time.Duration) (slot.Registry, error) {
	table := me.Table
	if table == "" && me.Jobs != nil {
		table = slot.TableHash(me.Jobs)
	}
	var catchup map[string][2]int64
	if len(me.Catchup) > 0 {
		catchup = make(map[string][2]int64, len(me.Catchup))
		for job, r := range me.Catchup {
			catchup[job] = [2]int64{r.From.UnixMilli(), r.To.UnixMilli()}
		}
	}
	desc, err := json.Marshal(replicaJSON{Version: me.Version, Protocol: Protocol, Started: me.Started.UnixMilli(), OffsetNS: int64(me.Offset),
		MaxSkewNS: int64(me.MaxSkew), Table: table, Catchup: catchup})
	if err != nil {
		return slot.Registry{}, fmt.Errorf("slotstore: sending the heartbeat: %w", err)
	}
	// The job list goes out only when Redis may not have this table's.
	list := ""
	s.listedMu.Lock()
	send := me.Jobs != nil && s.listed[me.ID] != table
	s.listedMu.Unlock()
	if send {
		jobsJSON, err := json.Marshal(me.Jobs)
		if err != nil {
			return slot.Registry{}, fmt.Errorf("slotstore: sending the heartbeat: %w", err)
		}
		list = table + " " + string(jobsJSON)
	}
	jobs := slices.Clone(me.Names)
	if jobs == nil {
		for j := range me.Jobs {
			jobs = append(jobs, j)
		}
	}
	slices.Sort(jobs)
	cmds := s.batch(ctx, []call{
		{heartbeatScript, []string{s.registryKey()}, []any{me.ID, me.Instance, string(desc), stale.Milliseconds(), GoneKept.Milliseconds()}},
		{deploymentsScript, []string{DeploymentsKey}, []any{s.prefix, strings.Join(jobs, ","), stale.Milliseconds()}},
	})
	vals, err := cmds[0].Slice()
	if err != nil {
		return slot.Registry{}, fmt.Errorf("slotstore: sending the heartbeat: %w", err)
	}
	r := reply(vals)
	reg := slot.Registry{Now: time.UnixMilli(r.int(1)), Protocol: Protocol}
	switch r.str(0) {
	case "duplicate":
		other, perr := parseReplica(me.ID, r.str(2))
		if perr != nil {
			return reg, fmt.Errorf("%w: %s (unreadable entry: %v)", slot.ErrDuplicateReplica, me.ID, perr)
		}
		return reg, fmt.Errorf("%w: %q is live in another process (instance %s, version %q, started %s, seen %v ago)",
			slot.ErrDuplicateReplica, me.ID, other.Instance, other.Version, other.Started.UTC().Format(time.RFC3339),
			reg.Now.Sub(other.Seen).Round(time.Millisecond))
	case "ok":
	default:
		return reg, fmt.Errorf("slotstore: sending the heartbeat: unexpected reply %v", vals)
	}
	pruned := int(r.int(2))
	live := 0
	if r.err == nil && pruned >= 0 && len(vals) >= 4+pruned {
		live = int(r.int(3 + pruned))
	}
	if r.err != nil || pruned < 0 || live < 0 || live%2 != 0 || len(vals) < 4+pruned+live {
		return reg, fmt.Errorf("slotstore: sending the heartbeat: unexpected reply %v", vals)
	}
	if reg.Replicas, err = parseReplicas(vals[4+pruned : 4+pruned+live]); err != nil {
		return reg, fmt.Errorf("slotstore: sending the heartbeat: %w", err)
	}
	reg.Gone = parseGone(vals[4+pruned+live:])
	if err := s.syncLists(ctx, me.ID, table, list, vals[3:3+pruned], reg.Replicas, reg.Gone); err != nil {
		return reg, fmt.Errorf("slotstore: sending the heartbeat: %w", err)
	}
	if dvals, err := cmds[1].Slice(); err == nil && len(dvals) > 0 {
		reg.Deployments = parseDeployments(dvals[1:])
	}
	return reg, nil
}

// syncLists is a heartbeat's second round trip, for the job lists: it
// writes this replica's list (list, unless ""), learns whether Redis has it
// (when not, it goes out with the next heartbeat: never sent, or lost with
// Redis's data), removes the lists of the entries the heartbeat pruned, and
// fills in the lists of the replicas that run another table than table
// (replicas that run the same one agree on every job). A replica whose list
// is not there (a large table, an older version, or lost with Redis's data)
// keeps none: only its table hash is known.
func (s *Store) syncLists(ctx context.Context, id, table, list string, pruned []any, reps, gone []slot.Replica) error {
	var need []*slot.Replica
	for _, rs := range [][]slot.Replica{reps, gone} {
		for i := range rs {
			if rs[i].Jobs == nil && rs[i].Table != table {
				need = append(need, &rs[i])
			}
		}
	}
	ids := make([]string, len(need))
	for k, r := range need {
		ids[k] = r.ID
	}
	pipe := s.rdb.Pipeline()
	var lists *redis.SliceCmd
	if len(ids) > 0 { // first: a successor under a gone replica's ID replaces its list below
		lists = pipe.HMGet(ctx, s.listsKey(), ids...)
	}
	if list != "" {
		pipe.HSet(ctx, s.listsKey(), id, list)
	}
	has := pipe.HExists(ctx, s.listsKey(), id)
	if len(pruned) > 0 {
		fields := make([]string, len(pruned))
		for i, p := range pruned {
			fields[i], _ = p.(string)
		}
		pipe.HDel(ctx, s.listsKey(), fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("the job lists: %w", err)
	}
	s.listedMu.Lock()
	if s.listed == nil {
		s.listed = map[string]string{}
	}
	switch {
	case !has.Val():
		delete(s.listed, id)
	case list != "":
		s.listed[id] = table
	}
	s.listedMu.Unlock()
	for k, r := range need {
		r.Jobs = jobList(lists.Val()[k], r.Table)
	}
	return nil
}

// jobList reads a replica's job list as the lists hash holds it (v, from
// HMGET: "<table hash> <json>", or nil): nil when it is another table's (its
// predecessor's) or none.
func jobList(v any, table string) map[string]string {
	s, _ := v.(string)
	hash, jobs, _ := strings.Cut(s, " ")
	var m map[string]string
	if hash != table || json.Unmarshal([]byte(jobs), &m) != nil {
		return nil
	}
	return m
}

// JobLists fills in the Jobs of each of reps (a Registry's replicas) whose
// job list Redis holds for its table: a replica of a large table, or of a
// version before the lists, keeps none (nil), and only its table hash is
// known.
func (s *Store) JobLists(ctx context.Context, reps []slot.Replica) error {
	if len(reps) == 0 {
		return nil
	}
	ids := make([]string, len(reps))
	for i, r := range reps {
		ids[i] = r.ID
	}
	pipe := s.rdb.Pipeline()
	lists := pipe.HMGet(ctx, s.listsKey(), ids...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("slotstore: reading the replicas' job lists: %w", err)
	}
	for i := range reps {
		reps[i].Jobs = jobList(lists.Val()[i], reps[i].Table)
	}
	return nil
}

// GoneKept is how long the registry keeps the entry of a replica that
// stopped heartbeating mid catch-up (its catch-up range, for a peer or its
// successor to record what it had not reached), where an entry with none
// goes after ten stale windows: a replica killed alone (a lost host, whose
// pod Kubernetes starts elsewhere 5 minutes on; a crash loop's backoff, at
// most 5 minutes) starts again later than that, and only it reads the
// entry then. Not longer: a replica that starts later reads the entry
// again, and a slot of it whose record has expired since (a retention
// shorter than this) is reported as keeping none (settle's check).
const GoneKept = 15 * time.Minute

// Registry reads the deployment's live replicas (seen within stale), and
// the stale ones that publish a catch-up (Gone), without publishing
// anything. One round trip.
func (s *Store) Registry(ctx context.Context, stale time.Duration) (slot.Registry, error) {
	pipe := s.rdb.Pipeline()
	now := pipe.Time(ctx)
	all := pipe.HGetAll(ctx, s.registryKey())
	if _, err := pipe.Exec(ctx); err != nil {
		return slot.Registry{}, fmt.Errorf("slotstore: reading the replica registry: %w", err)
	}
	reg := slot.Registry{Now: now.Val(), Protocol: Protocol}
	for field, v := range all.Val() {
		id, moved, _ := strings.Cut(field, " ") // "<id> <instance>": a predecessor's entry, moved by its successor's heartbeat
		rep, err := parseReplica(id, v)
		if err != nil {
			if moved != "" || !liveEntry(v, reg.Now, stale) {
				continue // not live: skipped, as the heartbeat skips a gone entry that does not parse
			}
			return reg, fmt.Errorf("slotstore: reading the replica registry: %w", err)
		}
		switch {
		case reg.Now.Sub(rep.Seen) < stale:
			reg.Replicas = append(reg.Replicas, rep)
		case len(rep.Catchup) > 0 && reg.Now.Sub(rep.Seen) <= max(10*stale, GoneKept): // as the heartbeat script reads it
			reg.Gone = append(reg.Gone, rep)
		}
	}
	slices.SortFunc(reg.Replicas, func(a, b slot.Replica) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(reg.Gone, func(a, b slot.Replica) int { return strings.Compare(a.ID, b.ID) })
	return reg, nil
}

// liveEntry reports whether a registry entry ("<instance> <seen_ms> ...")
// was seen within stale of now, or its time does not parse.
func liveEntry(v string, now time.Time, stale time.Duration) bool {
	f := strings.SplitN(v, " ", 3)
	if len(f) < 2 {
		return true
	}
	seen, err := strconv.ParseInt(f[1], 10, 64)
	return err != nil || now.Sub(time.UnixMilli(seen)) < stale
}

// parseReplica reads a registry entry: "<instance> <seen_ms> <json>".
func parseReplica(id, v string) (slot.Replica, error) {
	inst, rest, ok1 := strings.Cut(v, " ")
	seenText, desc, ok2 := strings.Cut(rest, " ")
	seen, err := strconv.ParseInt(seenText, 10, 64)
	var d replicaJSON
	if !ok1 || !ok2 || err != nil || json.Unmarshal([]byte(desc), &d) != nil {
		return slot.Replica{}, fmt.Errorf("replica %q: malformed registry entry %q", id, v)
	}
	protocol := d.Protocol
	if protocol == 0 {
		protocol = 1
	}
	var catchup map[string]slot.CatchupRange
	if len(d.Catchup) > 0 {
		catchup = make(map[string]slot.CatchupRange, len(d.Catchup))
		for job, r := range d.Catchup {
			catchup[job] = slot.CatchupRange{From: time.UnixMilli(r[0]), To: time.UnixMilli(r[1])}
		}
	}
	return slot.Replica{ID: id, Instance: inst, Version: d.Version, Protocol: protocol, Started: time.UnixMilli(d.Started),
		Seen: time.UnixMilli(seen), Offset: time.Duration(d.OffsetNS), MaxSkew: max(time.Duration(d.MaxSkewNS), 0),
		Jobs: d.Jobs, Table: table(d), Catchup: catchup}, nil
}

// parseGone reads the stale entries that publish a catch-up, skipping one
// that does not parse (a version that wrote it otherwise): unlike a live
// entry's, it must not stop the heartbeat, and the registration with it.
func parseGone(fields []any) []slot.Replica {
	var out []slot.Replica
	for i := 0; i+1 < len(fields); i += 2 {
		id, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		id, _, _ = strings.Cut(id, " ") // "<id> <instance>": a predecessor's entry, moved by its successor's heartbeat
		if rep, err := parseReplica(id, v); err == nil {
			out = append(out, rep)
		}
	}
	slices.SortFunc(out, func(a, b slot.Replica) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func parseReplicas(fields []any) ([]slot.Replica, error) {
	var out []slot.Replica
	for i := 0; i+1 < len(fields); i += 2 {
		id, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		rep, err := parseReplica(id, v)
		if err != nil {
			return nil, err
		}
		out = append(out, rep)
	}
	slices.SortFunc(out, func(a, b slot.Replica) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// parseDeployments reads the shared registry's entries: "<seen_ms> <jobs>".
func parseDeployments(fields []any) []slot.Deployment {
	out := []slot.Deployment{}
	for i := 0; i+1 < len(fields); i += 2 {
		prefix, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		seenText, jobs, _ := strings.Cut(v, " ")
		seen, _ := strconv.ParseInt(seenText, 10, 64)
		d := slot.Deployment{Prefix: prefix, Seen: time.UnixMilli(seen)}
		if jobs != "" {
			d.Jobs = strings.Split(jobs, ",")
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b slot.Deployment) int { return strings.Compare(a.Prefix, b.Prefix) })
	return out
}

// Leave removes me from the deployment's registry, if its entry is still
// this instance's: what a replica does when it stops, so that its peers
// stop counting it at their next heartbeat, and its job list with it. One
// round trip, and one more for the list.
func (s *Store) Leave(ctx context.Context, me slot.Replica) error {
	left, err := leaveScript.Run(ctx, s.rdb, []string{s.registryKey()}, me.ID, me.Instance).Int()
	if err != nil {
		return fmt.Errorf("slotstore: leaving the registry: %w", err)
	}
	s.listedMu.Lock()
	delete(s.listed, me.ID) // sent again if it comes back
	s.listedMu.Unlock()
	// Its list too, unless a successor under the same ID has the entry and
	// keeps its own. With no entry (a lost reply, and go-redis sent the
	// script again), the list goes as well: a successor yet to heartbeat
	// finds it gone and sends it again.
	if left != 0 {
		pipe := s.rdb.Pipeline()
		pipe.HDel(ctx, s.listsKey(), me.ID)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("slotstore: leaving the registry: %w", err)
		}
	}
	return nil
}

// table is an entry's table hash; an entry that lists its jobs but has no
// hash (an older version) gets it from the list.
func table(d replicaJSON) string {
	if d.Table == "" && d.Jobs != nil {
		return slot.TableHash(d.Jobs)
	}
	return d.Table
}
