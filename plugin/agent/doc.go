// Package agent is the one GPU agent behind every kubelet API the plugin
// serves: it decides what is served and changes it, and nothing else does.
//
//   - The configuration in force: the profile the Node's label selects
//     (WatchNode), the profiles directory (DirWatch, Reload) and SIGHUP
//     (Reload), resolved by a Source (the options package's). Begin chooses
//     and stores the first one; Start brings it into force.
//   - Live changes (Reload, a new label): a new Set is built and compared
//     whole with the one in force (Set.Equal); a different one is stored
//     with its configuration event in one transaction and swapped into every
//     Target at once, then into the host files, the telemetry, the fault
//     plan and the Node's GPU labels.
//   - The one health path (SetHealth): the state file, the GPU's status
//     file, every Target, the telemetry and the metrics, in that order,
//     once. The admin API and the fault plans call it.
//   - What an allocation does besides being stored (RecordAllocation): its
//     load socket, the tracker's and the pruner's nudges; the index of the
//     active records (ActiveIndex) the telemetry and the load sockets read.
//
// A Target is a kubelet API: the device plugin (package plugin) implements
// it, a DRA driver will. The agent imports no kubelet API itself.
package agent
