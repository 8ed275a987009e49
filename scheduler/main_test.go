package scheduler_test

import (
	"testing"

	"github.com/slotcron/slotcron/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }
