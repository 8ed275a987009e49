package worker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotcron/slotcron/slotstore"
)

// TestAWebhookThatRedirectsIsNotDelivered: a webhook answers its POST with
// a redirect (http to https, /hook to /hook/), and its target answers 2xx.
// Go's client followed it, sending the POST again as a GET with no body, and
// the alert was recorded delivered though its payload never arrived, never
// to be sent again. A redirect is now a failed attempt that names where it
// points. Found by review.
func TestAWebhookThatRedirectsIsNotDelivered(t *testing.T) {
	var posts, gets atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/hook/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/hook/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		} else {
			gets.Add(1)
		}
	})
	recv := httptest.NewServer(mux)
	defer recv.Close()
	a := &alerter{secret: []byte("s"), client: webhookClient(5 * time.Second)}
	err := a.post(context.Background(), slotstore.Delivery{ID: "lottery/failed/1", URL: recv.URL + "/hook", Payload: `{"kind":"failed"}`}, "failed")
	if err == nil {
		t.Fatalf("post to a webhook that redirects: no error (the target got %d POSTs, %d GETs): the alert would be recorded delivered", posts.Load(), gets.Load())
	}
	if !strings.Contains(err.Error(), "301") || !strings.Contains(err.Error(), "/hook/") {
		t.Errorf("the error does not say the webhook redirected, and where to: %v", err)
	}
	if n := posts.Load() + gets.Load(); n != 0 {
		t.Errorf("the redirect was followed: %d requests reached its target", n)
	}
}
