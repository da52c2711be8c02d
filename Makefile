# kgen's build. 'make test' and 'make demo' work on a fresh machine with only
# Go, gcc and kubectl: the control plane is built from the Go module proxy on
# first use (hack/tools.sh) and cached under .cache/.

GO ?= go
BIN := bin
PKGS := ./...
# The image: its tag is the chart's appVersion, so the chart runs it as is.
VERSION ?= $(shell sed -n 's/^appVersion: *"\(.*\)"/\1/p' charts/kgen/Chart.yaml)
IMAGE ?= kgen/kgenctl:$(VERSION)
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
BENCH_SIZES ?= 500,2000,5000
BENCH_REPEAT ?= 1
# The steady state with running pods (kube-scheduler and kwok, built on first use).
BENCH_PODS ?= true

.PHONY: all build test unit e2e tools demo lint bench clean image image-test

all: build

## build: build bin/kgenctl
build:
	$(GO) build -o $(BIN)/kgenctl ./cmd/kgenctl

## test: unit tests (with fuzz seed corpora and the chart's), the image, then end-to-end tests on a real control plane
test: unit image-test e2e

## unit: unit tests only; no cluster needed
unit:
	$(GO) test -count=1 $(PKGS)

## e2e: end-to-end tests against etcd + kube-apiserver + kube-controller-manager
e2e: tools
	$(GO) test -tags e2e -count=1 -timeout 40m ./e2e/

## tools: build etcd, kube-apiserver, kube-controller-manager and helm (cached)
tools:
	@./hack/tools.sh >/dev/null

## image: build the container image as an OCI tarball, bin/kgen-image.tar, without a container engine
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath \
		-ldflags '-s -w -X kgen.dev/kgen/internal/version.Version=$(VERSION)' \
		-o $(BIN)/linux_$(IMAGE_ARCH)/kgenctl ./cmd/kgenctl
	$(GO) run ./hack/image -binary $(BIN)/linux_$(IMAGE_ARCH)/kgenctl -arch $(IMAGE_ARCH) \
		-ref $(IMAGE) -version $(VERSION) -o $(BIN)/kgen-image.tar

## image-test: build the image and check it: kgenctl in it, run as non-root
image-test: image
	KGEN_IMAGE=$(abspath $(BIN)/kgen-image.tar) $(GO) test -count=1 -run TestBuiltImage ./hack/image

## demo: run kgen on a local control plane and show what it does
demo: build tools
	./hack/demo.sh

## bench: measure kgen against the API server's own limit on a local control plane (N=500, 2000, 5000), and its steady state with running pods
bench: tools
	$(GO) run ./bench -sizes $(BENCH_SIZES) -repeat $(BENCH_REPEAT) -pods=$(BENCH_PODS) -out bench/results

## lint: formatting and vet, with and without the e2e build tag
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags e2e ./e2e/

clean:
	rm -rf $(BIN)
