package nvidiasmi_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
)

// loadHandler records the requests the plugin's side of the load socket
// gets, and answers with refuse when set.
type loadHandler struct {
	mu     sync.Mutex
	reqs   []string
	refuse error
}

func (h *loadHandler) SetLoad(_ context.Context, _ uint64, req loadsock.Request) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs = append(h.reqs, req.String())
	if h.refuse != nil {
		return 0, h.refuse
	}
	return len(req.GPUs), nil
}

func (h *loadHandler) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.reqs
	h.reqs = nil
	return out
}

// badLoad is nvidia-smi's message for a --set-load value it refuses.
func badLoad(v, why string) string {
	return "ERROR: --set-load=\"" + v + "\": " + why + ": want UTIL[,MEM_MIB] (utilization 0-100 %, memory used in MiB per GPU), e.g. 90 or 90,4096, or clear"
}

// TestSetLoad: --set-load sends the container's GPUs (or those -i picks)
// and the values over the load socket, and says what it set; bad values
// never leave the container; without a socket it says why.
func TestSetLoad(t *testing.T) {
	f := newFixture(t, mustPreset(t, "dgx-a100"), []int{2, 5}, nil)
	h := &loadHandler{}
	srv, err := loadsock.NewServer(loadsock.Config{Dir: filepath.Join(plugintest.ShortTempDir(t), "load"), Handler: h, Burst: 100, Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if err := srv.Open(12, []string{"fake-2", "fake-5"}); err != nil {
		t.Fatal(err)
	}
	f.env[loadsock.EnvSocket] = filepath.Join(srv.HostDir(12), loadsock.SocketName)
	bus := func(pos int) string { return f.gpus[pos].PCIBusID }
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  []string
		sent []string
	}{
		{"utilization", []string{"--set-load", "90"}, 0, []string{
			"Load of GPU " + bus(0) + " was set to 90 % utilization.", "Load of GPU " + bus(1) + " was set to 90 % utilization.", "All done."},
			[]string{"set util=90 gpus=fake-2,fake-5"}},
		{"memory, one GPU", []string{"--set-load=42.5,4096", "-i", "1"}, 0, []string{
			"Load of GPU " + bus(1) + " was set to 42.5 % utilization and 4096 MiB memory used.", "All done."},
			[]string{"set util=42.5 mem=4096 gpus=fake-5"}},
		{"clear", []string{"--set-load=clear"}, 0, []string{
			"Load of GPU " + bus(0) + " is the load model's again.", "Load of GPU " + bus(1) + " is the load model's again.", "All done."},
			[]string{"clear gpus=fake-2,fake-5"}},
		{"not a number", []string{"--set-load=lots"}, 2, []string{badLoad("lots", `utilization "lots" is not a decimal number`)}, nil},
		{"too large", []string{"--set-load=100.5"}, 2, []string{badLoad("100.5", "utilization 100.5 % is out of range: want 0..100")}, nil},
		{"just too large", []string{"--set-load=100.0000001"}, 2, []string{badLoad("100.0000001", "utilization 100.0000001 % is out of range: want 0..100")}, nil},
		{"negative", []string{"--set-load=-5"}, 2, []string{badLoad("-5", "utilization -5 % is out of range: want 0..100")}, nil},
		{"exponent", []string{"--set-load=1e2"}, 2, []string{badLoad("1e2", `utilization "1e2" is not a decimal number`)}, nil},
		{"memory not whole", []string{"--set-load=50,1.5"}, 2, []string{badLoad("50,1.5", `memory used "1.5" is not a whole number of MiB`)}, nil},
		{"memory negative", []string{"--set-load=90,-1"}, 2, []string{badLoad("90,-1", "memory used -1 MiB is out of range: want 0 or more")}, nil},
		{"memory too large", []string{"--set-load=90,99999999999999999999"}, 2, []string{badLoad("90,99999999999999999999", "memory used 99999999999999999999 MiB is too large")}, nil},
		{"injected key", []string{"--set-load=50 gpus=fake-0"}, 2, nil, nil},
		{"minus zero", []string{"--set-load=-0,-0"}, 0, []string{
			"Load of GPU " + bus(0) + " was set to 0 % utilization and 0 MiB memory used.", "Load of GPU " + bus(1) + " was set to 0 % utilization and 0 MiB memory used.", "All done."},
			[]string{"set util=0 mem=0 gpus=fake-2,fake-5"}},
		{"with -L", []string{"--set-load=5", "-L"}, 2, []string{"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."}, nil},
		{"no value", []string{"--set-load"}, 2, []string{"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."}, nil},
		{"no such GPU", []string{"--set-load=5", "-i", "7"}, 6, []string{"No devices were found"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := f.run(t, tc.args...)
			if code != tc.code || tc.out != nil && !slices.Equal(listLines(out), tc.out) {
				t.Errorf("nvidia-smi %q: exit %d\n%s\nwant %d\n%s", tc.args, code, out, tc.code, strings.Join(tc.out, "\n"))
			}
			if got := h.take(); !slices.Equal(got, tc.sent) {
				t.Errorf("the plugin got %q, want %q", got, tc.sent)
			}
		})
	}

	// The plugin's refusal, with its exit code.
	for _, tc := range []struct {
		cause string
		code  int
	}{{loadsock.CauseValue, 2}, {loadsock.CauseOff, 3}, {loadsock.CauseNotHeld, 255}} {
		h.refuse = loadsock.Refusef(tc.cause, "because %s", tc.cause)
		out, code := f.run(t, "--set-load=10")
		if want := "ERROR: the device plugin refused the load: because " + tc.cause + "\n"; code != tc.code || out != want {
			t.Errorf("refused for %s: exit %d %q, want %d %q", tc.cause, code, out, tc.code, want)
		}
	}
	h.take()

	// No socket: the plugin runs without -telemetry-writable.
	delete(f.env, loadsock.EnvSocket)
	out, code := f.run(t, "--set-load=10")
	if code != nvidiasmi.ExitNotSupported || !strings.Contains(out, "$VIRTUAL_GPU_LOAD_SOCKET is not set") {
		t.Errorf("without a socket: exit %d %q", code, out)
	}
	// A socket nobody serves.
	f.env[loadsock.EnvSocket] = filepath.Join(t.TempDir(), "none.sock")
	if out, code := f.run(t, "--set-load=10"); code != nvidiasmi.ExitUnknownError || !strings.Contains(out, "cannot be reached") {
		t.Errorf("a socket nobody serves: exit %d %q", code, out)
	}
}
