# kgen's container image, for those with a container engine:
#   docker build -t kgen/kgenctl:0.1.0 --build-arg VERSION=0.1.0 .
# 'make image' builds the same image without one (hack/image).
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
# A static binary: the base image has no C library.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X kgen.dev/kgen/internal/version.Version=$VERSION" \
      -o /out/kgenctl ./cmd/kgenctl

# distroless/static: no shell, no package manager; nonroot is 65532:65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kgenctl /kgenctl
USER 65532:65532
ENTRYPOINT ["/kgenctl"]
CMD ["run"]
