# Every target works from a fresh clone with Go installed.
SHELL := /bin/bash
GO ?= go
# Every module of the workspace but the root (which holds no package), as
# package patterns.
PKGS = $(shell $(GO) list -m -f '{{.Dir}}/...' | grep -v '^$(CURDIR)/\.\.\.$$' | sed "s|^$(CURDIR)/|./|")
BENCHTIME ?= 1s
COUNT ?= 6

.PHONY: demo test lint bench deps

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

## bench: the in-memory benchmarks, $(COUNT) runs each, with allocations
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(COUNT) ./core/

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
