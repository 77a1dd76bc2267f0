// Package status is the per-GPU status files the plugin publishes and the
// containers read: one JSON document per GPU, <uuid>.json, in a directory the
// plugin mounts read-only into every container that gets virtual GPUs, at
// DefaultDir (/run/virtual-gpu). The fake nvidia-smi reads it (see
// cmd/virtual-gpu-device-plugin/nvidiasmi) to show a container exactly its
// GPUs; monitoring inside a container may read it too.
//
// # Format
//
// A file is a GPU value encoded as JSON (apiVersion
// virtual-gpu.unicore.mcyou.cc/v1, kind GPUStatus): the identity of the GPU
// (device id, UUID, host index and minor number, serial, product, memory,
// PCI bus id, compute capability, power limit, maximum clocks, NUMA node and
// CPU affinity), the fake driver's versions (topology.DriverVersion, topology.CUDAVersion),
// its health (healthy, reason, since) and its live telemetry (utilization,
// memory used, temperatures, power draw, clocks, fan, last XID, updated).
// Example, for GPU fake-0 of the hgx-h100 preset on node "node-a", idle
// (testdata/gpu-status.json, indented by the Writer, is this file):
//
//	{
//	  "apiVersion": "virtual-gpu.unicore.mcyou.cc/v1",
//	  "kind": "GPUStatus",
//	  "id": "fake-0",
//	  "uuid": "GPU-0ad70432-690a-8c80-736d-ffae01403654",
//	  "index": 0,
//	  "minorNumber": 0,
//	  "serial": "1801094594779",
//	  "product": "NVIDIA H100 80GB HBM3",
//	  "family": "hopper",
//	  "computeCapability": "9.0",
//	  "memoryTotalMiB": 81559,
//	  "memoryReservedMiB": 489,
//	  "pciBusId": "00000000:01:00.0",
//	  "numaNode": 0,
//	  "cpuAffinity": "0-55,112-167",
//	  "powerLimitW": 700,
//	  "maxClocks": {"graphicsMHz": 1980, "smMHz": 1980, "memoryMHz": 2619, "videoMHz": 1545},
//	  "driverVersion": "580.173.02",
//	  "cudaVersion": "13.0",
//	  "health": {"healthy": true, "since": "2026-01-02T03:04:05Z"},
//	  "telemetry": {
//	    "updated": "2026-01-02T03:04:05Z",
//	    "utilizationGpuPercent": 0, "utilizationMemoryPercent": 0,
//	    "memoryUsedMiB": 0, "temperatureC": 33, "memoryTemperatureC": 36,
//	    "powerDrawW": 85, "smClockMHz": 345, "memoryClockMHz": 2619,
//	    "fanSpeedPercent": null, "lastXid": null
//	  }
//	}
//
// Within
// apiVersion v1 new optional fields may be added: readers ignore fields they
// do not know (a running container keeps the nvidia-smi binary it was started
// with, while the plugin that writes the files may be newer). A reader
// refuses any other apiVersion or kind (ErrUnsupportedVersion) and a file
// whose values are out of range (ErrInvalidStatus).
//
// # Writing and reading
//
// A Writer owns the directory: it writes each file atomically (a temporary
// file in the same directory, fsync, rename, fsync of the directory), mode
// 0644 in a 0755 directory so that containers running as any user can read
// them, and Sync removes the files of GPUs no longer present. Nothing
// removes the files at shutdown: containers keep reading them while the
// plugin restarts.
//
// # Live values
//
// While the plugin's telemetry is on, the live values of every GPU are in
// one more file, telemetry.json (LiveFileName, kind GPUTelemetry: updated,
// and the telemetry of each GPU by UUID, in the format of a status file's
// telemetry), which the plugin replaces every second: atomically, but
// without fsync (WriteLive), and as one file rather than a file per GPU,
// so that the node's disk takes one small write a second. Where it has a
// GPU (Live.Apply), its values replace those of the GPU's status file,
// which keeps the values of when it was last written. Without the
// telemetry the plugin removes it (RemoveLive).
//
// Read and ReadGPUs read the files of the given UUIDs; a missing file wraps
// fs.ErrNotExist, and the GPU's identity is then unknown to the reader
// (nvidia-smi still lists it, with N/A values).
//
// # Identity
//
// topology.DeriveUUID gives a GPU its UUID from the node's identity and the device id,
// deterministically, in NVIDIA's format (GPU-xxxxxxxx-xxxx-xxxx-xxxx-
// xxxxxxxxxxxx); the plugin computes it once and may store it.
//
// # Container environment
//
// The plugin tells a container where its GPUs' files are with EnvUUIDs
// (VIRTUAL_GPU_UUIDS, the UUIDs in the order of VIRTUAL_GPU_IDS) and,
// optionally, EnvStatusDir (VIRTUAL_GPU_STATUS_DIR, default DefaultDir).
package status
