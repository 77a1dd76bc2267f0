package plugintest

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// helperEnv makes the test binary, run again by a test, listen on the
// socket it names and print "ready" (see HoldSocketIfAsked); silentEnv=1 makes it
// accept nothing and never write, as a hung program does.
const (
	helperEnv = "VGPU_TEST_HOLD_SOCKET"
	silentEnv = "VGPU_TEST_HOLD_SILENT"
)

// HoldSocketIfAsked makes a test binary that a test runs again (StartHolder)
// hold the socket it is asked to, until killed, and never returns then. A
// package whose tests use StartHolder calls it first in its TestMain.
func HoldSocketIfAsked() {
	if path := os.Getenv(helperEnv); path != "" {
		holdSocket(path, os.Getenv(silentEnv) == "1")
		os.Exit(0)
	}
}

// holdSocket listens on path until killed: another program's socket. It
// serves HTTP, or with silent accepts nothing and writes nothing.
func holdSocket(path string, silent bool) {
	lis, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	if silent {
		select {}
	}
	_ = http.Serve(lis, http.NotFoundHandler())
}

// StartHolder runs a separate process that holds an HTTP socket at path.
func StartHolder(t testing.TB, path string) *exec.Cmd {
	t.Helper()
	return startHolder(t, path, false)
}

// StartSilentHolder runs a separate process that listens at path and never
// accepts or answers.
func StartSilentHolder(t testing.TB, path string) *exec.Cmd {
	t.Helper()
	return startHolder(t, path, true)
}

func startHolder(t testing.TB, path string, silent bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	if silent {
		cmd.Env = append(cmd.Env, silentEnv+"=1")
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("holder process: %q, %v", line, err)
	}
	return cmd
}

// StaleSocket leaves a socket file nobody listens on, as a killed process does.
func StaleSocket(t *testing.T, path string) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
}
