package topology

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// DefaultMachineIDPath is where systemd keeps the machine id
// (machine-id(5)). In a pod it is the container's own unless the host's
// file is mounted there.
const DefaultMachineIDPath = "/etc/machine-id"

// Where a node identity came from, as NodeIdentity reports it.
const (
	IdentityNodeName  = "node-name"
	IdentityMachineID = "machine-id"
)

// NodeIdentity picks the identity GPU UUIDs are derived from
// (DeriveUUID): the node's name (-node-name) when it is set, else the
// machine id, the content of DefaultMachineIDPath (pass "" when it could not be
// read). Never the hostname: in a pod that is the pod's name, which changes
// with every new pod. It returns the identity and where it came from
// (IdentityNodeName or IdentityMachineID). A machine id must be 32
// hexadecimal digits, as machine-id(5) says (a trailing newline is
// allowed); "uninitialized" (a first boot in progress), an empty file or
// anything else is an error naming what was found, as is having neither.
func NodeIdentity(nodeName, machineID string) (identity, source string, err error) {
	if nodeName = strings.TrimSpace(nodeName); nodeName != "" {
		return nodeName, IdentityNodeName, nil
	}
	id := strings.TrimSuffix(machineID, "\n")
	switch {
	case id == "":
		return "", "", errors.New("no node identity for the GPU UUIDs: set -node-name, or provide " + DefaultMachineIDPath)
	case len(id) != 32 || strings.Trim(strings.ToLower(id), "0123456789abcdef") != "":
		return "", "", fmt.Errorf("no node identity for the GPU UUIDs: machine id %q is not 32 hexadecimal digits; set -node-name", Clip(id))
	}
	return strings.ToLower(id), IdentityMachineID, nil
}

// ReadMachineID returns the content of the machine-id file at path
// (DefaultMachineIDPath), or "" when it is not a small regular file that
// reads.
func ReadMachineID(path string) string {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}
