# kgen's build. 'make test' and 'make demo' work on a fresh machine with only
# Go, gcc and kubectl: the control plane is built from the Go module proxy on
# first use (hack/tools.sh) and cached under .cache/.

GO ?= go
BIN := bin
PKGS := ./...

.PHONY: all build test unit e2e tools demo lint bench clean

all: build

## build: build bin/kgenctl
build:
	$(GO) build -o $(BIN)/kgenctl ./cmd/kgenctl

## test: unit tests (with fuzz seed corpora), then end-to-end tests on a real control plane
test: unit e2e

## unit: unit tests only; no cluster needed
unit:
	$(GO) test -count=1 $(PKGS)

## e2e: end-to-end tests against etcd + kube-apiserver + kube-controller-manager
e2e: tools
	$(GO) test -tags e2e -count=1 -timeout 40m ./e2e/

## tools: build etcd, kube-apiserver and kube-controller-manager (cached)
tools:
	@./hack/tools.sh >/dev/null

## demo: run kgen on a local control plane and show what it does
demo: build tools
	./hack/demo.sh

## lint: formatting and vet, with and without the e2e build tag
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags e2e ./e2e/

clean:
	rm -rf $(BIN)
