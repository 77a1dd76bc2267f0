package unixsock

import "errors"

// Errors of Claim; test with errors.Is.
var (
	// ErrNotSocket means a socket path exists and is not a unix
	// socket, so Claim refuses to remove it.
	ErrNotSocket = errors.New("exists and is not a unix socket")
	// ErrInUse means a process listens on a socket path a caller was asked to listen on, whether it answers or not: another plugin,
	// the kubelet, or any other program, running, hung or stopped. Claim never
	// removes such a socket.
	ErrInUse = errors.New("another process is listening on it")
)
