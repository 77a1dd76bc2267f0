// Package view is what a container that gets virtual GPUs sees besides the
// topology variables, and the host files behind it:
//
//   - View, a value of each configuration (New): the environment stored
//     with an allocation (Env: the GPU set's, and the load socket's
//     variable) and the rest of a container's answer (Answer:
//     VIRTUAL_GPU_UUIDS, NVIDIA_VISIBLE_DEVICES, the nvidia-smi and status
//     mounts, device nodes, CDI device names, and with -telemetry-writable
//     the allocation's load socket directory) as a Container, which a
//     kubelet API turns into its own answer;
//   - Files, one per process (NewFiles): the files those answers name on
//     the host — the nvidia-smi binary in -tools-dir, the status files in
//     status/ next to the state file (status), the CDI spec in -cdi-spec-dir
//     (cdi) — written at start, around every live change and on every
//     health change, and written again (Run) while a write of the status
//     files failed; and the telemetry's live values (Live). None of them is
//     ever removed: the kubelet replays cached answers on container
//     restarts, across plugin restarts too.
//
// Its subpackages are the formats and tools of the view: status (the GPU
// status files), cdi (the CDI spec), loadsock (the per-allocation load
// sockets) and nvidiasmi (the container's nvidia-smi).
package view
