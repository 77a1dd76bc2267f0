# virtual-gpu-device-plugin image: unicore/virtual-gpu-device-plugin:dev (make image).
# The binary is built by `make build`, the same command developers and CI use:
# static (CGO_ENABLED=0), -trimpath, version and revision stamped through -ldflags.
#
# One platform:    make image   (docker build, VERSION and REVISION from git)
# Several at once: docker buildx build --platform linux/amd64,linux/arm64 --push
#                    -t <registry>/<name>:<tag>
#                    --build-arg VERSION=$(git describe --tags --dirty 2>/dev/null || cat VERSION)
#                    --build-arg REVISION=$(git rev-parse HEAD) .
# The builder runs on the build machine's own platform and cross-compiles for each target
# (GOOS/GOARCH from TARGETOS/TARGETARCH), so no platform is emulated. Needs BuildKit (the default
# builder since Docker 23), which sets BUILDPLATFORM, TARGETOS and TARGETARCH.

# Builder: a pinned Go release of go.mod's Go 1.26 line, on Debian 12.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
# VERSION: without a build argument, the VERSION file's content (kept equal by
# e2e/deploy TestDockerfile_PinsAndLabels). REVISION: the commit; .git is not in the build
# context, so without a build argument it is "unknown".
ARG VERSION=v0.1.0
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build GOOS=${TARGETOS} GOARCH=${TARGETARCH} VERSION=${VERSION} REVISION=${REVISION}

# Runtime: distroless static (no shell, no package manager), pinned by the digest of its
# multi-platform index. This is the digest the tag gcr.io/distroless/static-debian12:latest had
# on 2026-09-16 (`crane digest gcr.io/distroless/static-debian12`, as published in
# cybozu/neco-containers pull request 2113; the same digest is pinned in other public projects).
# It was taken from those public records, not pulled, when it was pinned. To check or refresh it:
#   crane digest gcr.io/distroless/static-debian12:latest
#   # or: docker buildx imagetools inspect gcr.io/distroless/static-debian12:latest   (the "Digest:" line)
# and replace the sha256 below with the index digest printed (not a per-platform one).
FROM gcr.io/distroless/static-debian12@sha256:d75cdd72874d4790092fcb1b058493ecf6bb5bf2b2b897045b00ff01d91843f2
ARG VERSION=v0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="virtual-gpu-device-plugin" \
      org.opencontainers.image.description="Kubernetes device plugin that advertises virtual GPUs with a NUMA/NVLink/PCIe topology" \
      org.opencontainers.image.source="https://github.com/unicore/virtual-gpu-device-plugin" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY LICENSE /usr/share/doc/virtual-gpu-device-plugin/LICENSE
COPY --from=build /src/bin/virtual-gpu-device-plugin /usr/bin/virtual-gpu-device-plugin
# Root: the kubelet's device-plugin directory is root-owned (0750 on most nodes).
USER 0:0
ENTRYPOINT ["/usr/bin/virtual-gpu-device-plugin"]
