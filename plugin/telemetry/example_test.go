package telemetry_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// fixedClock is a Clock that always reads one time.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// staticHoldings is a HolderSource that never changes.
type staticHoldings []telemetry.Holding

func (h staticHoldings) Holdings() ([]telemetry.Holding, error) { return h, nil }

// Two GPUs of an A100 machine, the second held by a training pod: its
// utilization and memory carry the pod's labels, the first idles.
func Example() {
	m, err := topology.Preset("dgx-a100")
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := telemetry.New(telemetry.Config{
		GPUs: []telemetry.GPU{
			{Index: 0, UUID: "GPU-11111111-2222-3333-4444-555555555555", PCIBusID: m.PCIBusID(0), DeviceIDs: []string{"fake-0"}},
			{Index: 1, UUID: "GPU-66666666-7777-8888-9999-000000000000", PCIBusID: m.PCIBusID(1), DeviceIDs: []string{"fake-1"}},
		},
		GPUModel: m.GPUModel(),
		Hostname: "node-1",
		Holders: staticHoldings{{
			Holder:    telemetry.Holder{Namespace: "ml", Pod: "train-0", Container: "trainer"},
			DeviceIDs: []string{"fake-1"},
		}},
		Model: telemetry.ModelSteady,
		Seed:  1,
		Clock: fixedClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	rs, err := e.Readings()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, line := range strings.Split(string(e.AppendExposition(nil, rs)), "\n") {
		if strings.HasPrefix(line, "DCGM_FI_DEV_GPU_UTIL") || strings.HasPrefix(line, "DCGM_FI_DEV_FB_USED") {
			fmt.Println(line)
		}
	}
	// Output:
	// DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-11111111-2222-3333-4444-555555555555",pci_bus_id="00000000:01:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-40GB",Hostname="node-1"} 0
	// DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-66666666-7777-8888-9999-000000000000",pci_bus_id="00000000:05:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-40GB",Hostname="node-1",container="trainer",namespace="ml",pod="train-0"} 79
	// DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-11111111-2222-3333-4444-555555555555",pci_bus_id="00000000:01:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-40GB",Hostname="node-1"} 0
	// DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-66666666-7777-8888-9999-000000000000",pci_bus_id="00000000:05:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-40GB",Hostname="node-1",container="trainer",namespace="ml",pod="train-0"} 16692
}
