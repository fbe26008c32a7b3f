# pgloop Makefile. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
		/^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Build

# What `pgloop version` and the image's labels say: VERSION, and the commit
# (Go's own VCS stamp is off with -buildvcs=false and in git worktrees).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_LDFLAGS := -X github.com/pgloop/pgloop/pkg/version.Version=$(VERSION) -X github.com/pgloop/pgloop/pkg/version.Commit=$(COMMIT)

.PHONY: build
build: ## Build bin/pgloop (VERSION=..., default from git describe).
	$(GO) build -ldflags="$(VERSION_LDFLAGS)" -o $(BIN)/pgloop ./cmd/pgloop

IMAGE_ARCHS := amd64 arm64

.PHONY: image
image: ## Build the operator's OCI image (linux/amd64, linux/arm64) into bin/pgloop-image.tar without a container engine (VERSION=...).
	for arch in $(IMAGE_ARCHS); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath \
			-ldflags="-s -w $(VERSION_LDFLAGS)" \
			-o $(BIN)/linux-$$arch/pgloop ./cmd/pgloop || exit 1; \
	done
	cd $(RELEASE_MODULE) && SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) $(GO) run ./image \
		-out $(BIN)/pgloop-image.tar -version $(VERSION) -revision "$(COMMIT)" \
		$(foreach a,$(IMAGE_ARCHS),-bin linux/$(a)=$(BIN)/linux-$(a)/pgloop)

# The images pgloop's pods run (docs/images.md), linux/amd64 only: the
# instance's (PostgreSQL 15, Patroni, pgBackRest: ghcr.io/pgloop/postgres:15-1)
# and the pooler's (PgBouncer: ghcr.io/pgloop/pgbouncer:1), tagged as pgloop's
# defaults name them (pgloop version --images), from Debian
# bookworm's packages with mmdebstrap (as root), pgloop's binary as a second
# layer. The packages' layer is cached in $(PGLOOP_CACHE)/images, default
# /var/cache/pgloop/images, by the versions Debian serves.
DATA_IMAGES := instance pooler
# image_tag prints the tag of the image of a kind as pgloop's defaults name
# it (pgloop version --images: instance ghcr.io/pgloop/postgres:15-1).
image_tag = $(BIN)/linux-amd64/pgloop version --images | awk -v k=$(1) '$$1 == k { n = split($$2, r, ":"); print r[n] }'
# image_name prints the whole reference of the image of a kind.
image_name = $(BIN)/linux-amd64/pgloop version --images | awk -v k=$(1) '$$1 == k { print $$2 }'

.PHONY: images-deps
images-deps: ## Install mmdebstrap (as root, from Debian's packages) for make images.
	hack/images-deps.sh

.PHONY: images
images: images-deps ## Build the instance and pooler images (linux/amd64, Debian bookworm) into bin/pgloop-instance-image.tar and bin/pgloop-pooler-image.tar without a container engine, as root (VERSION=...).
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath \
		-ldflags="-s -w $(VERSION_LDFLAGS)" -o $(BIN)/linux-amd64/pgloop ./cmd/pgloop
	cd $(RELEASE_MODULE) && $(GO) build -o $(BIN)/dataimage ./dataimage
	for kind in $(DATA_IMAGES); do \
		SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) $(BIN)/dataimage -kind $$kind \
			-bin $(BIN)/linux-amd64/pgloop -out $(BIN)/pgloop-$$kind-image.tar \
			-version $(VERSION) -revision "$(COMMIT)" -tag $$($(call image_tag,$$kind)) -name $$($(call image_name,$$kind)) || exit 1; \
	done

##@ Test

# Packages whose concurrency matters run under the race detector: the loop, the
# machines and their glue, and what runs off the loop (effects, indb, the archive
# checks, the transports).
RACE_PKGS := ./pkg/eventloop/... ./pkg/fsm/... ./pkg/controller/... ./pkg/informers/... ./pkg/facts/... ./pkg/effects/... ./pkg/patroni/... ./pkg/indb/... ./pkg/archiving/... ./pkg/traffic/...

# `make test` installs the Debian packages first (one apt-get at a time), then
# builds the plane's binaries beside the images (mostly downloads), runs the
# suites that use the whole machine, and runs the checks (verify, unit tests)
# under nice beside the e2e suites, which mostly wait on timers
# (hack/lanes.sh; docs/testbed.md, "How make test uses the two cores").
#
# BUILT=1, what `make test` passes to its steps after the builds, drops the
# test targets' prerequisites (built or installed already), so that each
# make invocation does not build the images again.
BUILT ?=
needs = $(if $(BUILT),,$(1))

.PHONY: test
test: test-deps ## Run every test: generated files, unit tests (with -race), the images, and the suites on the local control plane.
	hack/lanes.sh "plane=$(MAKE) --no-print-directory testbed testbed-cmd build" \
		"images=$(MAKE) --no-print-directory images"
	$(MAKE) --no-print-directory BUILT=1 test-images test-testbed test-realnode
	hack/lanes.sh "e2e=$(MAKE) --no-print-directory BUILT=1 test-e2e" \
		"checks=nice -n 19 $(MAKE) --no-print-directory BUILT=1 verify test-unit"

.PHONY: test-deps
test-deps: ## Install the Debian packages the tests need (data-plane-deps, images-deps, real-node-deps; apt-get, only when missing).
	hack/data-plane-deps.sh
	hack/images-deps.sh
	hack/real-node-deps.sh

.PHONY: test-unit
test-unit: $(call needs,data-plane-deps) ## Unit tests (pkg/pgsql's run a PostgreSQL 15); the loop, FSM and controller also under -race.
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -race $(RACE_PKGS)
	cd $(RELEASE_MODULE) && $(GO) test -count=1 ./...

.PHONY: test-images
test-images: $(call needs,images testbed data-plane-deps) ## Build the instance and pooler images (make images), open their tarballs and check them (hack/release/dataimage), then run a cluster's pod through the instance image's own start-up program on a plane, archiving (test/kubelet, -tags images).
	cd $(RELEASE_MODULE) && $(GO) test -count=1 -tags images -run '^TestImages$$' ./dataimage -args -images $(BIN) -version $(VERSION) \
		-instance-tag $$($(call image_tag,instance)) -pooler-tag $$($(call image_tag,pooler))
	cd test && PGLOOP_BIN=$(BIN) $(GO) test -count=1 -tags images -run '^TestInstanceImage$$' ./kubelet/ -args -instance-image $(BIN)/pgloop-instance-image.tar

.PHONY: bench
bench: ## Benchmarks of the loop and the state machine (figures go to docs/performance.md).
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/eventloop/ ./pkg/controller/ ./pkg/facts/

# Fuzz targets, as package:target; `make fuzz` runs each for FUZZTIME, one
# at a time (go test takes one -fuzz pattern per package). Their seed corpora
# (testdata/fuzz/ and f.Add) run with the unit tests.
FUZZTIME ?= 30s
FUZZ_TARGETS := ./pkg/apis/pgloop/v1:FuzzDecodeValidate ./pkg/cluster:FuzzBuild ./pkg/patroni:FuzzParseMember

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s; 3 targets); see docs/reliability.md.
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

##@ Run

.PHONY: run
run: build testbed testbed-cmd labeller data-plane-deps ## Run the operator: with no KUBECONFIG, on a local control plane with the samples (Ctrl-C stops all).
	BIN=$(BIN) hack/run.sh

.PHONY: run-deployment
run-deployment: build testbed testbed-cmd labeller data-plane-deps ## Run the operator as users install it (manifests/operator: a Deployment of 2 replicas, leader election, in-cluster config) on a local control plane with the samples.
	BIN=$(BIN) PGLOOP_DEPLOYMENT=1 hack/run.sh

# Fragments owned by their parts of the tree.
include hack/codegen.mk
include hack/lint.mk
include test/testbed.mk

# docs/fsm.md and the README's diagram come from pkg/fsm's table.
.PHONY: generate-docs
generate-docs: ## Regenerate docs/fsm.md and the README's state diagram from pkg/fsm.
	$(GO) test ./pkg/fsm/ ./cmd/pgloop/ -run 'TestDocsMatchMachine|TestReadmeDiagram|TestUserGuideTables' -update

generate: generate-docs

##@ Release

# hack/release is a module of its own (helm, kustomize, krew and
# go-containerregistry stay out of the operator's go.mod): the release
# command, the image's (./image, `make image`), and the tests of the chart
# (against manifests/operator), of the krew manifest, of the image and of a
# release.
RELEASE_MODULE := hack/release
LINT_MODULES += $(RELEASE_MODULE)
# The repository to push the image to as :VERSION; empty pushes nothing. The
# instance and pooler images go beside it, as postgres and pgbouncer with the
# tags pgloop's defaults name (docs/images.md).
PUSH ?=

.PHONY: release
release: image images ## Build a release into dist/VERSION/ (the operator's, instance and pooler images, krew archives and manifest, chart, CRD, SHA256SUMS); PUSH=repo pushes the images (docs/releasing.md).
	cd $(RELEASE_MODULE) && $(GO) run . -root $(CURDIR) -version $(VERSION) -commit "$(COMMIT)" -push "$(PUSH)" \
		-instance-tag $$($(call image_tag,instance)) -pooler-tag $$($(call image_tag,pooler)) $(RELEASE_FLAGS)

verify: verify-release

.PHONY: verify-release
verify-release: ## go vet and go mod tidy of hack/release's module.
	cd $(RELEASE_MODULE) && $(GO) vet ./... && $(GO) vet -tags images ./dataimage && $(GO) mod tidy -diff

##@ Install

# Where `make install` puts the binaries: $(PREFIX)/bin, or $(GOBIN) when it
# is set and PREFIX was not given; INSTALL_BIN overrides both.
PREFIX ?= /usr/local
ifeq ($(origin PREFIX),file)
INSTALL_BIN ?= $(or $(GOBIN),$(PREFIX)/bin)
else
INSTALL_BIN ?= $(PREFIX)/bin
endif

.PHONY: install
install: build ## Install bin/pgloop as pgloop and as kubectl-pgloop (for `kubectl pgloop`) into $(PREFIX)/bin or $(GOBIN).
	install -d "$(DESTDIR)$(INSTALL_BIN)"
	install -m 0755 "$(BIN)/pgloop" "$(DESTDIR)$(INSTALL_BIN)/pgloop"
	ln -sf pgloop "$(DESTDIR)$(INSTALL_BIN)/kubectl-pgloop"
