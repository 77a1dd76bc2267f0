package admin

import "errors"

var (
	// ErrNoPlugin means nothing answers on the admin socket: the plugin is
	// not running (or runs with another -admin-socket).
	ErrNoPlugin = errors.New("no plugin answers on the admin socket")
	// ErrRequest means the plugin refused a request; the message is its
	// answer.
	ErrRequest = errors.New("admin request refused")
)
