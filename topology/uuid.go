package topology

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// uuidDomain separates the hash input of DeriveUUID from any other use of
// SHA-256 over the same strings; "v1" names this derivation, so a future
// change of scheme can never reproduce an old UUID for another GPU.
const uuidDomain = "virtual-gpu-device-plugin/gpu-uuid/v1"

// identityHash is SHA-256 over the domain, the node and the device id,
// separated by NUL bytes (which neither may contain, so the input is
// unambiguous).
func identityHash(node, id string) [sha256.Size]byte {
	return sha256.Sum256([]byte(uuidDomain + "\x00" + node + "\x00" + id))
}

// DeriveUUID returns the UUID of device id (such as "fake-3") on the node
// whose identity is node (its Kubernetes node name, or any string stable for
// the node's lifetime). It is deterministic, so the plugin may compute it on
// every start or store it: the same node and id always give the same UUID,
// and different ones give different UUIDs with overwhelming probability.
//
// The value is "GPU-" and the first 16 bytes of SHA-256(
// "virtual-gpu-device-plugin/gpu-uuid/v1" NUL node NUL id) in lower-case hex,
// grouped 8-4-4-4-12, the format nvidia-smi prints (-L, --query-gpu=uuid,
// NVIDIA_VISIBLE_DEVICES). No bits are forced: NVIDIA's GPU UUIDs are not RFC
// 4122 UUIDs and carry no version or variant (GPU-9bb57e8e-f94d-4b95-7c33-…,
// GPU-a230e637-c9e1-1b61-3830-…), so ours look as random as theirs. Node and
// id should not contain NUL bytes.
func DeriveUUID(node, id string) string {
	h := identityHash(node, id)
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// DeriveSerial returns the board serial number of device id on node: 13
// digits, as on NVIDIA data-center boards ("1320221037416"), from bytes
// 16..23 of the same hash as DeriveUUID.
func DeriveSerial(node, id string) string {
	h := identityHash(node, id)
	return fmt.Sprintf("1%012d", binary.BigEndian.Uint64(h[16:24])%1_000_000_000_000)
}
