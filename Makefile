# chunkup's build, test and CI entry points. `make test` is the one command a fresh
# Debian machine with Go needs: it installs what is missing, then runs every test.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules

GO ?= go

# Where test servers and code generators are installed, shared with internal/testenv
# (testenv.CacheDir uses the same rule; exporting CHUNKUP_CACHE makes them agree).
CACHE ?= $(or $(CHUNKUP_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/chunkup)
export CHUNKUP_CACHE := $(CACHE)
BIN := $(CACHE)/bin

# Pinned tool versions. MinIO's is pinned in one place, internal/testenv/minio.version,
# which testenv (the tests' own build of MinIO) reads too.
MINIO_VERSION := $(shell cat internal/testenv/minio.version)
TUSD_VERSION := $(shell cat internal/testenv/tusd.version)
VERSITYGW_VERSION := $(shell cat internal/testenv/versitygw.version)
BUF_VERSION := v1.73.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

# Debian packages the tests need. An entry COMMAND:PACKAGE installs PACKAGE when COMMAND
# is not on PATH; a bare PACKAGE installs it when dpkg does not have it. The Redis
# Cluster tests need redis-cli (--cluster create); the OCR tests need tesseract with its
# English data and poppler's pdftoppm; the HTTP door's tests need curl, Node and npm
# (tus-js-client, puppeteer-core) and chromium (the upload page, headless); the CLI's
# terminal test needs tmux (it reads the progress bars back from the screen).
APT_DEPS ?= redis-server:redis-server redis-cli:redis-tools tesseract:tesseract-ocr tesseract-ocr-eng pdftoppm:poppler-utils \
	curl:curl node:nodejs npm:npm chromium:chromium tmux:tmux
APT_DEPS += $(APT_DEPS_EXTRA)

GO_TEST_FLAGS ?=

# The tests' Node packages, pinned with their whole tree in one lock file, are
# installed into the cache (never the repository) under the lock's hash, as
# internal/testenv (NodeDir) expects them; --ignore-scripts: no install script runs, so
# no browser is downloaded (the tests drive Debian's chromium).
NODE_PACKAGES := internal/testenv/node
NODE_DIR = $(CACHE)/node/$(shell sha256sum $(NODE_PACKAGES)/package-lock.json | cut -c1-16)

.PHONY: all deps deps-apt deps-minio deps-tusd deps-seaweedfs deps-versitygw deps-node test chaos bench bench-go tools generate docs lint check-generate ci clean-cache

all: test

## deps: install redis-server, chromium, Node (apt), MinIO, tusd and versitygw (go install), SeaweedFS (built)
## and the tests' Node packages (npm ci into the cache) when missing
deps: deps-apt deps-minio deps-tusd deps-versitygw deps-node deps-seaweedfs

deps-apt:
	@missing=""; \
	for dep in $(APT_DEPS); do \
	  case "$$dep" in \
	    *:*) if command -v "$${dep%%:*}" >/dev/null 2>&1; then continue; fi; pkg="$${dep#*:}" ;; \
	    *)   if dpkg-query -W -f='$${Status}' "$$dep" 2>/dev/null | grep -q 'ok installed'; then continue; fi; pkg="$$dep" ;; \
	  esac; \
	  missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "deps: installing Debian packages:$$missing"; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "deps: apt-get not found; install these packages by hand:$$missing" >&2; exit 1; \
	fi; \
	sudo=""; \
	if [ "$$(id -u)" -ne 0 ]; then \
	  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	  else echo "deps: not root and no sudo; install these packages by hand:$$missing" >&2; exit 1; fi; \
	fi; \
	$$sudo apt-get update; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	for dep in $(APT_DEPS); do \
	  case "$$dep" in *:*) command -v "$${dep%%:*}" >/dev/null || { echo "deps: $${dep%%:*} still not on PATH after installing $${dep#*:}" >&2; exit 1; } ;; esac; \
	done

# go_install BINARY, PACKAGE, VERSION: `go install PACKAGE@VERSION` into $(BIN) unless
# $(BIN)/BINARY is already a build of VERSION (checked with `go version -m`).
define go_install
	@mkdir -p "$(BIN)"
	@if [ -x "$(BIN)/$(1)" ] && $(GO) version -m "$(BIN)/$(1)" 2>/dev/null | grep -qE '^[[:space:]]+mod[[:space:]].*[[:space:]]$(3)([[:space:]]|$$)'; then \
	  : "$(1) $(3) is installed"; \
	else \
	  echo "installing $(1) $(3) into $(BIN)"; \
	  lock="$(CACHE)/$(1).lock"; \
	  if command -v flock >/dev/null 2>&1; then \
	    flock "$$lock" env GOBIN="$(BIN)" GOWORK=off $(GO) install "$(2)@$(3)"; \
	  else \
	    GOBIN="$(BIN)" GOWORK=off $(GO) install "$(2)@$(3)"; \
	  fi; \
	fi
endef

# The lock file is the one internal/testenv takes before building MinIO itself.
deps-minio:
	$(call go_install,minio,github.com/minio/minio,$(MINIO_VERSION))

# tusd: the bench's peer (and its small run in make test).
deps-tusd:
	$(call go_install,tusd,github.com/tus/tusd/v2/cmd/tusd,$(TUSD_VERSION))

# versitygw: the third store (its subset in make test).
deps-versitygw:
	$(call go_install,versitygw,github.com/versity/versitygw/cmd/versitygw,$(VERSITYGW_VERSION))

# SeaweedFS cannot be `go install`ed (replace directives in its go.mod): testenv builds
# it into the cache (SeaweedFSBinary, under its lock), here by starting it once, before
# the suites, so that its build does not compete with them for the cores.
deps-seaweedfs:
	@if ! ls "$(BIN)"/weed-* >/dev/null 2>&1; then echo "building SeaweedFS into $(BIN) (several minutes, once)"; fi
	$(GO) test -count=1 -run '^TestS3Servers$$/^seaweedfs$$' ./internal/testenv/

# The lock file is the one internal/testenv takes before installing them itself.
deps-node: deps-apt
	@if [ ! -f "$(NODE_DIR)/.installed" ]; then \
	  echo "installing the tests' Node packages into $(NODE_DIR)"; \
	  mkdir -p "$(NODE_DIR)"; \
	  cp $(NODE_PACKAGES)/package.json $(NODE_PACKAGES)/package-lock.json "$(NODE_DIR)/"; \
	  flock "$(CACHE)/node.lock" sh -c 'cd "$(NODE_DIR)" && if [ ! -f .installed ]; then \
	    PUPPETEER_SKIP_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund && touch .installed; fi'; \
	fi

# The tests that run a second time on SeaweedFS (internal/testenv.StartS3 with
# CHUNKUP_TEST_S3=seaweedfs): the S3 operations themselves, and uploads end to end
# (one chunk and many, resume, if_absent and its races, CRC32C, expiry aborting the
# multipart upload, strays, ReadObject ranges, the HTTP door). Everything runs on MinIO.
SEAWEEDFS_TESTS := ./s3store/ ./test/e2e/ ./upload/ ./bench/
SEAWEEDFS_RUN := ^(TestIfAbsent|TestAbortStraysPages|TestChunkChecksums|TestCompleteAfterCutOffCompletion|TestReason|TestUploadSizes|TestCompletersRace|TestAbandonedUploadExpires|TestReadObject|TestHTTPCurl|TestHTTPSmallPatches|TestHTTPAppendsOfAnySize|TestHTTPIETFVersions|TestHTTPParallelUploads|TestWorkerKilledHoldingClaim|TestObjects|TestRunSmall|TestDirectContractByCurl|TestDirectRefusals|TestDirectPartURLCannotCopy|TestDirectUploadExpires|TestDirectSDKAndCLI|TestDirectUppyInBrowser|TestUppyTusInBrowser)$$

# The same tests but the bench's small run, a third time on versitygw (CHUNKUP_TEST_S3=versitygw,
# its POSIX backend).
VERSITYGW_TESTS := ./s3store/ ./test/e2e/ ./upload/
VERSITYGW_RUN := $(subst |TestRunSmall|,|,$(SEAWEEDFS_RUN))

## test: run every test, with the race detector, on MinIO; then the S3 subset on
## SeaweedFS and on versitygw
test: deps
	$(GO) test -race -timeout 30m $(GO_TEST_FLAGS) ./...
	CHUNKUP_TEST_S3=seaweedfs $(GO) test -race -timeout 30m -run '$(SEAWEEDFS_RUN)' $(GO_TEST_FLAGS) $(SEAWEEDFS_TESTS)
	CHUNKUP_TEST_S3=versitygw $(GO) test -race -timeout 30m -run '$(VERSITYGW_RUN)' $(GO_TEST_FLAGS) $(VERSITYGW_TESTS)

## chaos: the fault-injection suite (test/chaos, build tag chaos): kill -9 of
## server, worker and completer processes, Redis restarted, MinIO and Kafka stopped
chaos: deps
	$(GO) test -race -tags chaos -timeout 20m -v $(GO_TEST_FLAGS) ./test/chaos/

## bench: chunkup against direct S3 uploads (bench/, about 5 minutes; the large upload
## also through the HTTP door): a table of ratios, also written to bench-results.json.
## BENCH_FLAGS passes flags (go run ./bench -h).
bench: deps
	$(GO) run ./bench $(BENCH_FLAGS)

## bench-go: run the Go benchmarks (no tests)
bench-go: deps
	$(GO) test -run '^$$' -bench . -benchmem $(GO_TEST_FLAGS) ./...

## tools: install buf and the protoc plugins `make generate` uses
tools:
	$(call go_install,buf,github.com/bufbuild/buf/cmd/buf,$(BUF_VERSION))
	$(call go_install,protoc-gen-go,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION))
	$(call go_install,protoc-gen-go-grpc,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION))

## generate: regenerate gen/ from proto/, and the descriptors with their comments that
## gRPC reflection serves (internal/protosource)
generate: tools
	PATH="$(BIN):$$PATH" buf generate
	PATH="$(BIN):$$PATH" buf build --exclude-imports -o internal/protosource/chunkup.binpb

## docs: regenerate the flag tables of docs/configuration.md from the flags' definitions
## (TestConfigurationDocIsCurrent fails when they are stale)
docs:
	$(GO) run ./cmd/chunkup docs-flags -w docs/configuration.md

## lint: buf lint, go vet and gofmt
lint: tools
	PATH="$(BIN):$$PATH" buf lint
	$(GO) vet ./...
	@unformatted="$$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -print0 | xargs -0 -r gofmt -l)"; \
	if [ -n "$$unformatted" ]; then \
	  echo "gofmt: these files are not formatted (run gofmt -w):" >&2; echo "$$unformatted" >&2; exit 1; \
	fi

## check-generate: fail if gen/ (or internal/protosource) differs from what `make generate` produces
check-generate: generate
	@git diff --exit-code --stat -- gen/ internal/protosource/ || { echo "gen/ is stale: run make generate and commit the result" >&2; exit 1; }
	@untracked="$$(git ls-files --others --exclude-standard -- gen/ internal/protosource/)"; \
	if [ -n "$$untracked" ]; then \
	  echo "make generate created files that are not committed:" >&2; echo "$$untracked" >&2; exit 1; \
	fi

## ci: everything CI runs
ci: lint check-generate test

## clean-cache: remove the installed tools and test servers
clean-cache:
	rm -rf "$(CACHE)"
