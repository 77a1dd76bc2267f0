package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Client calls a running plugin's admin API. The zero value is not usable;
// build it with NewClient. Safe for concurrent use.
type Client struct {
	socket  string
	prefix  string // "/v1/nodes/<node>" for a simulated node's API (ForNode)
	http    *http.Client
	timeout time.Duration
}

// NewClient returns a Client for the admin socket; each call is bounded by
// timeout (DefaultTimeout if zero) and by its context.
func NewClient(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dialer := &net.Dialer{}
	return &Client{
		socket:  socket,
		timeout: timeout,
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, "unix", socket)
			},
		}},
	}
}

// Snapshot reads the Snapshot q selects. Its Source names the client's
// socket path. An unknown q.DeviceID is an error wrapping ErrRequest and
// store.ErrUnknownDevice whose message lists the valid ids.
func (c *Client) Snapshot(ctx context.Context, q Query) (Snapshot, error) {
	v := url.Values{}
	if q.DeviceID != "" {
		v.Set("device", q.DeviceID)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Active {
		v.Set("active", "true")
	}
	if q.DevicesOnly {
		v.Set("devicesOnly", "true")
	}
	var out Snapshot
	err := c.do(ctx, http.MethodGet, "/v1/snapshot", v, nil, &out)
	out.Source = SourceInfo{Type: SourcePlugin, Path: c.socket}
	return out, err
}

// SetHealth changes a device's health in the running plugin and returns a
// devices-only Snapshot of that device. A reason is only for
// healthy=false. An unknown device is an error wrapping ErrRequest and
// store.ErrUnknownDevice whose message lists the valid ids.
func (c *Client) SetHealth(ctx context.Context, id string, healthy bool, reason string) (Snapshot, error) {
	var out Snapshot
	body := healthRequest{Healthy: &healthy, Reason: reason}
	err := c.do(ctx, http.MethodPut, "/v1/devices/"+url.PathEscape(id)+"/health", nil, body, &out)
	out.Source = SourceInfo{Type: SourcePlugin, Path: c.socket}
	return out, err
}

// requestError is a non-200 answer: its message is the plugin's.
type requestError struct {
	status       int
	msg          string
	notSimulated bool
}

func (e *requestError) Error() string { return e.msg }

// Is makes every requestError match ErrRequest, and a 404 match
// store.ErrUnknownDevice too.
func (e *requestError) Is(target error) bool {
	return target == ErrRequest || e.status == http.StatusNotFound && target == store.ErrUnknownDevice ||
		e.notSimulated && target == ErrNotSimulated
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("admin %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	path = c.prefix + path
	u := "http://plugin" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("admin %s %s: %w", method, path, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.connError(method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e) != nil || e.Error == "" {
			e.Error = "admin " + method + " " + path + ": " + resp.Status
		}
		return &requestError{status: resp.StatusCode, msg: e.Error, notSimulated: e.NotSimulated}
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("admin %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// connError tells apart, for a failed call of method on path: no plugin
// (no socket file, nothing listening), no permission, a plugin that closed
// the connection without an answer (ErrGone), and anything else (a
// timeout).
func (c *Client) connError(method, path string, err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		switch {
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOTDIR):
			return fmt.Errorf("%s: %w: %w", c.socket, ErrNoPlugin, op.Err)
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			return fmt.Errorf("%w %s", ErrPermission, c.socket)
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		cause := err
		var ue *url.Error
		if errors.As(err, &ue) {
			cause = ue.Err // not the client's made-up URL
		}
		return fmt.Errorf("admin socket %s: %s %s: %w (it stopped or crashed): %w", c.socket, method, path, ErrGone, cause)
	}
	return fmt.Errorf("admin socket %s: %w", c.socket, err)
}
