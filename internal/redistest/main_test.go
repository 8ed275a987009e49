package redistest

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(runMain(m, nil)) }
