package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// listenAddress returns the address a running plugin's listener listens
// on, from its log line msg.
func listenAddress(t *testing.T, logs *plugintest.LogBuffer, msg string) string {
	t.Helper()
	re := regexp.MustCompile(`"address":"([^"]+)"[^\n]*` + regexp.QuoteMeta(msg))
	var addr string
	plugintest.WaitFor(t, 10*time.Second, "the log line "+msg, func() bool {
		m := re.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	return string(b)
}

// TestServe_Telemetry: serve with -telemetry-address and -telemetry-writable
// on dgx-a100: every GPU has its series, idle and without pod labels; a
// container holding 2 GPUs labels theirs; its allocation's load socket
// exists when Allocate answers, and nvidia-smi --set-load 90 through it
// shows 90 in the telemetry and in nvidia-smi; health set unhealthy with
// XID 79 shows the XID; when the pod ends, the labels go, the GPUs idle
// and the socket directory is removed; a live change to workstation-4gpu
// serves its 4 GPUs. The plugin's own /metrics stays promlint-clean.
func TestServe_Telemetry(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(map[string]string{kube.ConfigLabel: "big"})
	reg := n.start(t, api, "-telemetry-address=127.0.0.1:0", "-telemetry-writable", "-metrics-address=127.0.0.1:0")
	plugintest.NextList(t, reg, 10*time.Second)
	url := "http://" + listenAddress(t, n.logs, "serving GPU telemetry") + "/metrics"
	scrape := func() []plugintest.Sample { return plugintest.ParseExposition(t, httpGet(t, url)) }
	utilOf := func(ss []plugintest.Sample) map[string]plugintest.Sample {
		out := map[string]plugintest.Sample{}
		for _, s := range ss {
			if s.Name == "DCGM_FI_DEV_GPU_UTIL" {
				out[s.Labels["gpu"]] = s
			}
		}
		return out
	}
	u := utilOf(scrape())
	if len(u) != 8 {
		t.Fatalf("%d GPU_UTIL series, want 8", len(u))
	}
	for gpu, s := range u {
		if s.Value != "0" || s.Labels["pod"] != "" || s.Labels["Hostname"] != testNode || s.Labels["modelName"] != "NVIDIA A100-SXM4-40GB" ||
			s.Labels["DCGM_FI_DRIVER_VERSION"] != topology.DriverVersion {
			t.Errorf("GPU %s before any pod: %+v", gpu, s)
		}
	}

	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-1", "fake-2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ans := resp.ContainerResponses[0]
	var sockDir string
	for _, m := range ans.Mounts {
		if m.ContainerPath == loadsock.ContainerDir {
			sockDir = m.HostPath
			if !m.ReadOnly {
				t.Error("the load socket's directory is mounted writable")
			}
		}
	}
	sock := filepath.Join(sockDir, loadsock.SocketName)
	if fi, err := os.Stat(sock); sockDir == "" || err != nil || fi.Mode()&os.ModeSocket == 0 || ans.Envs[loadsock.EnvSocket] != loadsock.ContainerPath {
		t.Fatalf("answer %v: want the load socket (%v) mounted and named", ans, err)
	}
	n.pods.SetPod("ml", "train", options.DefaultResourceName, plugintest.Container{Name: "trainer", IDs: []string{"fake-1", "fake-2"}})
	plugintest.WaitFor(t, 10*time.Second, "2 GPU_UTIL series labelled ml/train/trainer", func() bool {
		held := 0
		for _, s := range utilOf(scrape()) {
			if s.Labels["namespace"] == "ml" && s.Labels["pod"] == "train" && s.Labels["container"] == "trainer" {
				held++
			}
		}
		return held == 2
	})

	// The container sets its load with nvidia-smi, which reads its status files.
	env := func(k string) string {
		switch k {
		case loadsock.EnvSocket:
			return sock
		case status.EnvStatusDir:
			return filepath.Join(filepath.Dir(n.state), "status")
		}
		return ans.Envs[k]
	}
	var out, errOut bytes.Buffer
	set := time.Now()
	if code := nvidiasmi.Main([]string{"--set-load", "90"}, env, &out, &errOut); code != 0 {
		t.Fatalf("nvidia-smi --set-load 90: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	u = utilOf(scrape())
	if u["1"].Value != "90" || u["2"].Value != "90" {
		t.Errorf("after --set-load 90: GPU_UTIL %v", u)
	}
	plugintest.WaitFor(t, 5*time.Second, "nvidia-smi to show 90 %", func() bool {
		out.Reset()
		nvidiasmi.Main([]string{"--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"}, env, &out, &errOut)
		return out.String() == "90\n90\n"
	})
	t.Logf("--set-load 90 -> nvidia-smi in the container shows it: %s", time.Since(set).Round(time.Millisecond))

	if _, err := n.admin.SetHealth(context.Background(), "fake-1", false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	var xid plugintest.Sample
	for _, s := range scrape() {
		if s.Name == "DCGM_FI_DEV_XID_ERRORS" && s.Labels["gpu"] == "1" {
			xid = s
		}
	}
	if xid.Value != "79" || xid.Labels["err_code"] != "79" || xid.Labels["err_msg"] != "GPU has fallen off the bus" {
		t.Errorf("XID of GPU 1 after health set unhealthy XID 79: %+v", xid)
	}
	if _, err := n.admin.SetHealth(context.Background(), "fake-1", true, ""); err != nil {
		t.Fatal(err)
	}

	// A plugin restart: the socket comes back in the same directory, which
	// the running container has mounted.
	n.stop(t)
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the socket after the plugin stopped: %v, %v; want it kept for the kubelet's replays", fi, err)
	}
	n.logs = &plugintest.LogBuffer{}
	reg = n.start(t, api, "-telemetry-address=127.0.0.1:0", "-telemetry-writable", "-metrics-address=127.0.0.1:0")
	plugintest.NextList(t, reg, 10*time.Second)
	url = "http://" + listenAddress(t, n.logs, "serving GPU telemetry") + "/metrics"
	if got, err := loadsock.Send(t.Context(), sock, loadsock.Request{UtilizationPercent: ptr(55.0)}); err != nil || got != 2 {
		t.Errorf("the load socket after a plugin restart: %d, %v", got, err)
	}
	if u = utilOf(scrape()); u["1"].Value != "55" || u["2"].Value != "55" || u["2"].Labels["pod"] != "train" {
		t.Errorf("after a restart and --set-load 55: GPU_UTIL %v", u)
	}

	n.pods.DeletePod("ml", "train")
	plugintest.WaitFor(t, 10*time.Second, "the pod's labels gone and its GPUs idle", func() bool {
		for _, s := range utilOf(scrape()) {
			if s.Labels["pod"] != "" || s.Value != "0" {
				return false
			}
		}
		return true
	})
	plugintest.WaitFor(t, 10*time.Second, "the released allocation's socket directory removed", func() bool {
		_, err := os.Stat(sockDir)
		return os.IsNotExist(err)
	})

	api.setLabel(kube.ConfigLabel, "small")
	plugintest.WaitFor(t, 10*time.Second, "the telemetry of workstation-4gpu", func() bool {
		u := utilOf(scrape())
		return len(u) == 4 && u["0"].Labels["modelName"] == "NVIDIA RTX A6000"
	})

	body := httpGet(t, "http://"+listenAddress(t, n.logs, "serving /metrics, /healthz, /readyz")+"/metrics")
	if strings.Contains(body, "DCGM_") {
		t.Error("the plugin's own /metrics has telemetry series")
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func ptr[T any](v T) *T { return &v }
