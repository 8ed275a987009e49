package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel kill cmd when the test binary that starts it
// ends, however it ends: a panic, a -timeout, a SIGKILL, none of which runs
// the test's cleanup, would otherwise leave the redis-server running, its
// port and memory held, until someone kills it by hand. (The signal
// follows the thread that started cmd: startOnOwnThread keeps that thread
// to itself until the server has exited.)
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
