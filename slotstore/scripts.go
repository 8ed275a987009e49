package slotstore

import (
	"embed"
	"io/fs"

	"github.com/slotcron/slotcron/internal/rediskit"
)

// The scripts, one per operation. Each file starts with a header that states
// its KEYS, ARGV and what it returns.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

var scriptDir, _ = fs.Sub(scriptFiles, "scripts")

// The scripts and the shared files each one is prepended with.
var (
	claimScript     = rediskit.Script(scriptDir, "claim.lua", "record_lib.lua")
	renewScript     = rediskit.Script(scriptDir, "renew.lua", "record_lib.lua")
	finishScript    = rediskit.Script(scriptDir, "finish.lua", "record_lib.lua")
	takeoverScript  = rediskit.Script(scriptDir, "takeover.lua", "record_lib.lua")
	jobstatesScript = rediskit.Script(scriptDir, "jobstates.lua", "record_lib.lua")
	probeScript     = rediskit.Script(scriptDir, "probe.lua")
	pauseScript     = rediskit.Script(scriptDir, "pause.lua")
	outboxScript    = rediskit.Script(scriptDir, "outbox.lua")

	heartbeatScript   = rediskit.Script(scriptDir, "heartbeat.lua")
	leaveScript       = rediskit.Script(scriptDir, "leave.lua")
	deploymentsScript = rediskit.Script(scriptDir, "deployments.lua")
)

// scriptSources are what Prepare loads. (redis.Script.Load can't be
// pipelined: it reads its reply at once, and before Exec that reply is empty.)
var scriptSources = []string{
	rediskit.Source(scriptDir, "claim.lua", "record_lib.lua"), rediskit.Source(scriptDir, "renew.lua", "record_lib.lua"),
	rediskit.Source(scriptDir, "finish.lua", "record_lib.lua"), rediskit.Source(scriptDir, "takeover.lua", "record_lib.lua"),
	rediskit.Source(scriptDir, "jobstates.lua", "record_lib.lua"),
	rediskit.Source(scriptDir, "probe.lua"), rediskit.Source(scriptDir, "heartbeat.lua"),
	rediskit.Source(scriptDir, "deployments.lua"),
}
