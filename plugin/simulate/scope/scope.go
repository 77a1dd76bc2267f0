// Package scope says which nodes the simulator (package simulate) takes on
// and where it keeps them: the node Selector, the state directory and each
// node's state file in it, and the defaults of the simulate command's own
// flags. It is apart from package simulate, and imports none of the DRA
// libraries, so that the process's options (and the suites that parse
// them, which build against an older Kubernetes) can name these without
// building the simulator.
package scope

import "path/filepath"

// Defaults of the simulate command's own flags.
const (
	// DefaultSelector is the default of -node-selector: the annotation
	// KWOK manages its nodes by (kwokctl's default).
	DefaultSelector = "kwok.x-k8s.io/node=fake"
	// DefaultStateDir is the default of -state: the simulator's state
	// directory, next to the plugin's state file.
	DefaultStateDir = "/var/lib/virtual-gpu/simulate"
	// DefaultWorkers is the default of -workers: how many nodes are
	// reconciled at once.
	DefaultWorkers = 16
)

// NodesDir is the directory of the per-node state files under the
// simulator's state directory: <StateDir>/nodes/<node>.db.
const NodesDir = "nodes"

// StatePath returns the state file of node under stateDir.
func StatePath(stateDir, node string) string {
	return filepath.Join(stateDir, NodesDir, node+".db")
}
