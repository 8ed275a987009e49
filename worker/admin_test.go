package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/slotcron/slotcron/internal/redistest"
	"github.com/slotcron/slotcron/slot"
	"github.com/slotcron/slotcron/slotstore"
)

// TestAdminEndpoints: pause and resume over HTTP need the bearer token from
// SLOTCRON_ADMIN_TOKEN, and are off without one; GET /jobs stays open. A
// pause's note longer than slot.MaxNote is refused with 400, and a form
// larger than maxAdminForm with 413.
func TestAdminEndpoints(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	store, err := slotstore.New(rdb, srv.Key("adm"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("config.yaml", []byte(minimal), registered)
	if err != nil {
		t.Fatal(err)
	}
	do := func(base, method, path, auth string, form url.Values) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	paused := func() bool {
		p, err := store.Pauses(context.Background(), []string{"lottery"})
		if err != nil {
			t.Fatal(err)
		}
		_, ok := p["lottery"]
		return ok
	}
	note := url.Values{"note": {"migration"}}

	off := httptest.NewServer(handler(rdb, nil, cfg, store, "", http.NotFoundHandler()))
	defer off.Close()
	if code, body := do(off.URL, "POST", "/admin/jobs/lottery/pause", "Bearer anything", note); code != http.StatusNotFound || !strings.Contains(body, "set SLOTCRON_ADMIN_TOKEN") || paused() {
		t.Fatalf("no token set: %d %q, paused %v", code, body, paused())
	}

	for _, action := range []string{"resume", "trigger"} {
		if code, _ := do(off.URL, "POST", "/admin/jobs/lottery/"+action, "Bearer anything", nil); code != http.StatusNotFound {
			t.Fatalf("no token set, %s: %d", action, code)
		}
	}

	on := httptest.NewServer(handler(rdb, nil, cfg, store, "s3cret", http.NotFoundHandler()))
	defer on.Close()
	for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret2", "Basic s3cret", "s3cret"} {
		if code, _ := do(on.URL, "POST", "/admin/jobs/lottery/pause", auth, note); code != http.StatusUnauthorized || paused() {
			t.Fatalf("Authorization %q: %d, paused %v; want 401 and no pause", auth, code, paused())
		}
		// The trigger's right-token case runs a job: TestTriggerCommand.
		if code, _ := do(on.URL, "POST", "/admin/jobs/lottery/trigger", auth, nil); code != http.StatusUnauthorized {
			t.Fatalf("Authorization %q, trigger: %d; want 401", auth, code)
		}
	}
	for _, key := range []string{"a b", ""} {
		if code, body := do(on.URL, "POST", "/admin/jobs/lottery/trigger", "Bearer s3cret", url.Values{"key": {key}}); code != http.StatusBadRequest {
			t.Fatalf("trigger with the key %q: %d %s; want 400", key, code, body)
		}
	}
	if code, _ := do(on.URL, "POST", "/admin/jobs/nope/pause", "Bearer s3cret", note); code != http.StatusNotFound {
		t.Fatalf("unknown job: %d", code)
	}
	long := url.Values{"note": {strings.Repeat("n", slot.MaxNote+1)}}
	if code, body := do(on.URL, "POST", "/admin/jobs/lottery/pause", "Bearer s3cret", long); code != http.StatusBadRequest ||
		!strings.Contains(body, "the note is 1025 bytes, more than 1024") || paused() {
		t.Fatalf("a note of %d bytes: %d %q, paused %v; want 400 and no pause", slot.MaxNote+1, code, body, paused())
	}
	// A body past the bound is refused whole, not read to 10 MB nor
	// taken in part: past 10 MB, FormValue would have given an empty note.
	big := url.Values{"note": {"migration"}, "pad": {strings.Repeat("x", 64<<10)}}
	for _, action := range []string{"pause", "trigger"} {
		if code, body := do(on.URL, "POST", "/admin/jobs/lottery/"+action, "Bearer s3cret", big); code != http.StatusRequestEntityTooLarge ||
			!strings.Contains(body, "the form is larger than 8192 bytes") || paused() {
			t.Fatalf("%s with a body of %d bytes: %d %q, paused %v; want 413 and no pause", action, len(big.Encode()), code, body, paused())
		}
	}
	// A body that is not a form (JSON, or no Content-Type) is refused: read
	// as no fields, a trigger's key would be dropped, each retry running
	// the job again as a new manual slot, and a pause's note lost.
	for _, action := range []string{"pause", "trigger"} {
		for _, ct := range []string{"application/json", ""} {
			req, _ := http.NewRequest("POST", on.URL+"/admin/jobs/lottery/"+action, strings.NewReader(`{"key":"redo-noon","note":"migration"}`))
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			req.Header.Set("Authorization", "Bearer s3cret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(body), "application/x-www-form-urlencoded") || paused() {
				t.Fatalf("%s with a body of Content-Type %q: %d %q, paused %v; want 415 and no pause", action, ct, resp.StatusCode, body, paused())
			}
		}
	}
	var multi bytes.Buffer
	mw := multipart.NewWriter(&multi)
	mw.WriteField("note", "migration")
	mw.WriteField("pad", strings.Repeat("x", 64<<10))
	mw.Close()
	req, _ := http.NewRequest("POST", on.URL+"/admin/jobs/lottery/pause", &multi)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || paused() {
		t.Fatalf("a multipart body of %d bytes: %v %v, paused %v; want 413 and no pause", multi.Len(), resp, err, paused())
	} else {
		resp.Body.Close()
	}
	if code, body := do(on.URL, "POST", "/admin/jobs/lottery/pause", "Bearer s3cret", note); code != http.StatusOK || !strings.Contains(body, `"changed":true`) || !paused() {
		t.Fatalf("right token: %d %q, paused %v", code, body, paused())
	}
	// Read-only, no token needed.
	code, body := do(on.URL, "GET", "/jobs", "", nil)
	var jobs []jobView
	if err := json.Unmarshal([]byte(body), &jobs); code != http.StatusOK || err != nil || len(jobs) != 1 || jobs[0].Paused == nil ||
		jobs[0].Paused.Note != "migration" || !strings.HasPrefix(jobs[0].Paused.By, "http 127.0.0.1:") {
		t.Fatalf("GET /jobs: %d %s (%v)", code, body, err)
	}
	// A second pause with no note (a click on a page whose note box was
	// emptied, a request sent again) leaves the standing pause as it is, as
	// worker pause does: it used to wipe its note and who asked. Found by
	// review.
	if code, body := do(on.URL, "POST", "/admin/jobs/lottery/pause", "Bearer s3cret", url.Values{"note": {""}}); code != http.StatusOK || !strings.Contains(body, `"changed":false`) {
		t.Fatalf("a second pause with no note: %d %q", code, body)
	}
	if p, err := store.Pauses(context.Background(), []string{"lottery"}); err != nil || p["lottery"].Note != "migration" || p["lottery"].By != jobs[0].Paused.By {
		t.Fatalf("after a second pause with no note, the pause is %+v (%v); want the first one's note and asker", p["lottery"], err)
	}
	if code, body := do(on.URL, "POST", "/admin/jobs/lottery/resume", "Bearer s3cret", nil); code != http.StatusOK || !strings.Contains(body, `"changed":true`) || paused() {
		t.Fatalf("resume: %d %q, paused %v", code, body, paused())
	}
}
