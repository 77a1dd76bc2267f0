package admin

import "errors"

var (
	// ErrNoPlugin means nothing answers on the admin socket: there is no
	// socket file, or nothing listens on it (connection refused). The
	// plugin is not running, or runs with another -admin-socket.
	ErrNoPlugin = errors.New("no plugin answers on the admin socket")
	// ErrPermission means the caller may not connect to the admin socket
	// (EACCES or EPERM on the socket or a directory above it): a plugin may
	// well be running; run as root or as the socket's owner.
	ErrPermission = errors.New("permission denied on the admin socket")
	// ErrGone means the plugin took the connection and closed it without
	// an answer: it stopped or crashed meanwhile. A change asked for may
	// have been made.
	ErrGone = errors.New("the plugin went away without answering")
	// ErrRequest means the plugin refused or failed a request; the message
	// is its answer. A refusal for an unknown device also wraps
	// store.ErrUnknownDevice.
	ErrRequest = errors.New("admin request refused")
	// ErrNotSimulated means the simulator answers but does not simulate
	// the node asked for (Client.ForNode): not now, or never. Its state
	// file, if it was simulated before, holds its history.
	ErrNotSimulated = errors.New("node not simulated")
)
