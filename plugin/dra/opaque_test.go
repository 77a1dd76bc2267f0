package dra

import (
	"errors"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeConfig(t *testing.T) {
	good := `{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"NCCL_DEBUG":"INFO","_X1":""}}`
	c, err := DecodeConfig([]byte(good))
	if err != nil || c.Env["NCCL_DEBUG"] != "INFO" || len(c.Env) != 2 {
		t.Fatalf("DecodeConfig(%s) = %+v, %v", good, c, err)
	}
	if _, err := DecodeConfig([]byte(`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig"}`)); err != nil {
		t.Errorf("no env: %v", err)
	}
	for _, tc := range []struct{ raw, says string }{
		{`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","sharing":{}}`, `unknown field "sharing"`},
		{`{"apiVersion":"gpu.unicore.mcyou.cc/v1","kind":"GpuConfig"}`, `apiVersion "gpu.unicore.mcyou.cc/v1"`},
		{`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"MigConfig"}`, `kind "MigConfig"`},
		{`{"kind":"GpuConfig"}`, `apiVersion ""`},
		{`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"A-B":"1"}}`, `"A-B" is not a variable name`},
		{`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"NVIDIA_VISIBLE_DEVICES":"all"}}`, "NVIDIA_VISIBLE_DEVICES is set by the driver"},
		{`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"A":1}}`, "cannot unmarshal number"},
		{`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"A":"` + strings.Repeat("x", maxConfigValue+1) + `"}}`, "at most 4096"},
		{`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig"} {}`, "data after the object"},
		{``, "EOF"},
		{`[]`, "cannot unmarshal array"},
	} {
		_, err := DecodeConfig([]byte(tc.raw))
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("DecodeConfig(%.60s): %v, want ErrInvalidConfig saying %q", tc.raw, err, tc.says)
		}
	}
}

// TestRequestEnvs: configurations apply in the allocation's order, to
// the requests they name (a main request names its subrequests), others'
// drivers' are skipped.
func TestRequestEnvs(t *testing.T) {
	cfg := func(driver, env string, requests ...string) resourceapi.DeviceAllocationConfiguration {
		return resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClass, Requests: requests,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver,
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":` + env + `}`)}}}}
	}
	got, err := requestEnvs("d", []resourceapi.DeviceAllocationConfiguration{
		cfg("d", `{"A":"class","B":"class"}`),
		cfg("other", `{"A":"other"}`),
		cfg("d", `{"A":"claim"}`, "x"),
		{Source: resourceapi.AllocationConfigSourceClaim}, // no opaque part
	}, []string{"x/small", "y"})
	if err != nil {
		t.Fatal(err)
	}
	if got["x/small"]["A"] != "claim" || got["x/small"]["B"] != "class" || got["y"]["A"] != "class" {
		t.Errorf("envs %v", got)
	}
}

// FuzzDecodeConfig: any input decodes or fails with ErrInvalidConfig,
// never panics; what decodes sets no variable of the driver's.
func FuzzDecodeConfig(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"A":"1"}}`))
	f.Add([]byte(`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"VIRTUAL_GPU_IDS":"x"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := DecodeConfig(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		for k := range c.Env {
			if reservedEnv(k) || !envName.MatchString(k) {
				t.Fatalf("decoded variable %q", k)
			}
		}
	})
}
