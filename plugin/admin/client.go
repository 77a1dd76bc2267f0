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
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Client calls a running plugin's admin API. The zero value is not usable;
// build it with NewClient. Safe for concurrent use.
type Client struct {
	socket  string
	http    *http.Client
	timeout time.Duration
}

// NewClient returns a Client for the admin socket; each call is bounded by
// timeout (DefaultTimeout if zero).
func NewClient(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dialer := &net.Dialer{Timeout: timeout}
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

// Devices returns every stored device, removed ones flagged.
func (c *Client) Devices() ([]store.Device, error) {
	var out []store.Device
	return out, c.do(http.MethodGet, "/v1/devices", nil, nil, &out)
}

// Allocations returns the allocation records f selects, newest first.
func (c *Client) Allocations(f store.AllocationFilter) ([]store.Allocation, error) {
	q := url.Values{}
	addCommon(q, f.DeviceID, f.Since, f.Limit)
	if f.Active {
		q.Set("active", "true")
	}
	var out []store.Allocation
	return out, c.do(http.MethodGet, "/v1/allocations", q, nil, &out)
}

// HealthEvents returns the health events f selects, newest first.
func (c *Client) HealthEvents(f store.EventFilter) ([]store.HealthEvent, error) {
	q := url.Values{}
	addCommon(q, f.DeviceID, f.Since, f.Limit)
	var out []store.HealthEvent
	return out, c.do(http.MethodGet, "/v1/events", q, nil, &out)
}

// SetHealth changes a device's health and returns the stored device.
func (c *Client) SetHealth(id string, healthy bool, reason string) (store.Device, error) {
	var out store.Device
	body := healthRequest{Healthy: &healthy, Reason: reason}
	return out, c.do(http.MethodPut, "/v1/devices/"+url.PathEscape(id)+"/health", nil, body, &out)
}

func addCommon(q url.Values, device string, since time.Time, limit int) {
	if device != "" {
		q.Set("device", device)
	}
	if !since.IsZero() {
		q.Set("since", since.Format(time.RFC3339Nano))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
}

func (c *Client) do(method, path string, q url.Values, body, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("admin %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
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
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return fmt.Errorf("%s: %w: %w", c.socket, ErrNoPlugin, opErr.Err)
		}
		return fmt.Errorf("admin socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		return fmt.Errorf("%w: %s", ErrRequest, e.Error)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("admin %s %s: decode answer: %w", method, path, err)
	}
	return nil
}
