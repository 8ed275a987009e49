package worker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slotstore"
)

// AlertsConfig sends events to webhooks: see the README's "Alerts".
type AlertsConfig struct {
	// Webhooks are the URLs each event is POSTed to, as JSON.
	Webhooks []string `yaml:"webhooks"`
	// Events are the kinds sent (scheduler.EventKinds). Default: all.
	Events []string `yaml:"events"`
	// SecretEnv names the environment variable that holds the HMAC-SHA256
	// key the payloads are signed with. It must be set where webhooks are.
	SecretEnv string `yaml:"secret_env"`
	// Timeout bounds one POST. Default 5s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxAttempts bounds the attempts of one delivery; then it is recorded
	// failed and logged at ERROR. Default 10.
	MaxAttempts int `yaml:"max_attempts"`
}

// DefaultWebhookSecretEnv is alerts.secret_env's default.
const DefaultWebhookSecretEnv = "SLOTCRON_WEBHOOK_SECRET"

// alertPayload is the JSON body of a webhook POST.
type alertPayload struct {
	ID         string    `json:"id"`    // the event's: the same from every replica
	Event      string    `json:"event"` // failed, missed, abandoned, lease_lost, drift, data_loss, paused
	Deployment string    `json:"deployment"`
	Job        string    `json:"job,omitempty"`
	Slot       string    `json:"slot,omitempty"` // RFC 3339
	Manual     string    `json:"manual_id,omitempty"`
	Replica    string    `json:"replica"` // the replica that recorded it
	RunID      string    `json:"run_id,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`
	Fence      int64     `json:"fence,omitempty"`
	Error      string    `json:"error,omitempty"`
	Result     string    `json:"result,omitempty"`
	At         time.Time `json:"at"`
}

// The headers of a webhook POST. The signature is
// "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body)), where
// timestamp is the X-Slotcron-Timestamp header (unix seconds): a receiver
// recomputes it, compares in constant time, and refuses old timestamps.
const (
	HeaderSignature = "X-Slotcron-Signature"
	HeaderTimestamp = "X-Slotcron-Timestamp"
	HeaderEvent     = "X-Slotcron-Event"
	HeaderDelivery  = "X-Slotcron-Delivery" // the delivery's ID: the same on every attempt
)

// Sign returns the X-Slotcron-Signature of body sent at timestamp.
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte("."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// alerter forwards the scheduler's events to the webhooks, through the
// outbox in Redis: each event is added once across the deployment, sent by
// the replica that added it (another takes over if that one dies first),
// retried with backoff, and never sent again once delivered.
type alerter struct {
	cfg     AlertsConfig
	secret  []byte
	store   *slotstore.Store
	self    string // this sender: the replica ID and a per-process nonce
	prefix  string
	kinds   map[string]bool
	log     *slog.Logger
	client  *http.Client
	events  chan scheduler.Event
	wake    chan struct{}
	counter metric.Int64Counter
	// carried are the events loop took but could not add before it stopped:
	// flush adds them, on a context of its own. Written by loop, read by
	// flush once loop has returned.
	carried []scheduler.Event
	// backoff is the wait before attempt n+1; a test shortens it.
	backoff func(n int) time.Duration
}

// noCounter counts nothing: for a command that only adds to the outbox.
var noCounter, _ = noop.NewMeterProvider().Meter("").Int64Counter("")

// alertHold is how long a sender holds a delivery: the one that added it,
// before another may send it; the one that took it, for an attempt.
const alertHold = 30 * time.Second

// maxAlertTimeout is the longest alerts.timeout: one POST, then the record of
// its outcome (at most 5s), must end within alertHold.
const maxAlertTimeout = 20 * time.Second

func newAlerter(cfg *Config, store *slotstore.Store, secret []byte, log *slog.Logger, mp metric.MeterProvider) (*alerter, error) {
	a := &alerter{cfg: cfg.Alerts, secret: secret, store: store, self: cfg.ReplicaID + "/" + randomHex(6), prefix: cfg.Redis.KeyPrefix,
		kinds: map[string]bool{}, log: log, client: webhookClient(cfg.Alerts.Timeout),
		events: make(chan scheduler.Event, 1024), wake: make(chan struct{}, 1),
		backoff: func(n int) time.Duration { return min(time.Second<<min(n, 9), 5*time.Minute) }}
	for _, k := range cfg.Alerts.Events {
		a.kinds[k] = true
	}
	var err error
	a.counter, err = mp.Meter("github.com/slotcron/slotcron/worker").Int64Counter("slotcron.alerts",
		metric.WithDescription("Webhook deliveries, by event and result: added, delivered, retry, failed, dropped (the outbox could not take it)"))
	return a, err
}

// hook is the scheduler's event hook: it hands the event to the alerter's
// goroutine and returns at once.
func (a *alerter) hook(e scheduler.Event) {
	if !a.kinds[string(e.Kind)] {
		return
	}
	select {
	case a.events <- e:
	default:
		a.count(string(e.Kind), "dropped")
		a.log.Error("alert dropped: the outbox is not keeping up (is Redis down?)", "event", string(e.Kind), "id", e.ID)
	}
}

func (a *alerter) count(event, result string) {
	a.counter.Add(context.Background(), 1, metric.WithAttributes(attribute.String("event", event), attribute.String("result", result)))
}

// deliveryID names the delivery of event id to url.
func deliveryID(id, url string) string {
	sum := sha256.Sum256([]byte(url))
	return hex.EncodeToString(sum[:4]) + ":" + id
}

// add puts e in the outbox, once per webhook, for this sender to send first.
func (a *alerter) add(ctx context.Context, e scheduler.Event, hold time.Duration) error {
	p := alertPayload{ID: e.ID, Event: string(e.Kind), Deployment: a.prefix, Job: e.Job, Manual: e.Manual, Replica: e.Replica,
		RunID: e.RunID, Attempt: e.Attempt, Fence: e.Fence, Error: e.Error, Result: e.Result, At: e.At.UTC()}
	if !e.Slot.IsZero() {
		p.Slot = e.Slot.UTC().Format(time.RFC3339)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	for _, url := range a.cfg.Webhooks {
		added, err := a.store.AddDelivery(ctx, deliveryID(e.ID, url), a.self, string(body), url, hold)
		if err != nil {
			return err
		}
		if added {
			a.count(string(e.Kind), "added")
		}
	}
	return nil
}

// loop adds the events it is handed to the outbox and sends what is due,
// until ctx ends: its own deliveries at once, anyone's whose sender let
// them lapse, each again after its backoff.
func (a *alerter) loop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-a.events:
			for tries := 0; ; tries++ {
				err := a.add(ctx, e, alertHold)
				if err == nil {
					break
				}
				if ctx.Err() != nil { // the stop cut the add off: flush adds it
					a.carried = append(a.carried, e)
					return
				}
				a.log.Warn("cannot add an alert to the outbox; retrying", "event", string(e.Kind), "id", e.ID, "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(min(time.Second<<min(tries, 5), 30*time.Second)):
				}
			}
		case <-tick.C:
		case <-a.wake:
		}
		a.sendDue(ctx)
	}
}

// sendDue sends the deliveries that are due and this sender may take.
func (a *alerter) sendDue(ctx context.Context) {
	ids, err := a.store.DueDeliveries(ctx, 50)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("cannot read the alert outbox", "error", err)
		}
		return
	}
	for _, id := range ids {
		d, ok, err := a.store.TakeDelivery(ctx, id, a.self, alertHold)
		if err != nil || !ok {
			continue
		}
		a.send(ctx, d)
	}
}

// send makes one attempt at d and settles it.
func (a *alerter) send(ctx context.Context, d slotstore.Delivery) {
	var p alertPayload
	_ = json.Unmarshal([]byte(d.Payload), &p)
	err := a.post(ctx, d, p.Event)
	result, wait := slotstore.Delivered, time.Duration(0)
	text := ""
	switch {
	case err == nil:
		a.log.Info("alert delivered", "event", p.Event, "id", p.ID, "url", d.URL, "attempt", d.Attempts+1)
	case d.Attempts+1 >= a.cfg.MaxAttempts:
		result, text = slotstore.Failed, err.Error()
		a.log.Error("alert failed: giving up after max_attempts", "event", p.Event, "id", p.ID, "url", d.URL,
			"attempts", d.Attempts+1, "error", err)
	default:
		result, wait, text = slotstore.Retry, a.backoff(d.Attempts), err.Error()
		a.log.Warn("alert not delivered; retrying", "event", p.Event, "id", p.ID, "url", d.URL,
			"attempt", d.Attempts+1, "retry_in", wait.String(), "error", err)
	}
	a.count(p.Event, string(result))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ok, err := a.store.DeliveryDone(sctx, d.ID, a.self, result, wait, alertHold, text); err != nil || !ok {
		a.log.Warn("cannot record an alert delivery's outcome; it may be sent again", "id", p.ID, "held", ok, "error", err)
	}
}

// webhookClient is the client that posts alerts. It follows no redirect: Go's
// client would send a 301, 302 or 303's POST again as a GET with no body,
// and a 2xx to that GET would count the alert delivered though its payload
// never arrived. A 3xx is a failed attempt, which says where it points.
func webhookClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// post sends d's payload, an event of kind event, signed; any answer but
// 2xx is an error.
func (a *alerter) post(ctx context.Context, d slotstore.Delivery, event string) error {
	body := []byte(d.Payload)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "slotcron-webhook")
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, Sign(a.secret, ts, body))
	req.Header.Set(HeaderEvent, event)
	req.Header.Set(HeaderDelivery, d.ID)
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 3 {
		return fmt.Errorf("the webhook answered %s to %s: redirects are not followed (the payload would not be sent again); set alerts.webhooks to the URL it names",
			resp.Status, resp.Header.Get("Location"))
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}

// randomHex returns n random bytes, hex-encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// webhookSecret returns the webhooks' signing key from alerts.secret_env,
// or an error when webhooks are configured and it is unset.
func webhookSecret(cfg *Config) ([]byte, error) {
	if len(cfg.Alerts.Webhooks) == 0 {
		return nil, nil
	}
	s := os.Getenv(cfg.Alerts.SecretEnv)
	if s == "" {
		return nil, fmt.Errorf("alerts.webhooks are set, but %s (alerts.secret_env) is empty: set it to the key the webhooks' payloads are signed with", cfg.Alerts.SecretEnv)
	}
	return []byte(s), nil
}

// flush adds the events still waiting in the alerter to the outbox, for any
// replica to send at once: this one is stopping.
func (a *alerter) flush(ctx context.Context) {
	add := func(e scheduler.Event) {
		if err := a.add(ctx, e, 0); err != nil {
			a.count(string(e.Kind), "dropped")
			a.log.Error("alert lost at shutdown: it could not be added to the outbox", "event", string(e.Kind), "id", e.ID, "error", err)
		}
	}
	for _, e := range a.carried {
		add(e)
	}
	a.carried = nil
	for {
		select {
		case e := <-a.events:
			add(e)
		default:
			return
		}
	}
}

// addPaused adds a "paused" event to the outbox, for any replica to send: a
// pause's alert, named by the time the pause began on Redis's clock (since),
// so that it is added once however often the pause is asked for while it
// stands.
func addPaused(ctx context.Context, cfg *Config, store *slotstore.Store, job, note, by string, at time.Time) error {
	if len(cfg.Alerts.Webhooks) == 0 || !slices.Contains(cfg.Alerts.Events, string(scheduler.EventPaused)) {
		return nil
	}
	a := &alerter{cfg: cfg.Alerts, store: store, self: by, prefix: cfg.Redis.KeyPrefix, counter: noCounter}
	return a.add(ctx, scheduler.Event{ID: job + "/paused/" + strconv.FormatInt(at.UnixMilli(), 10), Kind: scheduler.EventPaused,
		Job: job, Replica: by, Error: "paused by " + by + ": " + note, At: at}, 0)
}
