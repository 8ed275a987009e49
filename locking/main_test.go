package locking_test

import (
	"testing"

	"github.com/slotcron/slotcron/internal/redistest"
)

// redisAddr is a server for the Example functions, which can't start their own.
var redisAddr string

func TestMain(m *testing.M) { redistest.Main(m, &redisAddr) }
