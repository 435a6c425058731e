package e2e

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes the kernel kill the process when the test binary that
// started it dies (a timeout, a panic, a SIGKILL), so that no metaserver or
// worker outlives its test holding ports, data dirs or inherited files.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
