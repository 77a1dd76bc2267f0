//go:build !linux

package cluster

import "syscall"

// childAttr puts a child in its own process group. The harness only runs on Linux (Start returns
// ErrUnsupported elsewhere); this file lets the package build, so the tests can skip.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
