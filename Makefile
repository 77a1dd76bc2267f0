# virtual-gpu-device-plugin — one way to build, test and ship.

BINARY   := virtual-gpu-device-plugin
IMAGE    ?= unicore/virtual-gpu-device-plugin:dev
# VERSION: the nearest release tag (git describe) in a git checkout, else the VERSION file, which
# is there when git metadata is not (the image build: .dockerignore leaves .git out).
VERSION  ?= $(shell git describe --tags --dirty 2>/dev/null || cat VERSION 2>/dev/null || echo unknown)
# REVISION: the commit built, "unknown" without git metadata (the Dockerfile takes it as a build arg).
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
GO       ?= go
BIN      ?= bin
# GOOS/GOARCH: the target platform, e.g. `make build GOOS=linux GOARCH=arm64`; empty is this machine's.
GOOS     ?=
GOARCH   ?=
# The one build command: the Dockerfile runs this same target. -version prints what is stamped here.
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.revision=$(REVISION)
BUILD    := CGO_ENABLED=0 $(if $(GOOS),GOOS=$(GOOS)) $(if $(GOARCH),GOARCH=$(GOARCH)) $(GO) build -trimpath -ldflags "$(LDFLAGS)"
# E2E_UNIT: the e2e module's packages `make unit` runs, without -race (their tests run in one goroutine
# and a race build of Helm and kustomize takes minutes); e2e/run.sh runs the module's other packages.
E2E_UNIT := ./chart ./deploy
# K8S_VERSION: the Kubernetes release the e2e cluster runs, e.g. `make e2e K8S_VERSION=v1.34.4` (built
# from the Go module proxy on first use, cached by version; see e2e/README.md); empty: e2e/go.mod's pin.
K8S_VERSION ?=
E2E_ENV  := VGPU_PLUGIN_BIN=$(CURDIR)/$(BIN)/$(BINARY) $(if $(K8S_VERSION),VGPU_E2E_K8S_VERSION=$(K8S_VERSION))

.PHONY: all build test unit lint bench e2e scale demo image clean

all: build

## build: the static plugin binary in bin/ (GOOS=… GOARCH=… to cross-compile)
build:
	$(BUILD) -o $(BIN)/$(BINARY) ./cmd/$(BINARY)

## test: everything CI runs — gofmt + vet, the unit suite with the race detector, then the real-kubelet suite
test: lint unit e2e

## unit: go vet and the unit tests with the race detector; then the e2e module's packages that need
## no root and no cluster (E2E_UNIT: the chart, the manifests, the Dockerfile), which e2e/run.sh leaves out;
## their -timeout allows the Dockerfile test's two builds (this platform and another) on a cold build cache
unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	cd e2e && $(GO) vet $(E2E_UNIT) && $(GO) test -count=1 -timeout 30m $(E2E_UNIT)

## e2e: the end-to-end suite against a real kubelet, containerd and API server (root, Linux; see e2e/README.md)
e2e: build
	$(E2E_ENV) e2e/run.sh

## scale: the simulate scale test at SCALE_NODES simulated GPU nodes (default 1,000: half 8-GPU device-plugin
## nodes, half DGX A100s under DRA; 8,000 GPUs, 6,500 pods) on a control plane with KWOK (root, Linux);
## make test runs the same test at 20 nodes
SCALE_NODES ?= 1000
scale: build
	cd e2e && $(E2E_ENV) go run ./cmd/prepare
	cd e2e && $(E2E_ENV) VGPU_SIM_NODES=$(SCALE_NODES) go test -count=1 -timeout 60m -v -run 'TestSimulate_Cluster' ./sim/

## demo: the seed's demo on this machine: plugin registers, node shows 4 GPUs, vgpu-demo pod prints its ids
demo: build
	cd e2e && $(E2E_ENV) go run ./cmd/prepare
	cd e2e && $(E2E_ENV) go run ./cmd/demo

## lint: formatting and vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## image: the container image (needs a Docker engine; CI checks `make build`, which the Dockerfile runs)
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE) .

## bench: every benchmark, with allocations
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
