package worker

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

//go:embed dashboard/index.html dashboard/style.css
var dashboardFiles embed.FS

var (
	dashboardPage = template.Must(template.ParseFS(dashboardFiles, "dashboard/index.html"))
	dashboardCSS  = func() template.CSS {
		b, _ := dashboardFiles.ReadFile("dashboard/style.css")
		return template.CSS(b)
	}()
)

// dashboardRecords is how many slot records the dashboard shows per job.
const dashboardRecords = 20

type dashboardData struct {
	Prefix   string
	Now      time.Time
	CSS      template.CSS
	Error    string
	Replicas []replicaRow
	Jobs     []dashboardJob
}

type dashboardJob struct {
	Name, Schedule, Overlap, Catchup, OnOwnerLost string
	MisfireGrace                                  time.Duration
	Next                                          []time.Time
	Paused                                        *slot.Pause
	Holder                                        string
	HolderSlot                                    time.Time
	HolderTTL                                     time.Duration
	Records                                       []dashboardRecord
}

type dashboardRecord struct {
	slot.Record
	Delay, Duration string
	Text            string // the error, or else the result
	TraceShort      string
	TraceURL        string
}

// dashboard serves the page at /: jobs with their schedule, next slots,
// policies, pause and lease; each job's last 20 slot records; the live
// replicas. It is rendered on the server, from the same store reads as
// worker status, and refreshes itself every 5s. uiURL, when set (Jaeger's
// UI), links each slot to its trace.
func dashboard(cfg *Config, store *slotstore.Store, uiURL string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		data := dashboardData{Prefix: cfg.Redis.KeyPrefix, Now: time.Now(), CSS: dashboardCSS}
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
		d := dashboardJob{Name: j.Name, Schedule: j.Schedule, Overlap: string(j.Overlap), Catchup: string(j.Catchup),
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
		recs, err := store.Records(ctx, j.Name, dashboardRecords)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			dr := dashboardRecord{Record: rec, Delay: "-", Duration: duration(rec), Text: resultOrError(rec)}
			if !rec.Started.IsZero() {
				dr.Delay = rec.Started.Sub(rec.Slot).Round(time.Millisecond).String()
			}
			trace := scheduler.RecordTraceID(cfg.Redis.KeyPrefix, rec).String()
			dr.TraceShort = trace[:8]
			if uiURL != "" {
				dr.TraceURL = strings.TrimSuffix(uiURL, "/") + "/trace/" + trace
			}
			d.Records = append(d.Records, dr)
		}
		out[i] = d
	}
	return out, nil
}
