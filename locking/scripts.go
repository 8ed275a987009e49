package locking

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The scripts, one per operation. Each file starts with a header that states
// its KEYS, ARGV and what it returns. Script.Run sends EVALSHA and falls back to
// EVAL when the server does not have the script cached.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// loadScript returns the script in file name, with the files in prepend
// (shared helpers) in front of it.
func loadScript(name string, prepend ...string) *redis.Script {
	return redis.NewScript(scriptSource(name, prepend...))
}

func scriptSource(name string, prepend ...string) string {
	var src []byte
	for _, f := range append(prepend, name) {
		b, err := scriptFiles.ReadFile("scripts/" + f)
		if err != nil {
			panic("locking: missing embedded script " + f) // a build error in disguise
		}
		src = append(append(src, b...), '\n')
	}
	return string(src)
}

var (
	obtainScript  = loadScript("obtain.lua")
	releaseScript = loadScript("release.lua")
	extendScript  = loadScript("extend.lua")
	pttlScript    = loadScript("pttl.lua")

	reentrantLockScript   = loadScript("reentrant_lock.lua")
	reentrantUnlockScript = loadScript("reentrant_unlock.lua")
	reentrantExtendScript = loadScript("reentrant_extend.lua")
	reentrantPTTLScript   = loadScript("reentrant_pttl.lua")

	rwRLockScript  = loadScript("rw_rlock.lua", "rw_lib.lua")
	rwWLockScript  = loadScript("rw_wlock.lua", "rw_lib.lua")
	rwUnlockScript = loadScript("rw_unlock.lua", "rw_lib.lua")
	rwExtendScript = loadScript("rw_extend.lua", "rw_lib.lua")
	rwPTTLScript   = loadScript("rw_pttl.lua", "rw_lib.lua")
	rwUnwaitScript = loadScript("rw_unwait.lua", "rw_lib.lua")

	slotClaimScript    = loadScript("slot_claim.lua")
	slotRenewScript    = loadScript("slot_renew.lua")
	slotFinishScript   = loadScript("slot_finish.lua")
	slotTakeoverScript = loadScript("slot_takeover.lua")
)

// slotScriptSources are what Slots.Prepare loads. (redis.Script.Load can't be
// pipelined: it reads its reply at once, and before Exec that reply is empty.)
var slotScriptSources = []string{
	scriptSource("slot_claim.lua"), scriptSource("slot_renew.lua"),
	scriptSource("slot_finish.lua"), scriptSource("slot_takeover.lua"),
}
