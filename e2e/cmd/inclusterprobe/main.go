// Command inclusterprobe runs inside a pod of the e2e cluster and shows that the pod reaches the API
// server the way in-cluster clients do: client-go's rest.InClusterConfig, that is
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (set by the kubelet from the default kubernetes
// Service) and the service-account token and ca.crt (mounted by the ServiceAccount admission plugin's
// projected volume). It asks the API server who it is (a SelfSubjectReview) and reads its own Node
// (named by $NODE_NAME, from the downward API), then prints one line
//
//	incluster-probe: {"host":…,"user":…,"groups":[…],"node":…,"labels":{…}}
//
// and sleeps until SIGTERM (so that it can run in a DaemonSet), or exits with -once. Errors are printed
// as "incluster-probe: error: …" and retried every second for -retry-for; then it exits 1.
//
// The e2e tests build it as a static binary and run it from a local image (cluster.BuildStatic,
// Cluster.ImportBinaryImage).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Prefix starts every line the probe prints.
const Prefix = "incluster-probe: "

// report is what the probe prints on success.
type report struct {
	Host   string            `json:"host"`
	User   string            `json:"user"`
	Groups []string          `json:"groups"`
	Node   string            `json:"node"`
	Labels map[string]string `json:"labels"`
}

func main() {
	once := flag.Bool("once", false, "exit after printing instead of sleeping until SIGTERM")
	retryFor := flag.Duration("retry-for", 30*time.Second, "keep retrying a failing probe this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	deadline := time.Now().Add(*retryFor)
	for {
		r, err := probe(ctx, os.Getenv("NODE_NAME"))
		if err == nil {
			b, err := json.Marshal(r)
			if err != nil {
				fmt.Printf("%serror: %v\n", Prefix, err)
				os.Exit(1)
			}
			fmt.Printf("%s%s\n", Prefix, b)
			break
		}
		fmt.Printf("%serror: %v\n", Prefix, err)
		if time.Now().After(deadline) || ctx.Err() != nil {
			os.Exit(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	if !*once {
		<-ctx.Done()
	}
}

func probe(ctx context.Context, nodeName string) (*report, error) {
	if nodeName == "" {
		return nil, errors.New("NODE_NAME is not set (give it from the downward API: spec.nodeName)")
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("self subject review at %s: %w", cfg.Host, err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s at %s: %w", nodeName, cfg.Host, err)
	}
	return &report{
		Host:   cfg.Host,
		User:   review.Status.UserInfo.Username,
		Groups: review.Status.UserInfo.Groups,
		Node:   node.Name,
		Labels: node.Labels,
	}, nil
}
