package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one child process started by the harness. Its stdout and stderr go to LogPath. It is
// recorded in the harness's registry from start until it has been reaped. Safe for concurrent use.
type Process struct {
	// Name identifies the process in logs and in the registry, e.g. "kubelet".
	Name string
	// LogPath is the file that receives the process's stdout and stderr.
	LogPath string
	// Started is when the process was started.
	Started time.Time

	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status; valid once done is closed
}

// PID returns the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitErr returns the process's exit error (nil for exit code 0). It blocks until the process exits.
func (p *Process) ExitErr() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process. Signalling a process that already exited is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s (pid %d) with %s: %w", p.Name, p.PID(), sig, err)
	}
	return nil
}

// Stop sends SIGTERM, waits up to grace for the process to exit, then sends SIGKILL to its process
// group. It returns an error wrapping ErrStopTimeout if it had to kill; ExitErr tells how the process
// exited.
func (p *Process) Stop(grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	p.killGroup()
	<-p.done
	return fmt.Errorf("stop %s (pid %d) within %s: %w", p.Name, p.PID(), grace, ErrStopTimeout)
}

// Kill sends SIGKILL to the process group and waits until the process is reaped.
func (p *Process) Kill() {
	p.killGroup()
	<-p.done
}

func (p *Process) killGroup() {
	if p.Exited() {
		return
	}
	// Processes are started with Setpgid, so the group id is the pid.
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
}

// processSpec describes a process to start.
type processSpec struct {
	name    string
	argv    []string
	dir     string   // working directory; must exist
	env     []string // nil: inherit
	logPath string
}

// start starts the process described by spec and records it in reg.
func (r *registry) start(spec processSpec) (*Process, error) {
	logf, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", spec.name, err)
	}
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Dir = spec.dir
	cmd.Env = spec.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = childAttr()
	fmt.Fprintf(logf, "=== harness: starting %s at %s: %s\n", spec.name, time.Now().Format(time.RFC3339Nano), strings.Join(spec.argv, " "))
	p := &Process{Name: spec.name, LogPath: spec.logPath, cmd: cmd, done: make(chan struct{})}
	r.mu.Lock() // hold across Start so a concurrent cleanup sees the pid
	err = spawn(cmd)
	if err != nil {
		r.mu.Unlock()
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	p.Started = time.Now()
	r.addLocked(spec.name, cmd.Process.Pid)
	r.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(logf, "=== harness: %s exited at %s: %v\n", spec.name, time.Now().Format(time.RFC3339Nano), p.err)
		logf.Close()
		r.remove(cmd.Process.Pid)
		close(p.done)
	}()
	return p, nil
}

// Pdeathsig fires when the thread that forked the child exits, not the process. Go may end threads
// (a goroutine that exits while locked to its thread takes the thread along), so all long-lived
// children are forked from one goroutine locked to a thread that lives as long as the process.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives until the process exits
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

// run runs a short command to completion and returns its combined output.
func run(dir string, env []string, argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = childAttr()
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, lastLines(out.String(), 20))
	}
	return out.String(), nil
}

// registry records the processes of the running cluster in <cache>/run/procs.json, under an exclusive
// file lock on <cache>/run/lock held for the cluster's lifetime. Whoever gets the lock next kills what
// an interrupted run left behind: the recorded processes (matched by pid and start time, so a recycled
// pid is never hit) and every process whose command line names the old run's temporary directory
// (containerd shims) together with its descendants (the containers).
type registry struct {
	mu    sync.Mutex
	dir   string
	lock  *os.File
	state registryState
}

type registryState struct {
	Owner  int             `json:"owner"`
	TmpDir string          `json:"tmpDir"`
	Procs  []registeredPID `json:"procs"`
}

type registeredPID struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	Start uint64 `json:"start"` // field 22 of /proc/<pid>/stat
}

// openRegistry takes the lock in dir, cleans up after an interrupted previous run and records tmpDir
// as the new run's directory.
func openRegistry(dir, tmpDir string, log Logger) (*registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create registry dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open registry lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		var old registryState
		if b, rerr := os.ReadFile(filepath.Join(dir, "procs.json")); rerr == nil {
			_ = json.Unmarshal(b, &old)
		}
		return nil, fmt.Errorf("another e2e cluster (harness pid %d) is running with cache dir %s: %w", old.Owner, filepath.Dir(dir), err)
	}
	r := &registry{dir: dir, lock: lock}
	r.cleanupPrevious(log)
	r.state = registryState{Owner: os.Getpid(), TmpDir: tmpDir}
	if err := r.saveLocked(); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *registry) cleanupPrevious(log Logger) {
	b, err := os.ReadFile(filepath.Join(r.dir, "procs.json"))
	if err != nil {
		return
	}
	var old registryState
	if err := json.Unmarshal(b, &old); err != nil {
		log.Logf("ignoring unreadable %s: %v", filepath.Join(r.dir, "procs.json"), err)
		return
	}
	for _, p := range old.Procs {
		if alive(p) {
			log.Logf("killing leftover %s (pid %d) of an earlier run", p.Name, p.PID)
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	if old.TmpDir != "" {
		if n := killProcessesNaming(old.TmpDir); n > 0 {
			log.Logf("killed %d leftover processes of an earlier run in %s", n, old.TmpDir)
		}
		waitGone(old.Procs, 5*time.Second)
		states, _ := filepath.Glob(filepath.Join(old.TmpDir, "node-*", "containerd", "state"))
		for _, st := range states {
			removeContainerCgroups(st)
		}
		if _, err := os.Stat(old.TmpDir); err == nil {
			if err := removeTree(old.TmpDir); err != nil {
				log.Logf("leaving %s of an earlier run: %v", old.TmpDir, err)
			} else {
				log.Logf("removed %s of an earlier run", old.TmpDir)
			}
		}
	}
}

func waitGone(procs []registeredPID, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, p := range procs {
		for time.Now().Before(deadline) && alive(p) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// alive reports whether the recorded process still runs: same pid and start time (so not a recycled
// pid), and not a zombie.
func alive(p registeredPID) bool {
	f, err := procStatFields(p.PID)
	if err != nil || f[0] == "Z" || f[0] == "X" {
		return false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return err == nil && st == p.Start
}

func (r *registry) addLocked(name string, pid int) {
	st, _ := procStartTime(pid)
	r.state.Procs = append(r.state.Procs, registeredPID{Name: name, PID: pid, Start: st})
	_ = r.saveLocked()
}

func (r *registry) remove(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.state.Procs {
		if p.PID == pid {
			r.state.Procs = append(r.state.Procs[:i], r.state.Procs[i+1:]...)
			break
		}
	}
	_ = r.saveLocked()
}

func (r *registry) saveLocked() error {
	b, err := json.MarshalIndent(r.state, "", "  ")
	if err != nil {
		return fmt.Errorf("encode registry: %w", err)
	}
	tmp := filepath.Join(r.dir, ".procs.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(r.dir, "procs.json")); err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	return nil
}

// close empties the registry and releases the lock.
func (r *registry) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = registryState{}
	_ = os.Remove(filepath.Join(r.dir, "procs.json"))
	_ = syscall.Flock(int(r.lock.Fd()), syscall.LOCK_UN)
	r.lock.Close()
}

// procStartTime returns field 22 (starttime) of /proc/<pid>/stat.
func procStartTime(pid int) (uint64, error) {
	f, err := procStatFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f[19], 10, 64) // f[0] is field 3
}

// procStatFields returns the fields of /proc/<pid>/stat after the command name, starting with field 3
// (state).
func procStatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return f, nil
}

// killProcessesNaming sends SIGKILL to every process (other than this one) whose command line contains
// s, and to all their descendants, and waits (5 s at most) until they are dead. It returns how many
// processes it signalled.
func killProcessesNaming(s string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	children := map[int][]int{}
	var roots []int
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if f, err := procStatFields(pid); err == nil {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], pid)
			}
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			roots = append(roots, pid)
		}
	}
	seen := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] || pid == self {
			return
		}
		seen[pid] = true
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, pid := range roots {
		walk(pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pid := range seen {
		for time.Now().Before(deadline) {
			f, err := procStatFields(pid)
			if err != nil || f[0] == "Z" || f[0] == "X" { // gone, or dead and waiting to be reaped
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return len(seen)
}

// removeTree removes dir unless something is still mounted below it in this mount namespace (removing
// through a bind mount would delete the mount's source).
func removeTree(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return fmt.Errorf("%s is still mounted", f[4])
		}
	}
	return os.RemoveAll(dir)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// removeContainerCgroups removes the cgroups (/sys/fs/cgroup/<controller>/k8s.io/<id>) of the
// containers of the containerd whose state directory is stateDir, when they hold no process. runc
// removes them itself when a container is deleted cleanly; this is for containers that were killed.
func removeContainerCgroups(stateDir string) int {
	tasks, err := os.ReadDir(filepath.Join(stateDir, "io.containerd.runtime.v2.task", "k8s.io"))
	if err != nil {
		return 0
	}
	controllers, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
	n := 0
	for _, t := range tasks {
		for _, parent := range controllers {
			if os.Remove(filepath.Join(parent, t.Name())) == nil { // rmdir fails while processes remain
				n++
			}
		}
	}
	return n
}
