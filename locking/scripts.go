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

func loadScript(name string) *redis.Script {
	src, err := scriptFiles.ReadFile("scripts/" + name)
	if err != nil {
		panic("locking: missing embedded script " + name) // a build error in disguise
	}
	return redis.NewScript(string(src))
}

var (
	obtainScript  = loadScript("obtain.lua")
	releaseScript = loadScript("release.lua")
	extendScript  = loadScript("extend.lua")
	pttlScript    = loadScript("pttl.lua")
)
