package redistest

import (
	"strings"
	"testing"
	"time"
)

// TestContainerImageOverride: REDISTEST_IMAGE names the image, and a missing
// slotcron/ image fails at once with how to build it, instead of a pull that
// no registry answers.
func TestContainerImageOverride(t *testing.T) {
	t.Setenv("REDISTEST_IMAGE", "")
	if got := containerImage(); got != "slotcron/redis:7" {
		t.Fatalf("default image = %q", got)
	}
	t.Setenv("REDISTEST_IMAGE", "redis:7")
	if got := containerImage(); got != "redis:7" {
		t.Fatalf("REDISTEST_IMAGE=redis:7 gives %q", got)
	}
	if err := dockerAnswers(); err != nil {
		t.Fatalf("no Docker daemon answers (%v): install and start Docker (apt-get install docker.io)", err)
	}
	t.Setenv("REDISTEST_IMAGE", "slotcron/redis:no-such-tag")
	start := time.Now()
	_, err := startContainer()
	if err == nil {
		t.Fatal("a container started from an image that is not there")
	}
	for _, want := range []string{"slotcron/redis:no-such-tag", "deploy/images/build.sh redis", "REDISTEST_IMAGE=redis:7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the missing image took %v to report", d)
	}
}
