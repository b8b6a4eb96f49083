# Every target works from a fresh clone with Go installed.
SHELL := /bin/bash
GO ?= go
# Every module of the workspace but the root (which holds no package), as
# package patterns.
PKGS = $(shell $(GO) list -m -f '{{.Dir}}/...' | grep -v '^$(CURDIR)/\.\.\.$$' | sed "s|^$(CURDIR)/|./|")
BENCHTIME ?= 1s
COUNT ?= 6
# The release that release-check installs and tidy writes into every go.mod.
VERSION ?= v0.1.0
# The tool runs outside the workspace (its module needs only golang.org/x/mod),
# so that it works on a workspace that does not load.
RELEASE = cd internal/release && GOWORK=off $(GO) run .

.PHONY: demo test lint bench bench-core bench-report bench-versions deps release-check tidy loadtest

## demo: run the seed timeline and the multi-tier scenario on the in-memory store
demo:
	$(GO) run ./examples/demo

## test: every test of every module, with the race detector; core's allocation tests again without it (the
## race detector drops pooled items at random); then release-check
test: deps lint
	$(GO) test -race -count=1 $(PKGS)
	$(GO) test -count=1 -run 'Allocs$$' ./core/...
	@$(MAKE) --no-print-directory release-check

## release-check: install every module at $(VERSION) from a file proxy of the working tree, as a user
## outside the workspace would, and run the README quick starts (see internal/release)
release-check: deps
	$(RELEASE) check -go $(GO) -root $(CURDIR) -version $(VERSION)

## tidy: require the project's modules at $(VERSION) in every go.mod (no replace; go.work replaces them at
## $(VERSION) by the local copies), go mod tidy each module against a proxy of the working tree
tidy:
	$(RELEASE) tidy -go $(GO) -root $(CURDIR) -version $(VERSION)

## lint: gofmt and go vet on every module
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## loadtest: the gin and net/http example servers driven over HTTP by vegeta at a constant rate on every
## store, beside a baseline without the middleware and through a Redis outage; every bucket checked against
## the exact math; written to LOADTEST.md and benchmarks/loadtest/plots (about 8 minutes; LOADTEST_FLAGS=-help lists
## what else it takes)
LOADTEST_FLAGS ?=
loadtest: deps
	cd benchmarks/loadtest && $(GO) run . -out ../../LOADTEST.md -plots benchmarks/loadtest/plots $(LOADTEST_FLAGS)

## bench-core: the in-memory benchmarks of core alone, $(COUNT) runs each, with allocations
bench-core:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(COUNT) ./core/

# The peer comparisons live in benchmarks/, a module of its own so that the
# peers never enter a library's go.mod. The measurements run it in the
# workspace, so that our modules are those of the working tree (its go.mod
# names them at the release version, which no proxy has before the tag);
# bench-versions first checks that the workspace selects every other module
# at exactly the version benchmarks/go.mod names, so no other module of the
# workspace has raised a peer.
# The $(COUNT) runs are rounds of the whole suite, one after another, not
# $(COUNT) runs of each benchmark in a row: ours and its peers then share
# each round's load, and a burst of other work on the machine spreads over
# every implementation instead of landing on one.
BENCH_BENCH = for round in $(shell seq $(COUNT)); do $(GO) test -run '^$$' -bench '^Benchmark(Memory|Redis|Middleware)$$' -benchmem -benchtime $(BENCHTIME) -count 1 -timeout 0 . || exit 1; done
BENCH_ADMISSION = $(GO) test -run '^TestAdmission' -count 1 -v .
BENCH_REPORT ?= ../BENCHMARKS.md

## bench: peer comparisons in memory and on Redis, $(COUNT) rounds; prints the table
bench: deps bench-versions
	@mkdir -p benchmarks/results
	cd benchmarks && set -o pipefail && $(BENCH_BENCH) | tee results/bench.txt
	cd benchmarks && $(GO) run ./cmd/report results/bench.txt

## bench-report: bench, the admission test and benchstat, written to BENCHMARKS.md and benchmarks/chart.svg
bench-report: bench
	cd benchmarks && set -o pipefail && $(BENCH_ADMISSION) | tee results/admission.txt
	cd benchmarks && for g in Memory Redis; do $(GO) tool benchstat -filter ".name:$$g" -col /impl results/bench.txt || exit 1; done > results/benchstat.txt
	cd benchmarks && $(GO) run ./cmd/report -admission results/admission.txt -benchstat results/benchstat.txt \
		-o $(BENCH_REPORT) -svg chart.svg -profile \
		-command "# make bench-report COUNT=$(COUNT) BENCHTIME=$(BENCHTIME) runs:" \
		-command "cd benchmarks && $(BENCH_BENCH)" \
		-command "cd benchmarks && $(BENCH_ADMISSION)" \
		-command "cd benchmarks && go tool benchstat -filter .name:Memory -col /impl results/bench.txt  # and .name:Redis" \
		results/bench.txt

## bench-versions: the workspace selects the peers at exactly the versions benchmarks/go.mod names
bench-versions:
	@cd benchmarks && \
	want=$$($(GO) mod edit -print | awk '$$1 == "require" && $$2 == "(" { r = 1; next } r && $$1 == ")" { r = 0 } \
		r { print $$1, $$2 } $$1 == "require" && $$2 != "(" { print $$2, $$3 }' | grep -v '^github.com/bucketry/' | sort) && \
	got=$$($(GO) list -m -f '{{.Path}} {{.Version}}' $$(echo "$$want" | cut -d' ' -f1) | sort) && \
	if [ "$$want" != "$$got" ]; then \
		echo "the workspace selects other versions than benchmarks/go.mod names (< go.mod, > workspace):" >&2; \
		diff <(echo "$$want") <(echo "$$got") >&2; exit 1; \
	fi

## deps: what the tests need beyond Go (redis-server and PostgreSQL, installed with apt-get when root)
deps:
	@$(GO) version >/dev/null
	@if ! command -v redis-server >/dev/null 2>&1; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "installing redis-server with apt-get"; \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get update -qq && apt-get install -y -qq redis-server >/dev/null || exit 1; \
		else \
			echo "redis-server not found: install the redis-server package (apt-get install redis-server on Debian/Ubuntu, brew install redis on macOS)" >&2; \
			exit 1; \
		fi; \
	fi
	@redis-server --version >/dev/null
	@if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "installing postgresql with apt-get"; \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get update -qq && apt-get install -y -qq postgresql >/dev/null || exit 1; \
		else \
			echo "initdb not found: install the postgresql package (apt-get install postgresql on Debian/Ubuntu, brew install postgresql on macOS)" >&2; \
			exit 1; \
		fi; \
	fi
