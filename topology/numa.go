package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// SysfsNodeDir is the directory, relative to the sysfs root, that lists the
// host's NUMA nodes as node0, node1, ….
const SysfsNodeDir = "devices/system/node"

// HostNUMANodes returns the sorted NUMA node ids of the host, read from the
// entries node<N> of SysfsNodeDir in fsys, which is rooted at the sysfs
// mount: the plugin passes os.DirFS("/sys") (or its -sysfs-root flag), tests
// an fstest.MapFS. A missing directory (no sysfs, or a kernel without NUMA)
// means the nodes are unknown: it returns nil and no error. Other read errors
// are returned.
func HostNUMANodes(fsys fs.FS) ([]int, error) {
	entries, err := fs.ReadDir(fsys, SysfsNodeDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read host NUMA nodes from %s: %w", SysfsNodeDir, err)
	}
	var ids []int
	for _, e := range entries {
		d, ok := strings.CutPrefix(e.Name(), "node")
		if !ok || d == "" || len(d) > 1 && d[0] == '0' {
			continue
		}
		id, err := strconv.Atoi(d)
		if err != nil || id < 0 {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}
