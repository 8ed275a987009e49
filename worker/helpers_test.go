package worker

import (
	"os"
	"reflect"
	"testing"

	"github.com/slotcron/slotcron/internal/redistest"
)

func TestMain(m *testing.M) {
	os.Unsetenv(PasswordEnv)
	redistest.Main(m, nil)
}

func reflectEqual(a, b any) bool { return reflect.DeepEqual(a, b) }
