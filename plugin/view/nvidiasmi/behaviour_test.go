package nvidiasmi_test

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestEnvIDs_IsThePluginsVariable(t *testing.T) {
	if nvidiasmi.EnvIDs != plugin.EnvIDs {
		t.Errorf("nvidiasmi.EnvIDs = %q, plugin.EnvIDs = %q", nvidiasmi.EnvIDs, plugin.EnvIDs)
	}
}

// listIndices returns the GPU lines of -L output.
func listLines(out string) []string { return strings.Split(strings.TrimSuffix(out, "\n"), "\n") }

func TestSelect_ID(t *testing.T) {
	f := newFixture(t, mustPreset(t, "hgx-h100"), []int{2, 3, 5}, nil) // buses 41, 61, A1
	line := func(pos int) string {
		return "GPU " + string(rune('0'+pos)) + ": NVIDIA H100 80GB HBM3 (UUID: " + f.gpus[pos].UUID + ")"
	}
	cases := []struct {
		name, id string
		want     []int // positions listed; nil: No devices were found
	}{
		{"index", "0", []int{0}},
		{"indices in index order", "2,0", []int{0, 2}},
		{"index twice", "1,1", []int{1}},
		{"spaces", " 2 , 1 ", []int{1, 2}},
		{"uuid", f.gpus[2].UUID, []int{2}},
		{"uuid upper-case", strings.ToUpper(f.gpus[1].UUID), []int{1}},
		{"bus id", "00000000:61:00.0", []int{1}},
		{"bus id lower-case", "00000000:a1:00.0", []int{2}},
		{"bus id short domain", "0000:41:00.0", []int{0}},
		{"bus id without domain", "61:00.0", []int{1}},
		{"bus id without function", "0:a1:00", []int{2}},
		{"serial", f.gpus[1].Serial, []int{1}},
		{"mixed", f.gpus[0].UUID + ",2", []int{0, 2}},
		{"index out of range", "3", nil},
		{"host index of an allocated GPU", "5", nil},
		{"one of two unknown", "0,7", nil},
		{"unknown uuid", "GPU-00000000-0000-0000-0000-000000000000", nil},
		{"unknown bus id", "00000000:42:00.0", nil},
		{"bad function", "61:00.9", nil},
		{"empty entry", "0,,1", nil},
		{"word", "first", nil},
		{"negative", "-1", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{{"-L", "-i", tc.id}, {"-L", "--id=" + tc.id}} {
				out, code := f.run(t, args...)
				if tc.want == nil {
					if code != nvidiasmi.ExitNotFound || out != "No devices were found\n" {
						t.Errorf("%q: exit %d, output %q; want 6 and No devices were found", args, code, out)
					}
					continue
				}
				var want []string
				for _, p := range tc.want {
					want = append(want, line(p))
				}
				if code != 0 || out != strings.Join(want, "\n")+"\n" {
					t.Errorf("%q: exit %d, output\n%s\nwant 0 and\n%s", args, code, out, strings.Join(want, "\n"))
				}
			}
		})
	}
	// -i applies to the summary, -q and --query-gpu alike.
	if out, _ := f.run(t, "-i", "1"); strings.Count(out, "NVIDIA H100") != 1 || !strings.Contains(out, "|   1  NVIDIA H100") {
		t.Errorf("summary -i 1 does not show exactly GPU 1:\n%s", out)
	}
	if out, _ := f.run(t, "-q", "-i", "2"); strings.Count(out, "Product Name") != 1 || !strings.Contains(out, "GPU 00000000:A1:00.0") {
		t.Errorf("-q -i 2 does not show exactly GPU 2:\n%s", out)
	}
	if out, _ := f.run(t, "--query-gpu=index,count", "--format=csv,noheader", "-i", "1,2"); out != "1, 3\n2, 3\n" {
		t.Errorf("--query-gpu -i 1,2 = %q, want %q", out, "1, 3\n2, 3\n")
	}
}

func TestErrors(t *testing.T) {
	f := newFixture(t, mustPreset(t, "dgx-a100"), []int{0, 1}, nil)
	const invalid = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
	cases := []struct {
		name     string
		args     []string
		want     string
		wantCode int
	}{
		{"unknown option", []string{"--foo"}, "ERROR: Option --foo is not recognized. Please run 'nvidia-smi -h' for help.\n", 2},
		{"unknown short option", []string{"-L", "-Z"}, "ERROR: Option -Z is not recognized. Please run 'nvidia-smi -h' for help.\n", 2},
		{"argument", []string{"and"}, "ERROR: Option and is not recognized. Please run 'nvidia-smi -h' for help.\n", 2},
		{"unknown field", []string{"--query-gpu=name,device_minor", "--format=csv"}, "Field \"device_minor\" is not a valid field to query.\n\n", 2},
		{"field case", []string{"--query-gpu=Name", "--format=csv"}, "Field \"Name\" is not a valid field to query.\n\n", 2},
		{"trailing comma", []string{"--query-gpu=name,", "--format=csv"}, "Field \"\" is not a valid field to query.\n\n", 2},
		{"query without format", []string{"--query-gpu=name"}, invalid, 2},
		{"format without query", []string{"--format=csv"}, invalid, 2},
		{"format without csv", []string{"--query-gpu=name", "--format=noheader"}, invalid, 2},
		{"unknown format option", []string{"--query-gpu=name", "--format=csv,json"}, "ERROR: Option json is not recognized. Please run 'nvidia-smi -h' for help.\n", 2},
		{"list and query", []string{"-L", "-q"}, invalid, 2},
		{"list and query-gpu", []string{"-L", "--query-gpu=name", "--format=csv"}, invalid, 2},
		{"xml alone", []string{"-x"}, invalid, 2},
		{"id without value", []string{"-L", "-i"}, invalid, 2},
		{"empty id", []string{"-L", "--id="}, invalid, 2},
		{"topo id", []string{"topo", "-m", "-i", "0"}, "The -i command line argument must be used in conjunction with -n or -p.\n", 2},
		{"topo unknown", []string{"topo", "-p2p"}, "ERROR: Option -p2p is not recognized. Please run 'nvidia-smi -h' for help.\n", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := f.run(t, tc.args...)
			if out != tc.want || code != tc.wantCode {
				t.Errorf("nvidia-smi %q: exit %d, output %q; want %d, %q", tc.args, code, out, tc.wantCode, tc.want)
			}
		})
	}
	if out, code := f.run(t, "topo"); code != 0 || !strings.Contains(out, "--matrix") {
		t.Errorf("topo without option: exit %d, output %q; want its help", code, out)
	}
}

func TestNoDevices(t *testing.T) {
	for _, env := range []map[string]string{nil, {nvidiasmi.EnvIDs: ""}, {nvidiasmi.EnvIDs: " , ,"}} {
		for _, args := range [][]string{nil, {"-L"}, {"-q"}, {"-q", "-x"}, {"topo", "-m"}, {"--query-gpu=name", "--format=csv"}} {
			out, code := runEnv(t, env, args...)
			if out != "No devices were found\n" || code != nvidiasmi.ExitNotFound {
				t.Errorf("env %v nvidia-smi %q: exit %d, output %q; want 6, No devices were found", env, args, code, out)
			}
		}
		for _, args := range [][]string{{"-h"}, {"--version"}, {"--help-query-gpu"}} {
			if _, code := runEnv(t, env, args...); code != 0 {
				t.Errorf("nvidia-smi %q without devices: exit %d, want 0", args, code)
			}
		}
	}
}

func TestEnv_Replicas(t *testing.T) {
	f := newFixture(t, mustPreset(t, "pcie-8gpu"), []int{3, 5}, nil)
	a, b := f.gpus[0], f.gpus[1]
	// Three replicas of two GPUs, with one UUID per entry.
	f.env[nvidiasmi.EnvIDs] = "fake-3::0,fake-3::1,fake-5::0"
	f.env[status.EnvUUIDs] = a.UUID + "," + a.UUID + "," + b.UUID
	out, code := f.run(t, "-L")
	want := "GPU 0: NVIDIA L40S (UUID: " + a.UUID + ")\nGPU 1: NVIDIA L40S (UUID: " + b.UUID + ")\n"
	if code != 0 || out != want {
		t.Errorf("-L with replicas: exit %d\n%s\nwant\n%s", code, out, want)
	}
	// One UUID per GPU works too.
	f.env[status.EnvUUIDs] = a.UUID + "," + b.UUID
	if out, _ := f.run(t, "-L"); out != want {
		t.Errorf("-L with replicas, one UUID per GPU:\n%s\nwant\n%s", out, want)
	}
}

func TestEnv_UnknownIdentity(t *testing.T) {
	f := newFixture(t, mustPreset(t, "hgx-h100"), []int{0, 1, 2}, nil)
	cases := []struct {
		name   string
		change func(env map[string]string)
		want   string
	}{
		{"uuid list of another length", func(env map[string]string) {
			env[status.EnvUUIDs] = f.gpus[0].UUID
		}, "GPU 0: N/A (UUID: N/A)\nGPU 1: N/A (UUID: N/A)\nGPU 2: N/A (UUID: N/A)\n"},
		{"a malformed uuid", func(env map[string]string) {
			env[status.EnvUUIDs] = f.gpus[0].UUID + ",GPU-1234," + f.gpus[2].UUID
		}, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + f.gpus[0].UUID + ")\nGPU 1: N/A (UUID: N/A)\nGPU 2: NVIDIA H100 80GB HBM3 (UUID: " + f.gpus[2].UUID + ")\n"},
		{"another device's status file", func(env map[string]string) {
			env[status.EnvUUIDs] = f.gpus[1].UUID + "," + f.gpus[0].UUID + "," + f.gpus[2].UUID
		}, "GPU 0: N/A (UUID: " + f.gpus[1].UUID + ")\nGPU 1: N/A (UUID: " + f.gpus[0].UUID + ")\nGPU 2: NVIDIA H100 80GB HBM3 (UUID: " + f.gpus[2].UUID + ")\n"},
		{"no status directory", func(env map[string]string) {
			env[status.EnvStatusDir] = filepath.Join(f.dir, "missing")
		}, "GPU 0: N/A (UUID: " + f.gpus[0].UUID + ")\nGPU 1: N/A (UUID: " + f.gpus[1].UUID + ")\nGPU 2: N/A (UUID: " + f.gpus[2].UUID + ")\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := make(map[string]string)
			for k, v := range f.env {
				env[k] = v
			}
			tc.change(env)
			out, code := runEnv(t, env, "-L")
			if code != 0 || out != tc.want {
				t.Errorf("exit %d\n%s\nwant\n%s", code, out, tc.want)
			}
		})
	}
	// A status file that does not validate is an unknown identity too.
	if err := os.WriteFile(filepath.Join(f.dir, status.FileName(f.gpus[1].UUID)), []byte(`{"apiVersion":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := f.run(t, "--query-gpu=index,name", "--format=csv,noheader"); out != "0, NVIDIA H100 80GB HBM3\n1, [N/A]\n2, NVIDIA H100 80GB HBM3\n" {
		t.Errorf("with an invalid status file: %q", out)
	}
}

func TestTopology_Errors(t *testing.T) {
	f := newFixture(t, mustPreset(t, "dgx1-volta"), []int{0, 1, 4}, nil)
	for _, links := range []string{"", "SYS;NV1=0-7", "FAST"} {
		f.env["VIRTUAL_GPU_LINKS"] = links
		out, code := f.run(t, "topo", "-m")
		if code != nvidiasmi.ExitUnknownError || !strings.HasPrefix(out, "Unable to determine the topology of the GPUs: ") {
			t.Errorf("VIRTUAL_GPU_LINKS=%q: exit %d, output %q; want 255 and an explanation", links, code, out)
		}
	}
	// Links the plugin had to omit (too long for a variable) are named.
	f.env["VIRTUAL_GPU_LINKS"] = ""
	f.env["VIRTUAL_GPU_LINKS_OMITTED"] = "71604 bytes"
	if out, code := f.run(t, "topo", "-m"); code != nvidiasmi.ExitUnknownError || !strings.Contains(out, "too long to pass to the container (VIRTUAL_GPU_LINKS_OMITTED=71604 bytes)") {
		t.Errorf("omitted links: exit %d, output %q", code, out)
	}
	// Without VIRTUAL_GPU_NUMA_NODES the status files give the NUMA nodes.
	f = newFixture(t, mustPreset(t, "dgx1-volta"), []int{0, 4}, nil)
	delete(f.env, "VIRTUAL_GPU_NUMA_NODES")
	out, code := f.run(t, "topo", "-m")
	if code != 0 || !strings.Contains(out, "GPU0\t X \tNV2\t0-19,40-59\t0\t\tN/A\n") || !strings.Contains(out, "GPU1\tNV2\t X \t20-39,60-79\t1\t\tN/A\n") {
		t.Errorf("topo -m without VIRTUAL_GPU_NUMA_NODES:\n%s", out)
	}
}

// TestCSV_EveryLineHasEveryField asks for every field at once, as
// monitoring tools do with their 15-30: one line per GPU with exactly as
// many values as fields, none containing the separator.
func TestCSV_EveryLineHasEveryField(t *testing.T) {
	names := strings.Fields(strings.NewReplacer(`"`, " ", " or ", " ").Replace(readTestdata(t, "help-query-gpu-580-names.txt")))
	f := newFixture(t, mustPreset(t, "dgx2"), []int{0, 3, 7, 8, 15}, nil)
	for _, format := range []string{"csv", "csv,noheader", "csv,nounits", "nounits,noheader,csv"} {
		out, code := f.run(t, "--query-gpu="+strings.Join(names, ","), "--format="+format)
		if code != 0 {
			t.Fatalf("--format=%s: exit %d: %s", format, code, out)
		}
		lines := listLines(out)
		want := 5
		if !strings.Contains(format, "noheader") {
			want++
		}
		if len(lines) != want {
			t.Fatalf("--format=%s: %d lines, want %d", format, len(lines), want)
		}
		for i, l := range lines {
			if n := len(strings.Split(l, ", ")); n != len(names) {
				t.Errorf("--format=%s line %d has %d values, want %d", format, i, n, len(names))
			}
			if strings.Contains(format, "nounits") && i > 0 && strings.Contains(l, " MiB") {
				t.Errorf("--format=%s line %d has units: %s", format, i, l)
			}
		}
	}
}

func TestHelpQueryGPU_NamesAndHeaderOfDriver580(t *testing.T) {
	var headings []string
	for _, l := range listLines(helpQueryGPU(t)) {
		if strings.HasPrefix(l, `"`) {
			headings = append(headings, l)
		}
	}
	want := listLines(readTestdata(t, "help-query-gpu-580-names.txt"))
	if strings.Join(headings, "\n") != strings.Join(want, "\n") {
		t.Errorf("--help-query-gpu names and aliases differ from driver 580's:\n%s\nwant\n%s", strings.Join(headings, "\n"), strings.Join(want, "\n"))
	}
	var canonical []string
	for _, h := range want {
		canonical = append(canonical, strings.Trim(strings.Split(h, " or ")[0], `"`))
	}
	f := newFixture(t, mustPreset(t, "hgx-h100"), []int{0}, nil)
	out, _ := f.run(t, "--query-gpu="+strings.Join(canonical, ","), "--format=csv,nounits")
	if got, want := listLines(out)[0], strings.TrimSuffix(readTestdata(t, "csv-header-580.txt"), "\n"); got != want {
		t.Errorf("CSV header (with nounits) differs from driver 580's:\n%s\nwant\n%s", got, want)
	}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// smiLog is the part of `nvidia-smi -q -x` that XML consumers read.
type smiLog struct {
	XMLName       xml.Name `xml:"nvidia_smi_log"`
	DriverVersion string   `xml:"driver_version"`
	CUDAVersion   string   `xml:"cuda_version"`
	AttachedGPUs  int      `xml:"attached_gpus"`
	GPUs          []struct {
		ID          string `xml:"id,attr"`
		ProductName string `xml:"product_name"`
		UUID        string `xml:"uuid"`
		MinorNumber int    `xml:"minor_number"`
		PCI         struct {
			BusID string `xml:"pci_bus_id"`
		} `xml:"pci"`
		FBMemory struct {
			Total string `xml:"total"`
			Used  string `xml:"used"`
		} `xml:"fb_memory_usage"`
		Utilization struct {
			GPU string `xml:"gpu_util"`
		} `xml:"utilization"`
		Temperature struct {
			GPU string `xml:"gpu_temp"`
		} `xml:"temperature"`
		Power struct {
			Draw  string `xml:"average_power_draw"`
			Limit string `xml:"current_power_limit"`
		} `xml:"gpu_power_readings"`
		Clocks struct {
			SM string `xml:"sm_clock"`
		} `xml:"clocks"`
	} `xml:"gpu"`
}

func TestQueryXML_Parses(t *testing.T) {
	f := newFixture(t, mustPreset(t, "dgx1-pascal"), []int{1, 2, 6}, nil)
	out, code := f.run(t, "-q", "-x")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var log smiLog
	if err := xml.Unmarshal([]byte(out), &log); err != nil {
		t.Fatalf("-q -x is not XML: %v", err)
	}
	if log.DriverVersion != topology.DriverVersion || log.CUDAVersion != topology.CUDAVersion || log.AttachedGPUs != 3 || len(log.GPUs) != 3 {
		t.Fatalf("log %+v", log)
	}
	for i, g := range log.GPUs {
		s := f.gpus[i]
		if g.ID != s.PCIBusID || g.PCI.BusID != s.PCIBusID || g.UUID != s.UUID || g.ProductName != s.Product || g.MinorNumber != s.MinorNumber ||
			g.FBMemory.Total != "16384 MiB" || g.FBMemory.Used != "0 MiB" || g.Utilization.GPU != "0 %" || g.Temperature.GPU != "33 C" ||
			g.Power.Draw != "30.00 W" || g.Power.Limit != "300.00 W" || g.Clocks.SM != "405 MHz" {
			t.Errorf("gpu %d: %+v", i, g)
		}
	}
}

// FuzzRun runs nvidia-smi with arbitrary arguments (NUL-separated) in a
// container with three GPUs: it never panics, never writes to stderr and
// exits with one of the documented codes.
func FuzzRun(f *testing.F) {
	for _, s := range []string{"", "-L", "-q\x00-x", "--query-gpu=name,index\x00--format=csv", "-i\x000,1\x00-L", "topo\x00-m",
		"--id=GPU-x", "--format=csv", "-h", "--query-gpu\x00gpu_name\x00--format\x00csv,nounits,noheader", "topo\x00-i",
		"--set-load=90,4096\x00-i\x000", "--set-load\x00clear"} {
		f.Add(s)
	}
	fx := newQuickFixture(f, mustPreset(f, "dgx1-volta"), []int{0, 3, 4})
	f.Fuzz(func(t *testing.T, joined string) {
		var args []string
		if joined != "" {
			args = strings.Split(joined, "\x00")
		}
		_, code := fx.run(t, args...)
		switch code {
		case nvidiasmi.ExitOK, nvidiasmi.ExitInvalidArgument, nvidiasmi.ExitNotSupported, nvidiasmi.ExitNotFound, nvidiasmi.ExitUnknownError:
		default:
			t.Fatalf("nvidia-smi %q: exit code %d", args, code)
		}
	})
}
