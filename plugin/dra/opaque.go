package dra

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// The opaque configuration of the driver: what a DeviceClass or a claim
// passes to it (spec.config[].opaque with driver = the driver's name),
// decoded strictly, so that a typo fails Prepare with an error naming it
// instead of doing nothing.
const (
	// ConfigAPIVersion and ConfigKind identify the configuration.
	ConfigAPIVersion = "gpu.unicore.mcyou.cc/v1alpha1"
	ConfigKind       = "GpuConfig"
	// maxConfigEnv bounds the variables of one configuration, and
	// maxConfigValue the bytes of one value: a container's environment,
	// not a file.
	maxConfigEnv   = 64
	maxConfigValue = 4096
)

// GpuConfig is the driver's opaque configuration of a claim's GPUs:
//
//	apiVersion: gpu.unicore.mcyou.cc/v1alpha1
//	kind: GpuConfig
//	env:
//	  NCCL_DEBUG: INFO
//
// Env are variables the containers using the configured requests get,
// beside the driver's own (VIRTUAL_GPU_*, NVIDIA_VISIBLE_DEVICES), which
// it may not set: a fake GPU's configuration is seen where a workload
// looks for it, in its environment. The configurations of a claim apply in
// the order of its allocation (the class's, then the claim's), a later
// value of a variable replacing an earlier one.
type GpuConfig struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Env        map[string]string `json:"env,omitempty"`
}

// envName is a variable name a configuration may set: what a shell
// exports (the kubelet's C_IDENTIFIER).
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv reports whether name is the driver's own.
func reservedEnv(name string) bool {
	return strings.HasPrefix(name, "VIRTUAL_GPU_") || name == "NVIDIA_VISIBLE_DEVICES"
}

// DecodeConfig decodes one opaque configuration of the driver, strictly:
// the apiVersion and kind must be ConfigAPIVersion and ConfigKind, every
// field known, every variable name valid and not the driver's own. An
// error wraps ErrInvalidConfig and names what was wrong.
func DecodeConfig(raw []byte) (GpuConfig, error) {
	var c GpuConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return GpuConfig{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return GpuConfig{}, fmt.Errorf("%w: data after the object", ErrInvalidConfig)
	}
	if c.APIVersion != ConfigAPIVersion || c.Kind != ConfigKind {
		return GpuConfig{}, fmt.Errorf("%w: apiVersion %q, kind %q: want apiVersion %s, kind %s",
			ErrInvalidConfig, c.APIVersion, c.Kind, ConfigAPIVersion, ConfigKind)
	}
	if len(c.Env) > maxConfigEnv {
		return GpuConfig{}, fmt.Errorf("%w: %d variables in env, at most %d", ErrInvalidConfig, len(c.Env), maxConfigEnv)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		switch {
		case !envName.MatchString(k):
			return GpuConfig{}, fmt.Errorf("%w: env: %q is not a variable name (letters, digits and '_', not starting with a digit)", ErrInvalidConfig, k)
		case reservedEnv(k):
			return GpuConfig{}, fmt.Errorf("%w: env: %s is set by the driver itself", ErrInvalidConfig, k)
		case len(c.Env[k]) > maxConfigValue:
			return GpuConfig{}, fmt.Errorf("%w: env: %s is %d bytes long, at most %d", ErrInvalidConfig, k, len(c.Env[k]), maxConfigValue)
		}
	}
	return c, nil
}

// requestEnvs returns, by request name, the variables the driver's
// configurations of the allocation give the containers using the request,
// in the allocation's order. requests are the claim's requests whose
// devices are the driver's. An error names the configuration (its
// position and source) and wraps ErrInvalidConfig.
func requestEnvs(driver string, configs []resourceapi.DeviceAllocationConfiguration, requests []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != driver {
			continue
		}
		gc, err := DecodeConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("opaque config %d (from the %s): %w", i, configSource(c.Source), err)
		}
		for _, r := range requests {
			if !appliesTo(c.Requests, r) {
				continue
			}
			if out[r] == nil {
				out[r] = map[string]string{}
			}
			maps.Copy(out[r], gc.Env)
		}
	}
	return out, nil
}

// appliesTo reports whether a configuration for requests applies to the
// request named req ("<request>" or "<request>/<subrequest>"): it lists
// no requests, or req, or req's main request.
func appliesTo(requests []string, req string) bool {
	if len(requests) == 0 {
		return true
	}
	main, _, _ := strings.Cut(req, "/")
	return slices.Contains(requests, req) || slices.Contains(requests, main)
}

// configSource names where a configuration comes from.
func configSource(s resourceapi.AllocationConfigSource) string {
	switch s {
	case resourceapi.AllocationConfigSourceClass:
		return "device class"
	case resourceapi.AllocationConfigSourceClaim:
		return "claim"
	}
	return "allocation"
}
