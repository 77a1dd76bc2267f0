package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/rs/zerolog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// API is what the rest of the plugin needs from the API server. *Client
// implements it; tests of other packages can use a fake.
type API interface {
	// WatchNode calls fn with the labels of Node name at start and after
	// every change of them, until ctx ends (see Client.WatchNode).
	WatchNode(ctx context.Context, name string, fn func(labels map[string]string) error) error
	LabelPatcher
}

var (
	_ API          = (*Client)(nil)
	_ LabelPatcher = (*Client)(nil)
)

// Defaults of Options.
const (
	// DefaultBackoffInitial and DefaultBackoffMax bound the exponential
	// backoff between failed lists and watches, and between retries of a
	// failed delivery (the reflector of client-go uses 800 ms and 30 s).
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = 30 * time.Second
	// DefaultRequestTimeout bounds one list or patch request; a watch is
	// bounded by the server (watchTimeoutMin..2*watchTimeoutMin).
	DefaultRequestTimeout = 30 * time.Second
)

// userAgentName names the plugin in the User-Agent header.
const userAgentName = "virtual-gpu-device-plugin"

// Options configures NewClient. The zero value loads the configuration as
// kubectl does and takes the defaults above.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file (-kubeconfig); it must
	// exist. "" means: the files of $KUBECONFIG (a path list) or
	// ~/.kube/config if they name a cluster, else the in-cluster
	// configuration of the pod's service account.
	Kubeconfig string
	// Version is the plugin's version, sent in the User-Agent header
	// "virtual-gpu-device-plugin/<Version> (<os>/<arch>)"; "" sends "dev".
	Version string
	// Logger receives a line per failed and retried request (warn), per
	// relist and per server warning; the zero Logger discards.
	Logger zerolog.Logger
	// BackoffInitial and BackoffMax bound the backoff between retries
	// (defaults 1 s and 30 s).
	BackoffInitial, BackoffMax time.Duration
	// RequestTimeout bounds one list or patch request (default 30 s).
	RequestTimeout time.Duration
	// QPS and Burst bound the client's request rate (client-go's
	// defaults, 5 and 10, when zero): the simulator of many nodes raises
	// them.
	QPS   float32
	Burst int
	// WrapTransport, when set, wraps every request's transport (to count
	// them, say).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Client talks to the API server for the plugin: it watches one Node and
// patches its labels. Build it with NewClient; it holds no connection until
// used and needs no closing. It is safe for concurrent use.
type Client struct {
	rest    *rest.Config
	nodes   *nodesClient
	host    string
	source  string
	log     zerolog.Logger
	opts    Options
	backoff backoff
}

// NewClient finds the API server and returns a client for it. The
// configuration is, in order: opts.Kubeconfig if set (a missing or bad file
// is an error), the files of $KUBECONFIG or ~/.kube/config if they name a
// cluster (kubectl's loading rules: several files are merged, the current
// context decides), and the in-cluster configuration of a pod (its service
// account token and KUBERNETES_SERVICE_HOST). Without any of these it
// returns an error wrapping ErrNoAPIAccess. It does not contact the server.
func NewClient(opts Options) (*Client, error) {
	return newClient(opts, osEnv())
}

// env is what NewClient reads of the process's environment, replaceable in
// tests: the environment variables, the home directory and the in-cluster
// configuration.
type env struct {
	getenv    func(string) string
	home      string
	inCluster func() (*rest.Config, error)
}

func osEnv() env {
	home, _ := os.UserHomeDir()
	return env{getenv: os.Getenv, home: home, inCluster: rest.InClusterConfig}
}

func newClient(opts Options, e env) (*Client, error) {
	cfg, source, err := restConfig(opts.Kubeconfig, e)
	if err != nil {
		return nil, err
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	cfg.UserAgent = fmt.Sprintf("%s/%s (%s/%s)", userAgentName, version, runtime.GOOS, runtime.GOARCH)
	// Protobuf, as the kubelet asks: cheaper to encode, send and decode.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.WarningHandlerWithContext = warningLogger{opts.Logger}
	if opts.QPS > 0 {
		cfg.QPS, cfg.Burst = opts.QPS, max(opts.Burst, int(opts.QPS))
	}
	if opts.WrapTransport != nil {
		cfg.Wrap(opts.WrapTransport)
	}
	nodes, err := newNodesClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client for %s (%s): %w", cfg.Host, source, err)
	}
	if opts.BackoffInitial <= 0 {
		opts.BackoffInitial = DefaultBackoffInitial
	}
	if opts.BackoffMax < opts.BackoffInitial {
		opts.BackoffMax = max(DefaultBackoffMax, opts.BackoffInitial)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	return &Client{
		rest:    cfg,
		nodes:   nodes,
		host:    cfg.Host,
		source:  source,
		log:     opts.Logger,
		opts:    opts,
		backoff: backoff{initial: opts.BackoffInitial, max: opts.BackoffMax},
	}, nil
}

// Clientset returns a typed client of the same API server, with the same
// credentials, user agent and content type: what the DRA libraries take
// (k8s.io/dynamic-resource-allocation).
func (c *Client) Clientset() (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(c.rest))
	if err != nil {
		return nil, fmt.Errorf("API client for %s (%s): %w", c.host, c.source, err)
	}
	return cs, nil
}

// restConfig loads the client configuration (see NewClient) and says where
// it came from, for messages.
func restConfig(explicit string, e env) (*rest.Config, string, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: explicit}
	where := explicit
	if explicit == "" {
		// kubectl's rules, with this env's variables and home.
		if v := e.getenv(clientcmd.RecommendedConfigPathEnvVar); v != "" {
			rules.Precedence = slices.Compact(filepath.SplitList(v))
			where = "$KUBECONFIG (" + v + ")"
		} else if e.home != "" {
			where = filepath.Join(e.home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
			rules.Precedence = []string{where}
		}
	}
	raw, err := rules.Load()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %s: %w", where, err)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, "", &clientcmd.ConfigOverrides{}, rules).ClientConfig()
	switch {
	case err == nil:
		return cfg, "kubeconfig " + where, nil
	case explicit != "" && clientcmd.IsEmptyConfig(err):
		return nil, "", fmt.Errorf("kubeconfig %s: no current context with a cluster server: %w", where, err)
	case !clientcmd.IsEmptyConfig(err):
		return nil, "", fmt.Errorf("kubeconfig %s: %w", where, err)
	}
	// No kubeconfig (or one without a cluster): the pod's service account.
	cfg, err = e.inCluster()
	switch {
	case err == nil:
		return cfg, "in-cluster service account", nil
	case errors.Is(err, rest.ErrNotInCluster):
		if where == "" {
			where = "~/.kube/config"
		}
		return nil, "", fmt.Errorf("%w (no -kubeconfig, no cluster in %s, KUBERNETES_SERVICE_HOST unset)", ErrNoAPIAccess, where)
	}
	return nil, "", fmt.Errorf("in-cluster configuration: %w", err)
}

// Host returns the API server's URL, for logs.
func (c *Client) Host() string { return c.host }

// Source says where the configuration came from ("in-cluster service
// account", "kubeconfig <path>"), for logs.
func (c *Client) Source() string { return c.source }

// PatchNodeLabels sets the labels set and removes the labels remove of Node
// name with one JSON merge patch naming exactly those keys (a removed key is
// null), so no other label, and nothing else of the Node, is touched or
// raced with. Every key must be ours (Owned, else ErrForeignLabel) and be
// valid with a valid value (else ErrInvalidLabel); a key may not be both set
// and removed. Nothing is sent when both are empty. Removing an absent label
// is not an error. Errors from the server are wrapped as client-go returns
// them (k8s.io/apimachinery/pkg/api/errors tells them apart).
func (c *Client) PatchNodeLabels(ctx context.Context, name string, set map[string]string, remove []string) error {
	if name == "" {
		return fmt.Errorf("patch node labels: %w", ErrNoNodeName)
	}
	labels := make(map[string]any, len(set)+len(remove))
	for k, v := range set {
		if err := checkLabel(k, v); err != nil {
			return fmt.Errorf("patch labels of node %q: %w", name, err)
		}
		labels[k] = v
	}
	for _, k := range remove {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("patch labels of node %q: %w", name, err)
		}
		if _, ok := set[k]; ok {
			return fmt.Errorf("patch labels of node %q: label %q both set and removed: %w", name, k, ErrInvalidLabel)
		}
		labels[k] = nil
	}
	if len(labels) == 0 {
		return nil
	}
	body, err := mergePatch(labels)
	if err != nil {
		return fmt.Errorf("patch labels of node %q: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if _, err := c.nodes.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: userAgentName}); err != nil {
		return fmt.Errorf("patch labels of node %q: %w", name, err)
	}
	return nil
}

// mergePatch is the JSON merge patch (RFC 7386) of metadata.labels.
func mergePatch(labels map[string]any) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
}

// warningLogger logs the API server's warnings (deprecations and the like)
// instead of client-go's default of printing them through klog.
type warningLogger struct{ log zerolog.Logger }

// HandleWarningHeaderWithContext implements rest.WarningHandlerWithContext.
func (w warningLogger) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	if code != 299 || text == "" {
		return
	}
	w.log.Warn().Str("agent", agent).Str("warning", text).Msg("API server warning")
}
