# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

NODE_WORKER := examples/node-worker
NODE_STAMP := $(NODE_WORKER)/node_modules/.installed
TS_CLIENT := clients/typescript
TS_STAMP := $(TS_CLIENT)/node_modules/.installed
TS_BUILT := $(TS_CLIENT)/node_modules/.built
TS_SOURCES := $(shell find $(TS_CLIENT)/src -name '*.ts') $(TS_CLIENT)/tsconfig.json $(TS_CLIENT)/tsconfig.esm.json \
	$(TS_CLIENT)/scripts/build.mjs
BUF_TOOLS := tools/buf
BUF := $(BUF_TOOLS)/node_modules/.bin/buf
BUF_STAMP := $(BUF_TOOLS)/node_modules/.installed

.PHONY: venv node typescript ts-proto buf-tools buf go go-proto generate java run test check lint typecheck \
	proto bench clean version

venv: $(STAMP)

# The TypeScript SDK (@earmark/client): its packages from its lock file, then tsc twice
# (scripts/build.mjs: an ES module build and a CommonJS one).
typescript: $(TS_BUILT)

$(TS_STAMP): $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
	touch $(TS_STAMP)

$(TS_BUILT): $(TS_STAMP) $(TS_SOURCES)
	cd $(TS_CLIENT) && npm run --silent build
	touch $(TS_BUILT)

# The Node.js example worker's packages, from its lock file; it uses the SDK from its folder.
node: $(TS_BUILT) $(NODE_STAMP)

$(NODE_STAMP): $(NODE_WORKER)/package.json $(NODE_WORKER)/package-lock.json
	cd $(NODE_WORKER) && npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# The Go SDK (clients/go: the module github.com/earmark-dev/earmark/gen/go, so that its
# stubs' import path, clients/go/earmark/v1, is the proto's go_package) and its example
# worker, built offline against Debian's Go packages in /usr/share/gocode (grpc-go 1.33.3,
# protobuf-go 1.28.1, golang/protobuf 1.5.2, genproto), which .ci/run installs. GOPATH mode
# (GO111MODULE=off), not module mode: module mode with GOPROXY=off and `replace` to those
# folders still needs the go.mod of every module their go.mod files require ("github.com/
# golang/protobuf@v1.5.2 requires github.com/google/go-cmp@v0.5.5: module lookup disabled
# by GOPROXY=off", then grpc-go's), which Debian does not ship. The module's path
# resolves through clients/go/.gopath, a relative symbolic link made here (git-ignored).
# vet and `go test -run '^$$'` compile the tests too, so that the suite only runs them.
GO_CLIENT := clients/go
GO_LINK := $(GO_CLIENT)/.gopath/src/github.com/earmark-dev/earmark/gen/go
GO_ENV := GO111MODULE=off GOPATH=$(CURDIR)/$(GO_CLIENT)/.gopath:/usr/share/gocode GOFLAGS= \
	GOPROXY=off
GO_SOURCES := $(shell find $(GO_CLIENT) -name '*.go' -not -path '*/.gopath/*')
GO_WORKER := $(GO_CLIENT)/bin/worker
# The conformance kit's adapter (docs/conformance.md), built with the worker (before it,
# the recipe's target, so that a failed build of either leaves the target out of date).
GO_CONFORMANCE := $(GO_CLIENT)/bin/conformance

go: $(GO_WORKER)

# The Java worker example (examples/java-worker: the generated stubs and a worker, no SDK),
# compiled by plain javac against Debian's grpc-java and protobuf-java jars (build.sh).
JAVA_WORKER := examples/java-worker
JAVA_SOURCES := $(JAVA_WORKER)/Worker.java $(JAVA_WORKER)/build.sh \
	$(shell find $(JAVA_WORKER)/gen -name '*.java')
JAVA_BUILT := $(JAVA_WORKER)/out/Worker.class

java: $(JAVA_BUILT)

$(JAVA_BUILT): $(JAVA_SOURCES)
	$(JAVA_WORKER)/build.sh

$(GO_WORKER): $(GO_SOURCES)
	mkdir -p $(dir $(GO_LINK))
	ln -sfn ../../../../../.. $(GO_LINK)
	cd $(GO_LINK) && $(GO_ENV) go build ./... && $(GO_ENV) go vet ./... \
		&& $(GO_ENV) go test -count=1 -run '^$$' ./... >/dev/null \
		&& $(GO_ENV) go build -o $(CURDIR)/$(GO_CONFORMANCE) ./examples/conformance \
		&& $(GO_ENV) go build -o $(CURDIR)/$(GO_WORKER) ./examples/worker

# buf (from npm, pinned in tools/buf) for the wire contract's lint and breaking checks.
buf-tools: $(BUF_STAMP)

$(BUF_STAMP): $(BUF_TOOLS)/package.json $(BUF_TOOLS)/package-lock.json
	cd $(BUF_TOOLS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(BUF_STAMP)

# The contract only grows: lint, and no breaking change against the baseline image of the
# released contract (tools/buf/baseline.binpb).
buf: buf-tools
	$(BUF) lint
	$(BUF) breaking --against $(BUF_TOOLS)/baseline.binpb

$(STAMP): pyproject.toml
	@echo "earmark: creating .venv and installing the sidecar and its tools (a minute or two, once)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[server,console,dev]'
	touch $(STAMP)
	@echo "earmark: installed into .venv"

run: venv
	$(BIN)/earmark serve

# `make test` runs the suite on four workers (pytest-xdist), each with its own embedded
# PostgreSQL: most of a test's time is spent waiting on a sidecar, a database or a
# subprocess, so four keep two cores busy (fresh clones: 236 to 272 s on four workers,
# 228 to 304 s on three). Tests that build the TypeScript package share a
# worker (xdist_group); `make test TEST_WORKERS=0` runs everything in one process. The 25
# slowest tests are listed at the end, where a slow new one shows.
TEST_WORKERS ?= 4
test: venv typescript node buf-tools go java
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25

lint: venv
	$(BIN)/ruff check src tests tools bench
	$(BIN)/ruff format --check src tests tools bench

typecheck: venv
	$(BIN)/mypy

# What CI runs.
check: lint typecheck test

# Regenerates every language's code from protos/ with buf.gen.yaml (tools/protogen.py:
# `buf generate`, then the .proto copies beside the Python code). Needs .venv's grpcio-tools,
# buf, the TypeScript SDK's node_modules (ts-proto) and Debian's protoc, grpc_java_plugin,
# protoc-gen-go and protoc-gen-go-grpc (.ci/run installs them); tests/test_generated.py
# fails when the checked-in code drifts.
generate: venv buf-tools $(TS_STAMP)
	$(BIN)/python tools/protogen.py

# The old names of `make generate`, which now makes every language at once.
proto ts-proto go-proto: generate

bench: venv
	$(BIN)/python -m bench

# The release's version, stated once: `make version VERSION=X.Y.Z` writes it into
# pyproject.toml and the copies npm needs literally (tools/version.py). The next `make`
# reinstalls .venv, pyproject.toml being newer, so `earmark --version` there says it too.
version:
	@test -n "$(VERSION)" || { echo "usage: make version VERSION=X.Y.Z" >&2; exit 2; }
	$(PYTHON) tools/version.py $(VERSION)

# The container image, from deploy/docker/Dockerfile with the repository as its context:
# `make image TAG=registry.example.com/earmark:0.1.0`, then `docker push` that tag and name
# it in your overlay's `images:` (deploy/README.md). DOCKER=podman builds with Podman.
.PHONY: image
DOCKER ?= docker
image:
	@test -n "$(TAG)" || { echo "usage: make image TAG=REGISTRY/earmark:VERSION" >&2; exit 2; }
	$(DOCKER) build -f deploy/docker/Dockerfile -t $(TAG) .

clean:
	rm -rf $(VENV) .earmark .pytest_cache .mypy_cache .ruff_cache $(NODE_WORKER)/node_modules \
		$(BUF_TOOLS)/node_modules $(TS_CLIENT)/node_modules $(TS_CLIENT)/dist \
		$(GO_CLIENT)/bin $(GO_CLIENT)/.gopath $(JAVA_WORKER)/out
