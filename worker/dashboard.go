package worker

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

//go:embed dashboard/index.html dashboard/style.css dashboard/admin.js
var dashboardFiles embed.FS

var (
	dashboardPage = template.Must(template.ParseFS(dashboardFiles, "dashboard/index.html"))
	dashboardCSS  = func() template.CSS {
		b, _ := dashboardFiles.ReadFile("dashboard/style.css")
		return template.CSS(b)
	}()
	dashboardJS = func() template.JS {
		b, _ := dashboardFiles.ReadFile("dashboard/admin.js")
		return template.JS(b)
	}()
)

// dashboardRecords is how many slot records the dashboard shows per job.
const dashboardRecords = 20

type dashboardData struct {
	Admin    bool // the admin endpoints are on: Run now, Pause and Resume are offered
	Refresh  int  // the page reloads itself every this many seconds; 0: never
	Prefix   string
	Now      time.Time
	CSS      template.CSS
	JS       template.JS
	Error    string
	Replicas []replicaRow
	Jobs     []dashboardJob
}

type dashboardJob struct {
	Name, Schedule, Words, Overlap, Catchup, OnOwnerLost string
	MisfireGrace                                         time.Duration
	Next                                                 []time.Time
	Paused                                               *slot.Pause
	Holder                                               string
	HolderSlot                                           time.Time
	HolderTTL                                            time.Duration
	Turn                                                 string // no run holds the job: the replica whose retry has its turn
	TurnSlot                                             time.Time
	TurnTTL                                              time.Duration
	Records                                              []dashboardRecord
}

type dashboardRecord struct {
	slot.Record
	Delay, Duration string
	Text            string // the error, or else the result
	TraceShort      string
	RunIDShort      string // the run ID's random end, which tells runs apart (the start is a timestamp)
	TraceURL        string
}

// dashboard serves the page at /: jobs with their schedule (and in words),
// next slots, policies, pause and lease; each job's last 20 slot records;
// the live replicas. It is rendered on the server, from the same store
// reads as worker status, and refreshes itself every 5s (?refresh=N: every N
// seconds, 0 for never, as a screenshot or a slow reader wants). uiURL, when set
// (Jaeger's UI), links each slot to its trace. With admin, each job has Run
// now, Pause and Resume buttons, which call the admin endpoints with the
// token the user types into the page (kept in the tab's sessionStorage).
func dashboard(cfg *Config, store *slotstore.Store, uiURL string, admin bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		data := dashboardData{Admin: admin, Refresh: 5, Prefix: cfg.Redis.KeyPrefix, Now: time.Now(), CSS: dashboardCSS, JS: dashboardJS}
		if v := r.URL.Query().Get("refresh"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 3600 {
				http.Error(w, fmt.Sprintf("refresh=%q: give a whole number of seconds from 0 (never) to 3600", v), http.StatusBadRequest)
				return
			}
			data.Refresh = n
		}
		var err error
		if data.Replicas, err = replicaRows(ctx, store); err == nil {
			data.Jobs, err = dashboardJobs(ctx, cfg, store, uiURL)
		}
		if err != nil {
			data.Error = "Redis: " + err.Error()
		}
		var b bytes.Buffer
		if err := dashboardPage.Execute(&b, data); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if data.Error != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		w.Write(b.Bytes())
	}
}

func dashboardJobs(ctx context.Context, cfg *Config, store *slotstore.Store, uiURL string) ([]dashboardJob, error) {
	names := make([]string, len(cfg.Jobs))
	for i, jc := range cfg.Jobs {
		names[i] = jc.Name
	}
	pauses, err := store.Pauses(ctx, names)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]dashboardJob, len(cfg.Jobs))
	for i, jc := range cfg.Jobs {
		j := jc.schedulerJob().WithDefaults(cfg.Lease.TTL)
		d := dashboardJob{Name: j.Name, Schedule: j.Schedule, Words: describeSchedule(j.Schedule), Overlap: string(j.Overlap), Catchup: string(j.Catchup),
			OnOwnerLost: string(j.OnOwnerLost), MisfireGrace: j.MisfireGrace}
		if sched, err := scheduler.ParseSchedule(j.Schedule); err == nil {
			for t := sched.Next(now); !t.IsZero() && len(d.Next) < 3; t = sched.Next(t) {
				d.Next = append(d.Next, t)
			}
		}
		if p, ok := pauses[j.Name]; ok {
			d.Paused = &p
		}
		if d.Holder, d.HolderSlot, d.HolderTTL, err = store.Holder(ctx, j.Name); err != nil {
			return nil, err
		}
		d.HolderTTL = d.HolderTTL.Round(time.Millisecond)
		if d.Holder == "" {
			if d.Turn, d.TurnSlot, d.TurnTTL, err = store.Turn(ctx, j.Name); err != nil {
				return nil, err
			}
			d.TurnTTL = d.TurnTTL.Round(time.Millisecond)
		}
		recs, err := store.Records(ctx, j.Name, dashboardRecords)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			dr := dashboardRecord{Record: rec, Delay: "-", Duration: duration(rec), Text: resultOrError(rec)}
			if n := len(rec.RunID); n > 12 {
				dr.RunIDShort = "…" + rec.RunID[n-12:]
			}
			if !rec.Started.IsZero() {
				dr.Delay = rec.Started.Sub(rec.Slot).Round(time.Millisecond).String()
			}
			trace := scheduler.RecordTraceID(cfg.Redis.KeyPrefix, rec).String()
			dr.TraceShort = trace[:8]
			if uiURL != "" {
				// uiFind opens every replica's root span (only they carry
				// slotcron.job): who each one is, and whom it lost to.
				dr.TraceURL = strings.TrimSuffix(uiURL, "/") + "/trace/" + trace + "?uiFind=slotcron.job"
			}
			d.Records = append(d.Records, dr)
		}
		out[i] = d
	}
	return out, nil
}
