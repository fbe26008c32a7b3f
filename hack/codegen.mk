# Generated code and the checks that keep it honest (issue 2). The API types
# in pkg/apis are the source; controller-gen, pinned as a `go tool` in
# go.mod, derives zz_generated.deepcopy.go and the CRDs in manifests/crds
# from them, and k8s.io/code-generator's client-gen, lister-gen and
# informer-gen, pinned the same way, derive the typed clientset (with its
# fake), the listers and the informers in pkg/generated. GO and BIN come
# from the root Makefile.

CONTROLLER_GEN ?= $(GO) tool controller-gen
CLIENT_GEN ?= $(GO) tool client-gen
LISTER_GEN ?= $(GO) tool lister-gen
INFORMER_GEN ?= $(GO) tool informer-gen
# gofmt of the toolchain GO runs, whatever is first on PATH.
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
# The API packages, and where their CRDs go.
API_PATHS := ./pkg/apis/...
CRD_DIR := manifests/crds
CRD_OPTIONS := crd:crdVersions=v1

# The client. Everything under GENERATED_DIR is generated, so it is removed
# before each run and a stale file cannot survive. CLIENT_APIS are the
# group/version packages (under pkg/apis) holding +genclient types.
MODULE := github.com/pgloop/pgloop
BOILERPLATE := hack/boilerplate.go.txt
GENERATED_DIR := pkg/generated
CLIENT_APIS := pgloop/v1

# gen-client writes the clientset, listers and informers under the directory
# $(1), with the import paths they have in GENERATED_DIR; the generators do
# not load their own output, so $(1) may be anywhere. It is one shell command
# (a subshell that stops at the first failure) so that verify-generated can
# run it inside its own recipe line.
define gen-client
( set -e; \
	$(CLIENT_GEN) --go-header-file $(BOILERPLATE) \
		--output-dir $(1)/clientset --output-pkg $(MODULE)/$(GENERATED_DIR)/clientset \
		--clientset-name versioned --input-base $(MODULE)/pkg/apis \
		$(addprefix --input ,$(CLIENT_APIS)); \
	$(LISTER_GEN) --go-header-file $(BOILERPLATE) \
		--output-dir $(1)/listers --output-pkg $(MODULE)/$(GENERATED_DIR)/listers \
		$(addprefix ./pkg/apis/,$(CLIENT_APIS)); \
	$(INFORMER_GEN) --go-header-file $(BOILERPLATE) \
		--output-dir $(1)/informers --output-pkg $(MODULE)/$(GENERATED_DIR)/informers \
		--versioned-clientset-package $(MODULE)/$(GENERATED_DIR)/clientset/versioned \
		--listers-package $(MODULE)/$(GENERATED_DIR)/listers \
		$(addprefix ./pkg/apis/,$(CLIENT_APIS)) )
endef

##@ Code generation

.PHONY: generate
generate: ## Regenerate deepcopy functions, CRD manifests and the client in pkg/generated from pkg/apis.
	rm -f $(CRD_DIR)/*.yaml
	$(CONTROLLER_GEN) object $(CRD_OPTIONS) paths=$(API_PATHS) output:crd:artifacts:config=$(CRD_DIR)
	# Helm installs the chart's crds/ (hack/release's tests keep it equal).
	rm -f charts/pgloop/crds/*.yaml
	cp $(CRD_DIR)/*.yaml charts/pgloop/crds/
	rm -rf $(GENERATED_DIR)
	$(call gen-client,$(GENERATED_DIR))

# verify is the sum of its prerequisites; another fragment can add its own
# check with a recipe-less `verify: verify-mine`.
.PHONY: verify
verify: verify-generated verify-gofmt verify-vet ## Check generated files, gofmt, go vet and staticcheck (what CI checks).

# Regenerates into a temporary directory and compares with the files on
# disk, so it works on untracked files and never touches the tree. Each API
# package gets its own output directory because controller-gen names every
# deepcopy file the same. The whole of GENERATED_DIR is compared, so a file
# the generators no longer write is reported too.
.PHONY: verify-generated
verify-generated: ## Fail if deepcopy, CRD or client files differ from what their generators write.
	@set -euo pipefail; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	mkdir -p "$$tmp/want" "$$tmp/have/$(CRD_DIR)" "$$tmp/have/$(GENERATED_DIR)"; \
	for dir in $$($(GO) list -f '{{.Dir}}' $(API_PATHS)); do \
		rel=$${dir#$(CURDIR)/}; \
		$(CONTROLLER_GEN) object paths=./$$rel output:object:dir="$$tmp/want/$$rel"; \
		if [ -f "$$rel/zz_generated.deepcopy.go" ]; then \
			mkdir -p "$$tmp/have/$$rel"; cp "$$rel/zz_generated.deepcopy.go" "$$tmp/have/$$rel/"; \
		fi; \
	done; \
	$(CONTROLLER_GEN) $(CRD_OPTIONS) paths=$(API_PATHS) output:crd:dir="$$tmp/want/$(CRD_DIR)"; \
	cp $(CRD_DIR)/*.yaml "$$tmp/have/$(CRD_DIR)/" 2>/dev/null || true; \
	$(call gen-client,"$$tmp/want/$(GENERATED_DIR)") >/dev/null; \
	if [ -d $(GENERATED_DIR) ]; then cp -R $(GENERATED_DIR)/. "$$tmp/have/$(GENERATED_DIR)/"; fi; \
	if ! diff -ru "$$tmp/have" "$$tmp/want" >"$$tmp/diff"; then \
		sed -e "s|$$tmp/have/||; s|$$tmp/want/||" "$$tmp/diff"; \
		echo; \
		echo "verify-generated: the files above are out of date with pkg/apis (diff: on disk -> generated)."; \
		echo "verify-generated: run 'make generate' and commit the result."; \
		exit 1; \
	fi; \
	echo "verify-generated: deepcopy, CRDs and the client are up to date"

.PHONY: verify-gofmt
verify-gofmt: ## Fail if a Go file is not gofmt-formatted.
	@files=$$(find . \( -path ./.git -o -path ./bin -o -path ./.tmp -o -path '*/vendor' \) -prune -o -name '*.go' -print | xargs -r $(GOFMT) -l); \
	if [ -n "$$files" ]; then \
		echo "verify-gofmt: these files need gofmt -w:"; echo "$$files"; exit 1; \
	fi; \
	echo "verify-gofmt: ok"

.PHONY: verify-vet
verify-vet: ## Run go vet on the main module.
	$(GO) vet ./...
