# Every target works from a fresh clone with Go installed.
SHELL := /bin/bash
GO ?= go
# Every module of the workspace but the root (which holds no package), as
# package patterns.
PKGS = $(shell $(GO) list -m -f '{{.Dir}}/...' | grep -v '^$(CURDIR)/\.\.\.$$' | sed "s|^$(CURDIR)/|./|")
BENCHTIME ?= 1s
COUNT ?= 6

.PHONY: demo test lint bench bench-core bench-report deps

## demo: run the seed timeline and the multi-tier scenario on the in-memory store
demo:
	$(GO) run ./examples/demo

## test: every test of every module, with the race detector
test: deps lint
	$(GO) test -race -count=1 $(PKGS)

## lint: gofmt and go vet on every module
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## bench-core: the in-memory benchmarks of core alone, $(COUNT) runs each, with allocations
bench-core:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(COUNT) ./core/

# The peer comparisons live in benchmarks/, a module of its own so that the
# peers never enter a library's go.mod; the measurements run it with
# GOWORK=off, against exactly the versions its own go.mod names.
BENCH_BENCH = GOWORK=off $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(COUNT) -timeout 0 .
BENCH_ADMISSION = GOWORK=off $(GO) test -run '^TestAdmission' -count 1 -v .
BENCH_REPORT ?= ../BENCHMARKS.md

## bench: peer comparisons in memory and on Redis, $(COUNT) runs each; prints the table
bench: deps
	@mkdir -p benchmarks/results
	cd benchmarks && set -o pipefail && $(BENCH_BENCH) | tee results/bench.txt
	cd benchmarks && GOWORK=off $(GO) run ./cmd/report results/bench.txt

## bench-report: bench, the admission test and benchstat, written to BENCHMARKS.md and benchmarks/chart.svg
bench-report: bench
	cd benchmarks && set -o pipefail && $(BENCH_ADMISSION) | tee results/admission.txt
	cd benchmarks && for g in Memory Redis; do GOWORK=off $(GO) tool benchstat -filter ".name:$$g" -col /impl results/bench.txt || exit 1; done > results/benchstat.txt
	cd benchmarks && GOWORK=off $(GO) run ./cmd/report -admission results/admission.txt -benchstat results/benchstat.txt \
		-o $(BENCH_REPORT) -svg chart.svg -profile \
		-command "# make bench-report COUNT=$(COUNT) BENCHTIME=$(BENCHTIME) runs:" \
		-command "cd benchmarks && $(BENCH_BENCH)" \
		-command "cd benchmarks && $(BENCH_ADMISSION)" \
		-command "cd benchmarks && GOWORK=off go tool benchstat -filter .name:Memory -col /impl results/bench.txt  # and .name:Redis" \
		results/bench.txt

## deps: what the tests need beyond Go (redis-server, installed with apt-get when root)
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
