package cluster

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
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
	// EnvKubernetesVersion names the Kubernetes version (vX.Y.Z of k8s.io/kubernetes on the Go module
	// proxy) whose kubelet, kube-apiserver, kube-scheduler and kube-controller-manager the cluster runs
	// (`make e2e K8S_VERSION=…` sets it). Unset: the version the e2e go.mod pins.
	EnvKubernetesVersion = "VGPU_E2E_K8S_VERSION"
	// EnvFeatureGates holds feature gates for every Kubernetes component of the cluster, as their
	// --feature-gates flag takes them: "DRADeviceTaints=true,DRAExtendedResource=true". Unset: each
	// version's defaults. See Options.FeatureGates.
	EnvFeatureGates = "VGPU_E2E_FEATURE_GATES"
)

// featureGateName is a Kubernetes feature gate's name.
var featureGateName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// ParseFeatureGates parses "Gate=true,Other=false" (spaces around items allowed; empty: none) as the
// components' --feature-gates flag does.
func ParseFeatureGates(s string) (map[string]bool, error) {
	gates := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		if !ok || !featureGateName.MatchString(name) {
			return nil, fmt.Errorf("feature gates %q: %q is not Name=true|false", s, item)
		}
		on, err := strconv.ParseBool(val)
		if err != nil {
			return nil, fmt.Errorf("feature gates %q: %s: value %q is not true or false", s, name, val)
		}
		if _, dup := gates[name]; dup {
			return nil, fmt.Errorf("feature gates %q: %s given twice", s, name)
		}
		gates[name] = on
	}
	return gates, nil
}

// featureGatesFlag formats gates as --feature-gates takes them, sorted by name; "" for none.
func featureGatesFlag(gates map[string]bool) string {
	var items []string
	for name, on := range gates {
		items = append(items, name+"="+strconv.FormatBool(on))
	}
	slices.Sort(items)
	return strings.Join(items, ",")
}

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

// kubeVersionPattern is a release of k8s.io/kubernetes: v1.<minor>.<patch>, no pre-release (the
// staging modules are published as v0.<minor>.<patch> of each release).
var kubeVersionPattern = regexp.MustCompile(`^v1\.(0|[1-9]\d*)\.(0|[1-9]\d*)$`)

// WantedKubernetesVersion returns the Kubernetes version the cluster runs: $VGPU_E2E_K8S_VERSION when
// set (it must look like v1.34.4), else KubernetesVersion(moduleDir).
func WantedKubernetesVersion(moduleDir string) (string, error) {
	if v := os.Getenv(EnvKubernetesVersion); v != "" {
		if !kubeVersionPattern.MatchString(v) {
			return "", fmt.Errorf("%s=%q: %w", EnvKubernetesVersion, v, ErrKubernetesVersion)
		}
		return v, nil
	}
	return KubernetesVersion(moduleDir)
}

// KubeMinor returns the minor version of a Kubernetes version such as "v1.34.4" (34), for what differs
// between releases; 0 if version is not of that form.
func KubeMinor(version string) int {
	m := kubeVersionPattern.FindStringSubmatch(version)
	if m == nil {
		return 0
	}
	minor, _ := strconv.Atoi(m[1])
	return minor
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

// EnsureKubeBinaries is EnsureKubeBinariesVersion of WantedKubernetesVersion(moduleDir).
func EnsureKubeBinaries(ctx context.Context, moduleDir, cacheDir string, log Logger) (Binaries, error) {
	version, err := WantedKubernetesVersion(moduleDir)
	if err != nil {
		return Binaries{}, err
	}
	return EnsureKubeBinariesVersion(ctx, moduleDir, cacheDir, version, log)
}

// EnsureKubeBinariesVersion returns the kubelet, kube-apiserver, kube-scheduler and
// kube-controller-manager of Kubernetes version, building each one that is not there yet with the go
// command into <cacheDir>/bin/<version>-<go version>-<arch>/; what is there is never rebuilt. The
// build downloads modules from the Go module proxy (GOFLAGS=-mod=mod) and stamps the version into the
// binaries. The version moduleDir's go.mod pins builds in moduleDir, with its module set; any other
// builds in a module generated for it in a temporary directory (see kubeBuildGoMod), which is removed
// afterwards.
func EnsureKubeBinariesVersion(ctx context.Context, moduleDir, cacheDir, version string, log Logger) (Binaries, error) {
	if !kubeVersionPattern.MatchString(version) {
		return Binaries{}, fmt.Errorf("kubernetes version %q: %w", version, ErrKubernetesVersion)
	}
	pinned, err := KubernetesVersion(moduleDir)
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
	var missing []struct{ pkg, out string }
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
		missing = append(missing, b)
	}
	if len(missing) == 0 {
		return bins, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("create %s: %w", binDir, err)
	}
	// -buildvcs=false: the binaries are Kubernetes', not this repository's. GOWORK=off: a go.work
	// above the build dir must not add modules to it.
	env := append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0", "GOWORK=off")
	buildDir := moduleDir
	if version != pinned {
		tmp, err := os.MkdirTemp("", "vgpu-e2e-kube-"+version+"-")
		if err != nil {
			return Binaries{}, fmt.Errorf("kubernetes %s: build module: %w", version, err)
		}
		defer os.RemoveAll(tmp)
		log.Logf("kubernetes %s (not the %s of %s): generating its build module in %s", version, pinned, filepath.Join(moduleDir, "go.mod"), tmp)
		if err := writeKubeBuildModule(ctx, tmp, version, env); err != nil {
			return Binaries{}, fmt.Errorf("kubernetes %s: %w", version, err)
		}
		buildDir = tmp
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
	for _, b := range missing {
		log.Logf("building %s %s into %s (cold: several minutes)", b.pkg, version, binDir)
		start := time.Now()
		tmp := b.out + ".tmp"
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", tmp, b.pkg)
		cmd.Dir = buildDir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			os.Remove(tmp)
			return Binaries{}, fmt.Errorf("build %s %s: %w: %s", b.pkg, version, err, lastLines(string(out), 30))
		}
		if err := os.Rename(tmp, b.out); err != nil {
			return Binaries{}, fmt.Errorf("install %s: %w", b.out, err)
		}
		d := time.Since(start)
		bins.BuildTaken += d
		log.Logf("built %s %s in %s", filepath.Base(b.out), version, d.Round(time.Second))
	}
	return bins, nil
}

// writeKubeBuildModule writes into dir the go.mod of a module that builds k8s.io/kubernetes at
// version: it downloads that version's go.mod from the Go module proxy (`go mod download`, run in dir
// with env) and writes kubeBuildGoMod of it.
func writeKubeBuildModule(ctx context.Context, dir, version string, env []string) error {
	// go mod download needs a main module to run in with -mod=mod; an empty one will do.
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module vgpu-e2e-kube-build\n"), 0o644); err != nil {
		return fmt.Errorf("write go.mod: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.Output()
	var info struct{ GoMod, Error string }
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %s (versions on the proxy: `go list -m -versions k8s.io/kubernetes`): %w", version, info.Error, ErrKubernetesVersion)
	}
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w: %s", version, err, lastLines(stderr+string(out), 20))
	}
	if info.GoMod == "" {
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: no go.mod path in %q", version, lastLines(string(out), 10))
	}
	kubeGoMod, err := os.ReadFile(info.GoMod)
	if err != nil {
		return fmt.Errorf("read the go.mod of k8s.io/kubernetes@%s: %w", version, err)
	}
	gomod, err := kubeBuildGoMod(kubeGoMod, version)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o644); err != nil {
		return fmt.Errorf("write go.mod: %w", err)
	}
	return nil
}

// stagingReplace is one line of k8s.io/kubernetes's go.mod that replaces a staging module by its
// directory in the repository (`k8s.io/api => ./staging/src/k8s.io/api`), inside a replace block or
// on its own.
var stagingReplace = regexp.MustCompile(`(?m)^\s*(?:replace\s+)?(k8s\.io/[A-Za-z0-9._-]+)\s+=>\s+\./staging/`)

// goDirectives are the go and godebug lines of a go.mod.
var goDirectives = regexp.MustCompile(`(?m)^(?:go|godebug)\s+\S.*$`)

// stagingWithoutRelease are staging modules with no published release to replace them by: the
// kubernetes commands do not import them.
var stagingWithoutRelease = map[string]bool{"k8s.io/sample-cli-plugin": true}

// kubeBuildGoMod returns the go.mod of a module that builds the commands of k8s.io/kubernetes at
// version (v1.Y.Z), given that version's own go.mod: it requires k8s.io/kubernetes version, keeps the
// go and godebug lines (so the commands run with the language defaults Kubernetes chose), and replaces
// every staging module that kubeGoMod replaces by ./staging/… (which the module zip lacks) by its
// release v0.Y.Z, but k8s.io/sample-cli-plugin. Every other module resolves to the version
// Kubernetes's go.mod requires.
func kubeBuildGoMod(kubeGoMod []byte, version string) ([]byte, error) {
	if !kubeVersionPattern.MatchString(version) {
		return nil, fmt.Errorf("kubernetes version %q: %w", version, ErrKubernetesVersion)
	}
	staging := "v0." + strings.TrimPrefix(version, "v1.")
	var b strings.Builder
	b.WriteString("// Generated by the e2e harness (cluster.kubeBuildGoMod) from the go.mod of k8s.io/kubernetes@" + version + ".\n")
	b.WriteString("module vgpu-e2e-kube-build\n\n")
	for _, d := range goDirectives.FindAllString(string(kubeGoMod), -1) {
		b.WriteString(strings.TrimSpace(d) + "\n")
	}
	fmt.Fprintf(&b, "\nrequire k8s.io/kubernetes %s\n\nreplace (\n", version)
	seen := map[string]bool{}
	for _, m := range stagingReplace.FindAllStringSubmatch(string(kubeGoMod), -1) {
		mod := m[1]
		if stagingWithoutRelease[mod] || seen[mod] {
			continue
		}
		seen[mod] = true
		fmt.Fprintf(&b, "\t%s => %s %s\n", mod, mod, staging)
	}
	b.WriteString(")\n")
	for _, must := range []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/kubelet"} {
		if !seen[must] {
			return nil, fmt.Errorf("the go.mod of k8s.io/kubernetes@%s replaces no %s by ./staging (%d staging modules found): not a Kubernetes go.mod", version, must, len(seen))
		}
	}
	return []byte(b.String()), nil
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
