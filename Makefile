# omst: the two commands a newcomer needs are `make demo` and `make test`.
# GO: a Go >= 1.26; scripts/ensure-go.sh finds one or fetches the official
# toolchain from the Go module proxy.
GO      ?= $(shell scripts/ensure-go.sh)
export GOFLAGS ?= -buildvcs=false
BIN     := bin/omst
PKGS    := ./...
FUZZTIME ?= 10s
# Fault injection (docs/faults.md): SEED=n replays a run, CASES=a,b selects
# cases, SOAK is how long `make soak` runs.
SEED    ?=
CASES   ?=
SOAK    ?= 30m
FAULTBIN := bin/omst-fault
FAULTS  = bin/omst-faults -bin $(BIN) -fault-bin $(FAULTBIN) $(if $(SEED),-seed $(SEED)) $(if $(CASES),-cases $(CASES))

.PHONY: all build demo test check unit race integration faultbin faults soak bindings ctest pytest examples wan-small slurm fuzz bench bench-bindings bench-wan bench-sim clean deps

all: build

deps: ## download Go modules (and Go itself when no Go >= 1.26 is installed)
	@test -n "$(GO)" || { echo "no Go >= 1.26 and it could not be fetched: install Go from https://go.dev/dl/"; exit 1; }
	$(GO) version
	$(GO) mod download

# The commit `omst version` reports (GOFLAGS has -buildvcs=false: a clean
# clone owned by another user makes go's own VCS stamping fail).
COMMIT  := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)

build: deps ## build bin/omst (static, CGO_ENABLED=0: `omst grid up` copies it to hosts whatever their C library)
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.buildCommit=$(COMMIT)" -o $(BIN) ./cmd/omst

demo: build ## build omst and run the in-process emulated grid demo
	./$(BIN) demo

# Parts of `make test` that skip themselves or some of their cases (no
# root, no iptables) append a line "part: reason" to OMST_SKIPS; the final
# line lists them, so that "all passed" never hides a part that did not run.
export OMST_SKIPS ?= $(CURDIR)/bin/test-skips.txt
ifneq ($(filter test,$(MAKECMDGOALS)),)
$(shell mkdir -p bin && rm -f "$(OMST_SKIPS)")
endif

test: deps check race integration faults bindings examples wan-small slurm ## everything CI runs
	@scripts/test-summary.sh "$(OMST_SKIPS)"

check: ## formatting, vet, and go.mod/go.sum tidy (main module and the test plans)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	cd testplans/omst && $(GO) mod tidy -diff
	cd testplans/sync && $(GO) mod tidy -diff

race: ## unit tests (with fuzz seed corpora) under the race detector
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list $(PKGS) | grep -v '/cmd/omst$$')

integration: ## multi-process tests: real daemons on loopback
	$(GO) test -count=1 -timeout 15m -run 'Test' ./cmd/omst/

# The lying workers and relays of the fault suite run omst built with -tags omstfault
# (internal/faultinject); bin/omst itself never holds that code.
faultbin: deps
	CGO_ENABLED=0 $(GO) build -tags omstfault -ldflags "-X main.buildCommit=$(COMMIT)" -o $(FAULTBIN) ./cmd/omst

faults: build faultbin ## fault injection, small form: each case once against real daemons (~1 min; SEED=n replays, CASES=a,b)
	$(GO) build -o bin/omst-faults ./cmd/omst-faults
	./$(FAULTS)

soak: build faultbin ## fault injection in randomized rounds until SOAK has passed (make soak SOAK=1h; SEED=n, CASES=a,b)
	$(GO) build -o bin/omst-faults ./cmd/omst-faults
	./$(FAULTS) -duration $(SOAK)

bindings: ctest pytest ## the C library and the Python package, against real daemons

ctest: build ## C library (bindings/c): build, then its tests against a real daemon, also under ASan+UBSan; then the README's pkg-config line against an install
	$(MAKE) --no-print-directory -C bindings/c test OMST_BIN=$(CURDIR)/$(BIN)
	$(MAKE) --no-print-directory -C bindings/c test-asan OMST_BIN=$(CURDIR)/$(BIN)
	$(MAKE) --no-print-directory -C bindings/c test-install

pytest: build ## Python package (bindings/python), installed into .venv, tested against real daemons
	OMST_BIN=$(CURDIR)/$(BIN) $$(scripts/pyenv.sh) -m pytest -q bindings/python/tests

examples: build ## MPI, task-farm (C) and sweep (Python) examples, each against its own daemons
	OMST_BIN=$(CURDIR)/$(BIN) examples/mpi/run.sh
	OMST_BIN=$(CURDIR)/$(BIN) examples/taskfarm/run.sh
	OMST_BIN=$(CURDIR)/$(BIN) PYTHON=$$(scripts/pyenv.sh) examples/sweep/run.sh

wan-small: build ## the testground plan's own tests, then its small broadcast on emulated WAN namespaces (root; skips without)
	cd testplans/omst && $(GO) vet ./... && OMST_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 ./...
	GO=$(GO) OMST_BIN=$(CURDIR)/$(BIN) ./scripts/wan-small.sh

slurm: build ## omst under a real Slurm: a 4-node cluster on this machine (scripts/slurm-cluster.sh), sbatch jobs running omst slurm up, an MPI program, bcast, down, scancel mid-transfer, jobs side by side, one joined to a closed root, stage-in/out by dist/slurm/burst_buffer.lua (root; skips without the packages; ~1 min)
	OMST_BIN=$(CURDIR)/$(BIN) PYTHON=$$(scripts/pyenv.sh) scripts/slurm-test.sh

fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run XXX -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

bench: build ## benchmarks (not tests): see docs/benchmarks.md
	./scripts/bench.sh

bench-bindings: build ## C and Python client benchmarks (not tests): see docs/benchmarks.md
	./scripts/bench-bindings.sh

bench-sim: deps ## simulated sites of 8 to 1,000 workers driving omst's own decisions (cmd/omst-sim; not a test, ~40 min): docs/bench/sim-*.json, docs/sim-scale.png, see docs/benchmarks.md
	GO=$(GO) ./scripts/bench-sim.sh

bench-wan: ## the emulated-WAN benchmark table, omst beside its baselines and BitTorrent (root; ~45 min): see docs/benchmarks.md
	GO=$(GO) ./scripts/bench-wan.sh

clean:
	rm -rf bin .venv
	$(MAKE) -C bindings/c clean
