package status

import (
	"fmt"
	"strings"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Idle values NewGPU sets until a load model fills the telemetry.
const (
	// IdleTemperatureC is the GPU temperature of an idle GPU.
	IdleTemperatureC = 33
	// IdleMemoryTemperatureC is the memory temperature of an idle HBM board.
	IdleMemoryTemperatureC = 36
	// IdleFanSpeedPercent is the fan speed of an idle board with a fan.
	IdleFanSpeedPercent = 30
)

// modelClocks are the maximum clocks and the idle graphics clock of a model.
type modelClocks struct {
	max     Clocks
	idleMHz int
	hbm     bool // the board has HBM, with a memory temperature sensor
}

// clocksByCC are typical values nvidia-smi reports (max clocks from -q "Max
// Clocks"; idle SM clock in P0; memory runs at its maximum in P0), per
// compute capability. HBM boards report a memory temperature.
var clocksByCC = map[string]modelClocks{
	"6.0":  {max: Clocks{1480, 1480, 715, 1480}, idleMHz: 405, hbm: true},  // P100 SXM2
	"7.0":  {max: Clocks{1530, 1530, 877, 1372}, idleMHz: 135, hbm: true},  // V100 SXM2/SXM3
	"7.5":  {max: Clocks{1590, 1590, 5001, 1470}, idleMHz: 300},            // T4
	"8.0":  {max: Clocks{1410, 1410, 1215, 1290}, idleMHz: 210, hbm: true}, // A100 SXM4
	"8.6":  {max: Clocks{2100, 2100, 8001, 1950}, idleMHz: 210},            // RTX A6000, A40
	"8.9":  {max: Clocks{2520, 2520, 9001, 1965}, idleMHz: 210},            // L40S
	"9.0":  {max: Clocks{1980, 1980, 2619, 1545}, idleMHz: 345, hbm: true}, // H100 SXM5
	"10.0": {max: Clocks{1965, 1965, 3996, 1965}, idleMHz: 120, hbm: true}, // B200
}

// memoryClockByProduct overrides the memory clock of boards whose memory is
// faster than their compute capability's typical one (H200: nvidia-smi -q in
// utkuozdemir/nvidia_gpu_exporter, internal/captures).
var memoryClockByProduct = map[string]int{
	"NVIDIA H200": 3201,
}

// hasFan reports whether a product is an actively cooled board (workstation
// and consumer cards); data-center boards are cooled by the chassis and
// nvidia-smi shows their fan speed as N/A.
func hasFan(product string) bool {
	for _, s := range []string{"RTX", "GeForce", "Quadro", "TITAN"} {
		if strings.Contains(product, s) {
			return true
		}
	}
	return false
}

// ReservedMiB is the memory the fake driver reserves on a GPU of totalMiB:
// 0.6 %, rounded down (memory.reserved). memory.used + memory.free is
// totalMiB − ReservedMiB(totalMiB).
func ReservedMiB(totalMiB int) int { return totalMiB * 6 / 1000 }

// NewGPU returns the status of GPU index of machine m on the node whose
// identity is node: its identity from the machine (product, memory, compute
// capability, power limit, bus id, minor number, NUMA node, CPU affinity),
// UUID and serial derived from node and the device id (topology.DeriveUUID), the fake
// driver's versions, healthy since now, and idle telemetry updated now: 0 %
// utilization, no memory used, IdleTemperatureC, the model's idle power, the
// idle SM clock and the maximum memory clock. The driver reserves 0.6 % of
// the memory. It returns an error if index is out of range.
func NewGPU(m *topology.Machine, index int, node string, now time.Time) (*GPU, error) {
	if index < 0 || index >= m.Len() {
		return nil, fmt.Errorf("GPU index %d of machine %s with %d GPUs: %w", index, m.Name(), m.Len(), ErrInvalidStatus)
	}
	model := m.GPUModel()
	id := m.ID(index)
	cc := model.Compute.String()
	clk, ok := clocksByCC[cc]
	if !ok {
		clk = modelClocks{}
	}
	if mem, ok := memoryClockByProduct[model.Product]; ok && clk.max.MemoryMHz != 0 {
		clk.max.MemoryMHz = mem
	}
	t := Telemetry{
		Updated:        now,
		TemperatureC:   IdleTemperatureC,
		PowerDrawW:     float64(model.IdlePowerW),
		SMClockMHz:     clk.idleMHz,
		MemoryClockMHz: clk.max.MemoryMHz,
	}
	if clk.hbm {
		v := IdleMemoryTemperatureC
		t.MemoryTemperatureC = &v
	}
	if hasFan(model.Product) {
		v := IdleFanSpeedPercent
		t.FanSpeedPercent = &v
	}
	return &GPU{
		APIVersion:        APIVersion,
		Kind:              Kind,
		ID:                id,
		UUID:              topology.DeriveUUID(node, id),
		Index:             index,
		MinorNumber:       m.MinorNumber(index),
		Serial:            topology.DeriveSerial(node, id),
		Product:           model.Product,
		Family:            model.Family,
		ComputeCapability: cc,
		MemoryTotalMiB:    model.MemoryMiB,
		MemoryReservedMiB: ReservedMiB(model.MemoryMiB),
		PCIBusID:          m.PCIBusID(index),
		NUMANode:          m.NUMA(index),
		CPUAffinity:       m.CPUAffinity(index),
		PowerLimitW:       model.PowerLimitW,
		MaxClocks:         clk.max,
		DriverVersion:     DriverVersion,
		CUDAVersion:       CUDAVersion,
		Health:            Health{Healthy: true, Since: now},
		Telemetry:         t,
	}, nil
}
