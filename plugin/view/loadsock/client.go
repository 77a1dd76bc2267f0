package loadsock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Send sends req over the load socket at path and returns how many GPUs it
// applied to. A refusal is a *Refusal (errors.As) naming the cause; a
// socket that cannot be reached or answers garbage is another error. ctx
// bounds the whole exchange, at most DefaultTimeout plus a second.
func Send(ctx context.Context, path string, req Request) (int, error) {
	line := req.String() + "\n"
	if len(line) > MaxRequestBytes {
		return 0, Refusef(CauseTooLong, "request of %d bytes, at most %d", len(line), MaxRequestBytes)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout+time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return 0, fmt.Errorf("load socket %s: %w", path, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	_, werr := io.WriteString(conn, line) // on error, the server may still have answered
	r := bufio.NewReaderSize(io.LimitReader(conn, MaxReplyBytes), MaxReplyBytes)
	answer, err := r.ReadString('\n')
	if err != nil && (answer == "" || err != io.EOF) {
		if werr != nil {
			return 0, fmt.Errorf("load socket %s: send: %w", path, werr)
		}
		return 0, fmt.Errorf("load socket %s: read the reply: %w", path, err)
	}
	return parseReply(strings.TrimSpace(answer))
}
