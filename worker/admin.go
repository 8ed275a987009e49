package worker

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// AdminTokenEnv is the environment variable that holds the bearer token of
// the admin endpoints (POST /admin/jobs/{job}/trigger, /pause and /resume).
// Unset or empty, they are off: they answer 404 and change nothing.
const AdminTokenEnv = "SLOTCRON_ADMIN_TOKEN"

// jobView is a job as GET /jobs shows it.
type jobView struct {
	Name     string     `json:"name"`
	Schedule string     `json:"schedule"`
	Paused   *pauseView `json:"paused"` // null when the job runs
}

type pauseView struct {
	Note string    `json:"note"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
}

// adminRoutes adds GET /jobs (read-only, open: each job and its pause) and,
// behind a bearer token, POST /admin/jobs/{job}/pause (form field note),
// POST /admin/jobs/{job}/resume and POST /admin/jobs/{job}/trigger (form
// fields note and key: a manual slot, claimed by this replica's scheduler;
// see scheduler.Trigger).
func adminRoutes(mux *http.ServeMux, cfg *Config, store *slotstore.Store, s *scheduler.Scheduler, token string) {
	names := make([]string, len(cfg.Jobs))
	schedules := map[string]string{}
	for i, jc := range cfg.Jobs {
		names[i], schedules[jc.Name] = jc.Name, jc.Schedule
	}
	mux.HandleFunc("GET /jobs", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		pauses, err := store.Pauses(ctx, names)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		out := make([]jobView, len(names))
		for i, n := range names {
			out[i] = jobView{Name: n, Schedule: schedules[n]}
			if p, ok := pauses[n]; ok {
				out[i].Paused = &pauseView{Note: p.Note, By: p.By, At: p.At.UTC()}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	want := sha256.Sum256([]byte(token))
	admin := func(action string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if token == "" {
				http.Error(w, "admin endpoints are off: set "+AdminTokenEnv+" on the worker to turn them on", http.StatusNotFound)
				return
			}
			// Hashes of equal length: the comparison's time says nothing of
			// the token, not even its length.
			got := sha256.Sum256([]byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
			if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="slotcron admin"`)
				http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
				return
			}
			if !readForm(w, r) {
				return
			}
			job := r.PathValue("job")
			if _, ok := schedules[job]; !ok {
				http.Error(w, fmt.Sprintf("no job %q in the cron table", job), http.StatusNotFound)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			if action == "trigger" {
				trigger(ctx, w, r, s, store, job)
				return
			}
			var changed bool
			var err error
			if action == "pause" {
				note := r.FormValue("note")
				if err := slot.CheckNote("the note", note); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				var p pauseOutcome
				p, err = pauseJob(ctx, cfg, store, job, note, "http "+r.RemoteAddr)
				changed = p.changed
			} else {
				changed, err = store.Resume(ctx, job)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"job": job, "action": action, "changed": changed})
		}
	}
	mux.HandleFunc("POST /admin/jobs/{job}/pause", admin("pause"))
	mux.HandleFunc("POST /admin/jobs/{job}/resume", admin("resume"))
	mux.HandleFunc("POST /admin/jobs/{job}/trigger", admin("trigger"))
}

// maxAdminForm bounds an admin request's form: a key, and a note of
// slot.MaxNote bytes even if every byte is escaped (3 each), fit.
const maxAdminForm = 8 << 10

// readForm reads r's form, at most maxAdminForm bytes of it, and answers
// 413 or 400 and returns false when it cannot: a form read in part would
// be taken with fields missing (FormValue hides the error).
func readForm(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength != 0 { // a body (-1: of unknown length) must be a form: another is read as no fields
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if ct != "application/x-www-form-urlencoded" && ct != "multipart/form-data" {
			http.Error(w, fmt.Sprintf("the body's Content-Type is %q: send the fields (key, note) as a form, application/x-www-form-urlencoded "+
				"or multipart/form-data (curl -d key=...), or in the query string with no body", r.Header.Get("Content-Type")),
				http.StatusUnsupportedMediaType)
			return false
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxAdminForm)
	err := r.ParseForm() // first: ParseMultipartForm drops its error when the form is not multipart
	if err == nil {
		if err = r.ParseMultipartForm(maxAdminForm); errors.Is(err, http.ErrNotMultipart) {
			err = nil
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		http.Error(w, fmt.Sprintf("the form is larger than %d bytes", maxAdminForm), http.StatusRequestEntityTooLarge)
		return false
	case err != nil:
		http.Error(w, "the form cannot be read: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// triggerView is the answer to POST /admin/jobs/{job}/trigger.
type triggerView struct {
	Job     string    `json:"job"`
	ID      string    `json:"id"`      // the manual slot's ID: the key, or a new UUIDv7
	Outcome string    `json:"outcome"` // won: this replica runs it; lost: it has a record; skipped; paused
	Replica string    `json:"replica"` // the replica that answered
	Holder  string    `json:"holder,omitempty"`
	State   string    `json:"state,omitempty"`
	RunID   string    `json:"run_id,omitempty"` // won: this run's; lost: the record's, if it started
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"` // the manual slot's time: this request's, or (lost) the record's
}

// trigger asks this replica's scheduler for a manual slot of job. A key
// that has a record (lost) is answered with the record's run ID and time,
// when it can be read.
func trigger(ctx context.Context, w http.ResponseWriter, r *http.Request, s *scheduler.Scheduler, store *slotstore.Store, job string) {
	m := slot.Manual{ID: r.FormValue("key"), Note: r.FormValue("note"), By: "http " + r.RemoteAddr}
	if _, given := r.Form["key"]; given || m.ID != "" { // key= (an unset variable) is no key: refused, not a new slot
		if err := slot.CheckManualID(m.ID); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	if err := slot.CheckNote("the note", m.Note); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s == nil {
		http.Error(w, "trigger: this server runs no scheduler", http.StatusServiceUnavailable)
		return
	}
	t, err := s.Trigger(ctx, job, m)
	if err != nil {
		http.Error(w, "trigger: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	v := triggerView{Job: job, ID: t.Manual.ID, Outcome: string(t.Outcome), Replica: s.ReplicaID(),
		Holder: t.Holder, State: string(t.State), RunID: t.RunID, Reason: t.Reason, At: t.Slot.UTC()}
	if t.Outcome == slot.OutcomeLost {
		if rec, ok, err := store.ManualRecord(ctx, job, t.Manual.ID); err == nil && ok {
			v.RunID, v.At = rec.RunID, rec.Slot.UTC()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
