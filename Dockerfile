# One image for every sluice process in docker-compose.yml: the global server, the per-proxy
# sidecar, the demo upstream and the health probe they all use. Build: docker build -t sluice:dev .
#
# Plain Dockerfile syntax (no RUN --mount), so the classic builder behind docker-compose 1.29
# builds it as well as BuildKit does.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static binaries (CGO_ENABLED=0) for an image with no libc; -trimpath drops local paths from
# them, -s -w the symbol tables. -o with a trailing slash names each binary after its package.
# -tags vtprotobuf: replies are encoded by the code go-control-plane generates with vtprotobuf,
# as make builds them (see the Makefile's GOTAGS).
RUN CGO_ENABLED=0 go build -tags vtprotobuf -trimpath -ldflags="-s -w" -o /out/ \
      ./cmd/server ./cmd/localfilter ./cmd/demo-upstream ./cmd/healthcheck

# distroless/static: CA certificates, tzdata and /etc/passwd, no shell or package manager. The
# :nonroot tag runs as uid 65532; nothing here needs root (all ports are above 1024).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/server /out/localfilter /out/demo-upstream /out/healthcheck /
# The example limits, so the image runs on its own; docker-compose.yml mounts
# envoy/ratelimit-config over this directory so that edits reload without a rebuild.
COPY envoy/ratelimit-config/ /etc/sluice/config/
USER nonroot:nonroot
# gRPC RLS and admin HTTP of the server (8081, 8080) and of the sidecar (9081, 9080), and the
# demo upstream (8000). docker-compose.yml picks the process with `entrypoint`.
EXPOSE 8080 8081 9080 9081 8000
ENTRYPOINT ["/server"]
CMD ["-config", "/etc/sluice/config"]
