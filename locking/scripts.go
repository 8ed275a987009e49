package locking

import (
	"embed"
	"io/fs"

	"github.com/redis/go-redis/v9"

	"github.com/slotcron/slotcron/internal/rediskit"
)

// The scripts, one per operation. Each file starts with a header that states
// its KEYS, ARGV and what it returns. Script.Run sends EVALSHA and falls back to
// EVAL when the server does not have the script cached.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

var scriptDir, _ = fs.Sub(scriptFiles, "scripts")

// loadScript returns the script in file name, with the files in prepend
// (shared helpers) in front of it.
func loadScript(name string, prepend ...string) *redis.Script {
	return rediskit.Script(scriptDir, name, prepend...)
}

var (
	obtainScript  = loadScript("obtain.lua")
	releaseScript = loadScript("release.lua", "receipt_lib.lua")
	extendScript  = loadScript("extend.lua")
	pttlScript    = loadScript("pttl.lua")

	reentrantLockScript   = loadScript("reentrant_lock.lua")
	reentrantUnlockScript = loadScript("reentrant_unlock.lua", "receipt_lib.lua")
	reentrantExtendScript = loadScript("reentrant_extend.lua")
	reentrantPTTLScript   = loadScript("reentrant_pttl.lua")

	rwRLockScript  = loadScript("rw_rlock.lua", "rw_lib.lua")
	rwWLockScript  = loadScript("rw_wlock.lua", "rw_lib.lua")
	rwUnlockScript = loadScript("rw_unlock.lua", "rw_lib.lua", "receipt_lib.lua")
	rwExtendScript = loadScript("rw_extend.lua", "rw_lib.lua")
	rwPTTLScript   = loadScript("rw_pttl.lua", "rw_lib.lua")
	rwUnwaitScript = loadScript("rw_unwait.lua", "rw_lib.lua")
)
