# Static analysis: staticcheck, pinned as a `go tool` in the root go.mod,
# with the checks chosen in staticcheck.conf at the root. GO and BIN come
# from the root Makefile.

# The test module (test/go.mod) does not have the tool, so `go -C test tool`
# cannot run it: the binary is built from the root module into $(BIN) and
# run in each module. The build is cached, so it is rebuilt only when the
# pin or the Go toolchain changes (staticcheck must be built by a Go at least
# as new as the code it reads).
STATICCHECK := $(BIN)/staticcheck
# Directories holding a go.mod, each linted as ./... less LINT_SKIP.
LINT_MODULES := . test
# Packages left out: the client in pkg/generated is k8s.io/code-generator's
# output, written to upstream's conventions (no package comments, deprecated
# ListWatch fields beside the new ones), and verify-generated already holds
# it to its generator. Code that calls it is linted as usual.
LINT_SKIP := /pkg/generated/

##@ Lint

.PHONY: verify-lint
verify-lint: ## Run staticcheck on the main module and on the test module.
	$(GO) build -o $(STATICCHECK) honnef.co/go/tools/cmd/staticcheck
	@set -e; for mod in $(LINT_MODULES); do \
		echo "staticcheck: $$mod"; \
		pkgs=$$(cd $$mod && $(GO) list ./... | grep -v -e '$(LINT_SKIP)'); \
		(cd $$mod && $(STATICCHECK) $$pkgs); \
	done

verify: verify-lint
