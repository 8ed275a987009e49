package slotstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// DeploymentsKey is the registry that every deployment on one Redis shares,
// whatever its key prefix: each prefix and its jobs.
const DeploymentsKey = "slotcron:deployments"

func (s *Store) registryKey() string { return s.prefix + ":replicas" }

// replicaJSON is the description a replica publishes in the registry.
type replicaJSON struct {
	Version  string            `json:"version,omitempty"`
	Started  int64             `json:"started_ms"`
	OffsetNS int64             `json:"offset_ns"`
	Jobs     map[string]string `json:"jobs,omitempty"`
	Table    string            `json:"table,omitempty"`
}

// Heartbeat publishes me in the deployment's registry (<prefix>:replicas) and
// its prefix and jobs in the registry every deployment shares
// (DeploymentsKey), and reads both back: the live replicas (seen within
// stale, this one included) and the other live prefixes. One round trip (two
// script calls, one per key). It returns an error wrapping
// slot.ErrDuplicateReplica, and writes nothing, when another live instance
// has me.ID. When the shared registry can't be written (an ACL that allows
// only the prefix's keys), Deployments is nil and that is no error.
func (s *Store) Heartbeat(ctx context.Context, me slot.Replica, stale time.Duration) (slot.Registry, error) {
	desc, err := json.Marshal(replicaJSON{Version: me.Version, Started: me.Started.UnixMilli(), OffsetNS: int64(me.Offset),
		Jobs: me.Jobs, Table: me.Table})
	if err != nil {
		return slot.Registry{}, fmt.Errorf("slotstore: sending the heartbeat: %w", err)
	}
	jobs := slices.Clone(me.Names)
	if jobs == nil {
		for j := range me.Jobs {
			jobs = append(jobs, j)
		}
	}
	slices.Sort(jobs)
	cmds := s.batch(ctx, []call{
		{heartbeatScript, []string{s.registryKey()}, []any{me.ID, me.Instance, string(desc), stale.Milliseconds()}},
		{deploymentsScript, []string{DeploymentsKey}, []any{s.prefix, strings.Join(jobs, ","), stale.Milliseconds()}},
	})
	vals, err := cmds[0].Slice()
	if err != nil {
		return slot.Registry{}, fmt.Errorf("slotstore: sending the heartbeat: %w", err)
	}
	r := reply(vals)
	reg := slot.Registry{Now: time.UnixMilli(r.int(1))}
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
	if reg.Replicas, err = parseReplicas(vals[2:]); err != nil {
		return reg, fmt.Errorf("slotstore: sending the heartbeat: %w", err)
	}
	if dvals, err := cmds[1].Slice(); err == nil && len(dvals) > 0 {
		reg.Deployments = parseDeployments(dvals[1:])
	}
	return reg, nil
}

// Registry reads the deployment's live replicas (seen within stale) without
// publishing anything. One round trip.
func (s *Store) Registry(ctx context.Context, stale time.Duration) (slot.Registry, error) {
	pipe := s.rdb.Pipeline()
	now := pipe.Time(ctx)
	all := pipe.HGetAll(ctx, s.registryKey())
	if _, err := pipe.Exec(ctx); err != nil {
		return slot.Registry{}, fmt.Errorf("slotstore: reading the replica registry: %w", err)
	}
	reg := slot.Registry{Now: now.Val()}
	for id, v := range all.Val() {
		rep, err := parseReplica(id, v)
		if err != nil {
			return reg, fmt.Errorf("slotstore: reading the replica registry: %w", err)
		}
		if reg.Now.Sub(rep.Seen) < stale {
			reg.Replicas = append(reg.Replicas, rep)
		}
	}
	slices.SortFunc(reg.Replicas, func(a, b slot.Replica) int { return strings.Compare(a.ID, b.ID) })
	return reg, nil
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
	return slot.Replica{ID: id, Instance: inst, Version: d.Version, Started: time.UnixMilli(d.Started),
		Seen: time.UnixMilli(seen), Offset: time.Duration(d.OffsetNS), Jobs: d.Jobs, Table: table(d)}, nil
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
// stop counting it at their next heartbeat. One round trip.
func (s *Store) Leave(ctx context.Context, me slot.Replica) error {
	if err := leaveScript.Run(ctx, s.rdb, []string{s.registryKey()}, me.ID, me.Instance).Err(); err != nil {
		return fmt.Errorf("slotstore: leaving the registry: %w", err)
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
