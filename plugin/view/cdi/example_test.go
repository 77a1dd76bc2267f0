package cdi_test

import (
	"fmt"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

// The spec of two GPUs of the default kind backed by /dev/null, read-write
// (no mknod), with the shared device nodes, the plugin binary mounted as
// nvidia-smi and the status directory, and the names Allocate answers for
// them.
func ExampleBuild() {
	spec, err := cdi.Build(cdi.Config{
		GPUs:        []cdi.GPU{{ID: "fake-1", Minor: 1}, {ID: "fake-0", Minor: 0}},
		SharedNodes: cdi.DefaultSharedNodes(cdi.DefaultNodeSource),
		Mounts: []cdi.Mount{
			{HostPath: "/usr/bin/virtual-gpu-device-plugin", ContainerPath: "/usr/bin/nvidia-smi"},
			{HostPath: "/run/virtual-gpu", ContainerPath: "/run/virtual-gpu"},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := cdi.Marshal(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(b))
	names, _ := cdi.DefaultKind.QualifiedNames([]string{"fake-0", "fake-1"})
	fmt.Println(names)
	// Output:
	// cdiVersion: 0.5.0
	// kind: unicore.mcyou.cc/gpu
	// devices:
	//   - name: fake-0
	//     containerEdits:
	//       deviceNodes:
	//         - path: /dev/nvidia0
	//           hostPath: /dev/null
	//           permissions: rw
	//   - name: fake-1
	//     containerEdits:
	//       deviceNodes:
	//         - path: /dev/nvidia1
	//           hostPath: /dev/null
	//           permissions: rw
	// containerEdits:
	//   deviceNodes:
	//     - path: /dev/nvidiactl
	//       hostPath: /dev/null
	//       permissions: rw
	//     - path: /dev/nvidia-uvm
	//       hostPath: /dev/null
	//       permissions: rw
	//   mounts:
	//     - hostPath: /usr/bin/virtual-gpu-device-plugin
	//       containerPath: /usr/bin/nvidia-smi
	//       options:
	//         - ro
	//         - nosuid
	//         - nodev
	//         - rbind
	//         - rprivate
	//     - hostPath: /run/virtual-gpu
	//       containerPath: /run/virtual-gpu
	//       options:
	//         - ro
	//         - nosuid
	//         - nodev
	//         - rbind
	//         - rprivate
	// [unicore.mcyou.cc/gpu=fake-0 unicore.mcyou.cc/gpu=fake-1]
}
