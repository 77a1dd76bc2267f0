package cluster

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// Logger receives the harness's progress messages. *testing.T satisfies it.
type Logger interface {
	Logf(format string, args ...any)
}

// StderrLogger writes log lines with a timestamp to stderr.
type StderrLogger struct{}

// Logf implements Logger.
func (StderrLogger) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Environment variables that configure the harness.
const (
	// EnvCacheDir overrides the cache directory (default DefaultCacheDir).
	EnvCacheDir = "VGPU_E2E_CACHE"
	// EnvPluginBin names a prebuilt plugin binary; when unset the harness builds the plugin from the
	// repository.
	EnvPluginBin = "VGPU_PLUGIN_BIN"
	// EnvKeep, when "1", keeps the cluster's temporary directory (logs, configs) after Stop.
	EnvKeep = "VGPU_E2E_KEEP"
)

// DefaultCacheDir is where built Kubernetes binaries and the process registry live. It is outside the
// repository so that fresh clones on the same machine share it.
const DefaultCacheDir = "/var/cache/virtual-gpu-e2e"

// CacheDir returns $VGPU_E2E_CACHE or DefaultCacheDir.
func CacheDir() string {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d
	}
	return DefaultCacheDir
}

// Binaries are the paths of the Kubernetes binaries the cluster runs.
type Binaries struct {
	// Version is the Kubernetes version they were built from, e.g. "v1.36.3".
	Version           string
	Kubelet           string
	APIServer         string
	Scheduler         string
	ControllerManager string
	BuildTaken        time.Duration // zero when all came from the cache
}

// ModuleDir returns the directory of the e2e Go module: the nearest directory at or above the working
// directory whose go.mod declares the e2e module.
func ModuleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && regexp.MustCompile(`(?m)^module\s+\S+/e2e\s*$`).Match(b) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no e2e go.mod at or above %s", dir)
		}
	}
}

// KubernetesVersion returns the version of k8s.io/kubernetes required by the go.mod in moduleDir.
func KubernetesVersion(moduleDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(moduleDir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("read go.mod: %w", err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\d+\.\d+\.\d+)\b`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("no k8s.io/kubernetes requirement in %s", filepath.Join(moduleDir, "go.mod"))
	}
	return string(m[1]), nil
}

// cacheBinDir is the directory under cacheDir for binaries of name (a
// version) built by this machine's Go, for its architecture: binaries of
// another Go or architecture are never taken for them.
func cacheBinDir(ctx context.Context, cacheDir, name string) (string, error) {
	goVersion, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	return filepath.Join(cacheDir, "bin", fmt.Sprintf("%s-%s-%s", name, strings.TrimSpace(string(goVersion)), runtime.GOARCH)), nil
}

// EnsureKubeBinaries returns the kubelet, kube-apiserver, kube-scheduler and kube-controller-manager of
// the version pinned in moduleDir's go.mod, building each one that is not there yet with the go command
// into <cacheDir>/bin/<version>-<go version>-<arch>/. The build downloads modules from the Go module proxy (GOFLAGS=-mod=mod) and
// stamps the version into the binaries.
func EnsureKubeBinaries(ctx context.Context, moduleDir, cacheDir string, log Logger) (Binaries, error) {
	version, err := KubernetesVersion(moduleDir)
	if err != nil {
		return Binaries{}, err
	}
	binDir, err := cacheBinDir(ctx, cacheDir, version)
	if err != nil {
		return Binaries{}, err
	}
	bins := Binaries{
		Version:           version,
		Kubelet:           filepath.Join(binDir, "kubelet"),
		APIServer:         filepath.Join(binDir, "kube-apiserver"),
		Scheduler:         filepath.Join(binDir, "kube-scheduler"),
		ControllerManager: filepath.Join(binDir, "kube-controller-manager"),
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("create %s: %w", binDir, err)
	}
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := strings.Join([]string{
		"-s", "-w",
		"-X", "k8s.io/component-base/version.gitVersion=" + version,
		"-X", "k8s.io/component-base/version.gitMajor=" + major,
		"-X", "k8s.io/component-base/version.gitMinor=" + minor,
		"-X", "k8s.io/component-base/version.gitTreeState=clean",
	}, " ")
	// -buildvcs=false: the binaries are Kubernetes', not this repository's.
	env := append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0")
	for _, b := range []struct{ pkg, out string }{
		{"k8s.io/kubernetes/cmd/kubelet", bins.Kubelet},
		{"k8s.io/kubernetes/cmd/kube-apiserver", bins.APIServer},
		// These two share most packages with the first two: they link in seconds to minutes after them.
		{"k8s.io/kubernetes/cmd/kube-scheduler", bins.Scheduler},
		{"k8s.io/kubernetes/cmd/kube-controller-manager", bins.ControllerManager},
	} {
		if fi, err := os.Stat(b.out); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			continue
		}
		log.Logf("building %s %s into %s (cold: several minutes)", b.pkg, version, binDir)
		start := time.Now()
		tmp := b.out + ".tmp"
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", tmp, b.pkg)
		cmd.Dir = moduleDir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			os.Remove(tmp)
			return Binaries{}, fmt.Errorf("build %s: %w: %s", b.pkg, err, lastLines(string(out), 30))
		}
		if err := os.Rename(tmp, b.out); err != nil {
			return Binaries{}, fmt.Errorf("install %s: %w", b.out, err)
		}
		d := time.Since(start)
		bins.BuildTaken += d
		log.Logf("built %s in %s", filepath.Base(b.out), d.Round(time.Second))
	}
	return bins, nil
}

// HostPackages are the Debian packages the cluster needs, by the command each provides.
var HostPackages = map[string]string{
	"containerd": "containerd",
	"ctr":        "containerd",
	"runc":       "runc",
	"etcd":       "etcd-server",
	"busybox":    "busybox-static",
	"unshare":    "util-linux",
	"nsenter":    "util-linux",
	"iptables":   "iptables",
}

// EnsureHostPackages installs the missing HostPackages with apt-get (one `apt-get update`, one
// `apt-get install`). A dynamically linked busybox does not count: the images need busybox-static.
func EnsureHostPackages(ctx context.Context, log Logger) error {
	missing := map[string]bool{}
	for cmd, pkg := range HostPackages {
		p, err := exec.LookPath(cmd)
		if err != nil {
			missing[pkg] = true
			continue
		}
		if cmd == "busybox" && !isStatic(p) {
			missing[pkg] = true
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var pkgs []string
	for p := range missing {
		pkgs = append(pkgs, p)
	}
	log.Logf("installing Debian packages %v", pkgs)
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := runCtx(ctx, env, "apt-get", "update"); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, lastLines(out, 20))
	}
	args := append([]string{"apt-get", "install", "-y", "--no-install-recommends"}, pkgs...)
	if out, err := runCtx(ctx, env, args...); err != nil {
		return fmt.Errorf("apt-get install: %w: %s", err, lastLines(out, 20))
	}
	return nil
}

func runCtx(ctx context.Context, env []string, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// isStatic reports whether the ELF file at path has no program interpreter.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// PluginBinary returns ResolvePluginBinary of $VGPU_PLUGIN_BIN.
func PluginBinary(ctx context.Context, moduleDir, outDir string, log Logger) (string, error) {
	return ResolvePluginBinary(ctx, moduleDir, outDir, os.Getenv(EnvPluginBin), log)
}

// ResolvePluginBinary returns path as an absolute path if it is not empty (a relative path is tried
// from the working directory, then from the repository root, the parent of moduleDir). An empty path
// builds ./cmd/virtual-gpu-device-plugin of the repository into outDir and returns that.
func ResolvePluginBinary(ctx context.Context, moduleDir, outDir, p string, log Logger) (string, error) {
	repo := filepath.Dir(moduleDir)
	if p != "" {
		candidates := []string{p}
		if !filepath.IsAbs(p) {
			candidates = append(candidates, filepath.Join(repo, p))
		}
		for _, c := range candidates {
			if abs, err := filepath.Abs(c); err == nil {
				if fi, err := os.Stat(abs); err == nil && fi.Mode().IsRegular() {
					return abs, nil
				}
			}
		}
		return "", fmt.Errorf("plugin binary %s: no such file (relative paths are tried from the working directory and from %s)", p, repo)
	}
	out := filepath.Join(outDir, "virtual-gpu-device-plugin")
	log.Logf("building the plugin from %s (set %s to use a prebuilt binary)", repo, EnvPluginBin)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/virtual-gpu-device-plugin")
	cmd.Dir = repo
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build plugin: %w: %s", err, lastLines(string(b), 30))
	}
	return out, nil
}

// BuildStatic builds the package pkg of the e2e module (e.g. "./cmd/inclusterprobe") as a static
// executable (CGO_ENABLED=0) into outDir and returns its path, for an image made with
// Cluster.ImportBinaryImage.
func BuildStatic(ctx context.Context, moduleDir, pkg, outDir string) (string, error) {
	out := filepath.Join(outDir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w: %s", pkg, err, lastLines(string(b), 30))
	}
	return out, nil
}

// readLines returns the lines of the file at path; a missing file has none.
func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}
