package slotstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slotcron/slotcron/slot"
)

// A slot's record is one Redis string (protocol 2; protocol 1 kept a hash):
//
//	<state> <fence> <attempt> <started> <finished> <at> <lease> <token> <run_id> <ref> <owner><error><result><by><note>
//
// The first ten are words, each followed by one space: numbers in decimal,
// times in ms on Redis's clock (0 for none), "-" for a word that has no
// value (a missed, skipped or paused slot has the token of the claim that
// recorded it, "-" when written before claims' tokens went into them; an
// abandoned one has the token of the takeover that recorded it, not the
// dead run's). lease is "job", "slot" or "-"; ref is
// the slot as the protocol names it (unix seconds, or "m:<id>" for a manual
// slot); at is when a manual slot was asked for (0 for a scheduled one). The
// last five are free text, each written "<length in bytes>:<bytes>", so that
// any text (a replica ID with spaces, an error with newlines) reads back as
// it was.
//
// A job's own Lua script can check that a run still owns its slot from the
// first two words: string.match(record, '^(%S+) (%S+) ') is the state and
// the fence. record_lib.lua builds records in the scripts; runFinal builds
// the one a finish writes.

// recordWords is the number of space-separated words before the free texts.
const recordWords = 10

// lp is one free-text field: "<length>:<text>".
func lp(b *strings.Builder, text string) {
	b.WriteString(strconv.Itoa(len(text)))
	b.WriteByte(':')
	b.WriteString(text)
}

// word is a record word: "-" for none.
func word(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// claimTail is the part of a won claim's record that the claimant knows
// before Redis answers: from the lease to the end. The claim script writes
// "running <fence> 1 <started> 0 <at> " in front of it.
func claimTail(kind, token, runID, ref, owner, by, note string) string {
	var b strings.Builder
	b.Grow(len(kind) + len(token) + len(runID) + len(ref) + len(owner) + len(by) + len(note) + 32)
	b.WriteString(kind)
	b.WriteByte(' ')
	b.WriteString(word(token))
	b.WriteByte(' ')
	b.WriteString(word(runID))
	b.WriteByte(' ')
	b.WriteString(ref)
	b.WriteByte(' ')
	lp(&b, owner)
	lp(&b, "")
	lp(&b, "")
	lp(&b, by)
	lp(&b, note)
	return b.String()
}

// runFinal is the record a finish writes, in two parts: the finish script
// writes head, then Redis's clock (finished), then tail. Every other field is
// the run's own, as its claim recorded it.
func (l *lease) runFinal(state slot.State, errText, result string) (head, tail string) {
	var b strings.Builder
	b.WriteString(string(state))
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(l.fence, 10))
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(l.attempt))
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(l.started, 10))
	b.WriteByte(' ')
	head = b.String()
	b.Reset()
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(l.at, 10))
	b.WriteByte(' ')
	b.WriteString(l.kind())
	b.WriteByte(' ')
	b.WriteString(word(l.token))
	b.WriteByte(' ')
	b.WriteString(word(l.runID))
	b.WriteByte(' ')
	b.WriteString(l.ref)
	b.WriteByte(' ')
	lp(&b, l.replica)
	lp(&b, errText)
	lp(&b, result)
	lp(&b, l.by)
	lp(&b, l.note)
	return head, b.String()
}

// rawRecord is a record's fields as stored.
type rawRecord struct {
	state, fence, attempt, started, finished, at, lease, token, runID, ref string
	owner, err, result, by, note                                           string
}

var errMalformed = errors.New("malformed slot record")

// parseRaw reads a record string.
func parseRaw(v string) (rawRecord, error) {
	var w [recordWords]string
	rest := v
	for i := range w {
		var ok bool
		if w[i], rest, ok = strings.Cut(rest, " "); !ok {
			return rawRecord{}, fmt.Errorf("%w: %d words, want %d: %.80q", errMalformed, i, recordWords, v)
		}
	}
	var t [5]string
	for i := range t {
		n, after, ok := strings.Cut(rest, ":")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size < 0 || size > len(after) {
			return rawRecord{}, fmt.Errorf("%w: text field %d: %.80q", errMalformed, i+1, v)
		}
		t[i], rest = after[:size], after[size:]
	}
	if rest != "" {
		return rawRecord{}, fmt.Errorf("%w: %d bytes after the last field: %.80q", errMalformed, len(rest), v)
	}
	none := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	return rawRecord{state: w[0], fence: w[1], attempt: w[2], started: w[3], finished: w[4], at: w[5],
		lease: none(w[6]), token: none(w[7]), runID: none(w[8]), ref: w[9],
		owner: t[0], err: t[1], result: t[2], by: t[3], note: t[4]}, nil
}

// parseRecord reads a record string of job's slot into a slot.Record.
func parseRecord(job, v string) (slot.Record, error) {
	r, err := parseRaw(v)
	if err != nil {
		return slot.Record{}, err
	}
	ms := func(s string) time.Time {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n == 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	attempt, _ := strconv.Atoi(r.attempt)
	fence, _ := strconv.ParseInt(r.fence, 10, 64)
	rec := slot.Record{Job: job, State: slot.State(r.state), Owner: r.owner, Attempt: attempt, Fence: fence,
		Started: ms(r.started), Finished: ms(r.finished), Error: r.err, RunID: r.runID, Result: r.result}
	if id, ok := strings.CutPrefix(r.ref, manualRef("")); ok {
		rec.Slot = ms(r.at)
		rec.Manual = &slot.Manual{ID: id, By: r.by, Note: r.note}
	} else {
		unix, err := strconv.ParseInt(r.ref, 10, 64)
		if err != nil {
			return slot.Record{}, fmt.Errorf("%w: slot %q", errMalformed, r.ref)
		}
		rec.Slot = time.Unix(unix, 0)
		switch {
		case r.by == "" && r.note == "":
		case rec.State == slot.StateMissed, rec.State == slot.StateSkipped, rec.State == slot.StatePaused:
			// by and note are the claim's, or the pause's
		default: // a backfill's run of a slot recorded missed: by and note are the missed record's
			rec.Missed = &slot.Missed{By: r.by, Reason: r.note}
		}
	}
	return rec, nil
}

// parseRecordV1 reads a protocol-1 record (a hash) of job's slot at (unix
// seconds; 0 for a manual slot's).
func parseRecordV1(job string, at int64, h map[string]string) slot.Record {
	ms := func(k string) time.Time {
		n, err := strconv.ParseInt(h[k], 10, 64)
		if err != nil || n == 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	attempt, _ := strconv.Atoi(h["attempt"])
	fence, _ := strconv.ParseInt(h["fence"], 10, 64)
	rec := slot.Record{
		Job: job, Slot: time.Unix(at, 0), State: slot.State(h["state"]), Owner: h["owner"],
		Attempt: attempt, Fence: fence, Started: ms("started"), Finished: ms("finished"), Error: h["error"], RunID: h["run_id"], Result: h["result"],
	}
	if h["kind"] == "manual" {
		rec.Slot = ms("at")
		rec.Manual = &slot.Manual{ID: strings.TrimPrefix(h["slot"], manualRef("")), By: h["by"], Note: h["note"]}
	}
	return rec
}
