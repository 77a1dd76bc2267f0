// Command prepare installs the Debian packages the e2e cluster needs (when missing) and builds the
// kubelet, kube-apiserver, kube-scheduler and kube-controller-manager of the Kubernetes version the
// cluster runs ($VGPU_E2E_K8S_VERSION, else the one go.mod pins), and containerd 2
// (containerd, containerd-shim-runc-v2, ctr; for the nodes that run it) into the cache directory (those
// not there yet), and etcd and kwok for the KWOK cluster of ./sim (cluster.EnsureKWOKBinaries), then
// prints their paths. Run it as root from the e2e module: `go run ./cmd/prepare`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "prepare: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := cluster.StderrLogger{}
	start := time.Now()
	if os.Geteuid() == 0 {
		if err := cluster.EnsureHostPackages(ctx, log); err != nil {
			return err
		}
	} else {
		log.Logf("not root: not checking Debian packages")
	}
	moduleDir, err := cluster.ModuleDir()
	if err != nil {
		return err
	}
	bins, err := cluster.EnsureKubeBinaries(ctx, moduleDir, cluster.CacheDir(), log)
	if err != nil {
		return err
	}
	ctrd, err := cluster.EnsureContainerd2(ctx, cluster.CacheDir(), log)
	if err != nil {
		return err
	}
	kwok, err := cluster.EnsureKWOKBinaries(ctx, cluster.CacheDir(), log)
	if err != nil {
		return err
	}
	log.Logf("ready in %s: %s, %s, %s, %s (%s); %s, %s, %s (containerd %s); %s (etcd %s), %s (kwok %s)", time.Since(start).Round(time.Second),
		bins.Kubelet, bins.APIServer, bins.Scheduler, bins.ControllerManager, bins.Version,
		ctrd.Containerd, ctrd.Shim, ctrd.Ctr, ctrd.Version,
		kwok.Etcd, cluster.EtcdVersion, kwok.KWOK, cluster.KWOKVersion)
	return nil
}
