# virtual-gpu-device-plugin image: unicore/virtual-gpu-device-plugin:dev (make image).
# The binary is built by `make build`, the same command developers and CI use:
# static (CGO_ENABLED=0), -trimpath, version stamped through -ldflags.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION}

FROM gcr.io/distroless/static-debian12:latest
COPY --from=build /src/bin/virtual-gpu-device-plugin /usr/bin/virtual-gpu-device-plugin
# Root: the kubelet's device-plugin directory is root-owned (0750 on most nodes).
USER 0:0
ENTRYPOINT ["/usr/bin/virtual-gpu-device-plugin"]
