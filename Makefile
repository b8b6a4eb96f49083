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

## deps: what the tests need beyond Go
deps:
	@$(GO) version >/dev/null
