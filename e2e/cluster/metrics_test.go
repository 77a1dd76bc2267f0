package cluster

import (
	"errors"
	"maps"
	"testing"
)

func TestMetricSamples(t *testing.T) {
	text := `# HELP plugin_manager_total_plugins [ALPHA] Number of plugins in Plugin Manager
# TYPE plugin_manager_total_plugins gauge
plugin_manager_total_plugins{socket_path="/tmp/n/kubelet/plugins_registry/gpu.unicore.mcyou.cc-reg.sock",state="actual_state_of_world"} 1
plugin_manager_total_plugins{socket_path="/tmp/n/kubelet/plugins_registry/gpu.unicore.mcyou.cc-reg.sock",state="desired_state_of_world"} 1
plugin_manager_total_plugins_other 3
kubernetes_feature_enabled{name="DRADeviceTaints",stage="BETA"} 1
kubernetes_feature_enabled{name="DRAExtendedResource",stage="ALPHA"} 0
weird{a="x\"y,}z",b="\\"} 2.5
plain 7
broken{a="x" 1
`
	got := metricSamples(text, "plugin_manager_total_plugins")
	if len(got) != 2 || got[0].Value != 1 || got[0].Labels["state"] != "actual_state_of_world" ||
		got[0].Labels["socket_path"] != "/tmp/n/kubelet/plugins_registry/gpu.unicore.mcyou.cc-reg.sock" {
		t.Errorf("plugin_manager_total_plugins samples: %+v", got)
	}
	if w := metricSamples(text, "weird"); len(w) != 1 || !maps.Equal(w[0].Labels, map[string]string{"a": `x"y,}z`, "b": `\`}) || w[0].Value != 2.5 {
		t.Errorf("escaped labels: %+v", w)
	}
	if p := metricSamples(text, "plain"); len(p) != 1 || p[0].Value != 7 || len(p[0].Labels) != 0 {
		t.Errorf("plain: %+v", p)
	}
	if b := metricSamples(text, "broken"); len(b) != 0 {
		t.Errorf("broken line parsed: %+v", b)
	}
	gates := metricSamples(text, "kubernetes_feature_enabled")
	for gate, want := range map[string]bool{"DRADeviceTaints": true, "DRAExtendedResource": false} {
		if on, err := featureEnabled(gates, "kube-apiserver", gate); err != nil || on != want {
			t.Errorf("featureEnabled(%s) = %v, %v; want %v", gate, on, err, want)
		}
	}
	if _, err := featureEnabled(gates, "kube-apiserver", "NoSuchGate"); !errors.Is(err, ErrUnknownFeatureGate) {
		t.Errorf("featureEnabled of an unknown gate: %v", err)
	}
}
