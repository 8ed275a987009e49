package slotstore_test

import (
	"testing"

	"github.com/slotcron/slotcron/internal/redistest"
)

// TestMain fails the package if a goroutine outlives its tests.
func TestMain(m *testing.M) { redistest.Main(m, nil) }
