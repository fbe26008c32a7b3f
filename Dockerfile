# syntax=docker/dockerfile:1
# The pgloop operator image: one static binary on distroless, non-root.
#
#   docker build -t ghcr.io/pgloop/pgloop:dev --build-arg VERSION=dev .
#
# The image's entrypoint is the pgloop command; manifests/operator runs
# `pgloop operator`.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w -X github.com/pgloop/pgloop/pkg/version.Version=${VERSION}" \
      -o /out/pgloop ./cmd/pgloop

# distroless/static: CA certificates and /etc/passwd, no shell, no libc (the
# binary needs none). The nonroot tag runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/pgloop /pgloop
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/pgloop"]
CMD ["operator"]
