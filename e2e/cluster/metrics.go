package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// MetricSample is one sample of a Prometheus text-format metric.
type MetricSample struct {
	Labels map[string]string
	Value  float64
}

// metricSamples returns the samples of metric name in Prometheus text-format text, with their labels
// (quoted values unescaped). Lines that do not parse are skipped.
func metricSamples(text, name string) []MetricSample {
	var out []MetricSample
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels := map[string]string{}
		if rest[0] == '{' {
			var ok bool
			if labels, rest, ok = parseLabels(rest[1:]); !ok {
				continue
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out = append(out, MetricSample{Labels: labels, Value: v})
	}
	return out
}

// parseLabels parses `a="x",b="y\"z"}` (after the opening brace) and returns the labels and what
// follows the closing brace.
func parseLabels(s string) (map[string]string, string, bool) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], true
		}
		key, rest, ok := strings.Cut(s, "=")
		if !ok || len(rest) == 0 || rest[0] != '"' {
			return nil, "", false
		}
		var val strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(rest[i])
				}
				continue
			}
			val.WriteByte(rest[i])
		}
		if i >= len(rest) {
			return nil, "", false
		}
		labels[strings.TrimSpace(key)] = val.String()
		s = rest[i+1:]
	}
}

// KubeletMetricSamples returns the samples of metric name on the node's kubelet /metrics (read through
// the API server's node proxy); none is not an error.
func (n *Node) KubeletMetricSamples(ctx context.Context, name string) ([]MetricSample, error) {
	raw, err := n.c.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.Name, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kubelet metrics of %s: %w", n.Name, err)
	}
	return metricSamples(string(raw), name), nil
}

// APIServerMetricSamples returns the samples of metric name on the API server's /metrics; none is not
// an error.
func (c *Cluster) APIServerMetricSamples(ctx context.Context, name string) ([]MetricSample, error) {
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver metrics: %w", err)
	}
	return metricSamples(string(raw), name), nil
}

// featureEnabled reads feature gate gate from samples of kubernetes_feature_enabled (1: on).
func featureEnabled(samples []MetricSample, component, gate string) (bool, error) {
	for _, s := range samples {
		if s.Labels["name"] == gate {
			return s.Value == 1, nil
		}
	}
	return false, fmt.Errorf("%s: feature gate %s: %w", component, gate, ErrUnknownFeatureGate)
}

// FeatureEnabled reports whether the API server has feature gate gate on (its
// kubernetes_feature_enabled metric): what the cluster's Kubernetes version defaults to, with
// Options.FeatureGates applied. A gate the version does not know is ErrUnknownFeatureGate.
func (c *Cluster) FeatureEnabled(ctx context.Context, gate string) (bool, error) {
	samples, err := c.APIServerMetricSamples(ctx, "kubernetes_feature_enabled")
	if err != nil {
		return false, err
	}
	return featureEnabled(samples, "kube-apiserver", gate)
}

// KubeletFeatureEnabled is FeatureEnabled of the node's kubelet.
func (n *Node) KubeletFeatureEnabled(ctx context.Context, gate string) (bool, error) {
	samples, err := n.KubeletMetricSamples(ctx, "kubernetes_feature_enabled")
	if err != nil {
		return false, err
	}
	return featureEnabled(samples, "kubelet "+n.Name, gate)
}
