package cluster

import "syscall"

// childAttr puts a child in its own process group (killing the group reaches what it forked) and has
// the kernel kill it if the harness dies (e.g. when go test's -timeout panics).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
