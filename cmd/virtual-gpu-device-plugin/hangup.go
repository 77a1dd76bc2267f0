package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// notifyHangup starts catching SIGHUP, so that from this call on a hangup
// no longer ends serve (the default action): daemons re-read their
// configuration on SIGHUP, and an operator who sends one expects that.
// The caller must signal.Stop the channel.
func notifyHangup() chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c
}

// onHangup calls reread for every SIGHUP on c until ctx ends.
func onHangup(ctx context.Context, c <-chan os.Signal, reread func()) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c:
			reread()
		}
	}
}
