package status

import (
	"fmt"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// NewGPU returns the status of GPU index of machine m on the node whose
// identity is node: its identity from the machine (product, memory, compute
// capability, power limit, bus id, minor number, NUMA node, CPU affinity),
// UUID and serial derived from node and the device id (topology.DeriveUUID), the fake
// driver's versions, healthy since now, and idle telemetry updated now: 0 %
// utilization, no memory used, topology.IdleTemperatureC, the model's idle power, the
// idle SM clock (and its video clock) and the maximum memory clock. The driver reserves 0.6 % of
// the memory. It returns an error if index is out of range.
func NewGPU(m *topology.Machine, index int, node string, now time.Time) (*GPU, error) {
	if index < 0 || index >= m.Len() {
		return nil, fmt.Errorf("GPU index %d of machine %s with %d GPUs: %w", index, m.Name(), m.Len(), ErrInvalidStatus)
	}
	model := m.GPUModel()
	id := m.ID(index)
	cc := model.Compute.String()
	board := model.Board()
	max := board.MaxClocks
	t := Telemetry{
		Updated:        now,
		TemperatureC:   topology.IdleTemperatureC,
		PowerDrawW:     float64(model.IdlePowerW),
		SMClockMHz:     board.IdleSMClockMHz,
		MemoryClockMHz: max.MemoryMHz,
		VideoClockMHz:  board.VideoClockMHz(board.IdleSMClockMHz),
	}
	if board.HBM {
		v := topology.IdleMemoryTemperatureC
		t.MemoryTemperatureC = &v
	}
	if board.Fan {
		v := topology.IdleFanSpeedPercent
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
		MemoryReservedMiB: topology.ReservedMiB(model.MemoryMiB),
		PCIBusID:          m.PCIBusID(index),
		NUMANode:          m.NUMA(index),
		CPUAffinity:       m.CPUAffinity(index),
		PowerLimitW:       model.PowerLimitW,
		MaxClocks:         Clocks{GraphicsMHz: max.GraphicsMHz, SMMHz: max.SMMHz, MemoryMHz: max.MemoryMHz, VideoMHz: max.VideoMHz},
		DriverVersion:     topology.DriverVersion,
		CUDAVersion:       topology.CUDAVersion,
		Health:            Health{Healthy: true, Since: now},
		Telemetry:         t,
	}, nil
}
