# LoopDispatch — the two commands a newcomer needs are `make run` and `make test`.
# Both install libevent-dev (as root, after apt-get update) when pkg-config cannot find it.

SWIFT ?= swift
WERROR := -Xswiftc -warnings-as-errors
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build run test test-unit test-release test-leaks test-tsan test-c test-fuzz c-api install bench bench-http lint docs clean

all: build

## deps: install libevent-dev (and pkg-config) when libevent_core is not found.
deps:
	@if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libevent_core; then \
	  echo "Installing libevent-dev with apt-get..."; \
	  $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y libevent-dev pkg-config; \
	fi

build: deps
	$(SWIFT) build $(WERROR)

## run: the main job: the HTTP server example on 127.0.0.1:8080, an optimised build (Ctrl-C
## stops it cleanly).
run: deps
	$(SWIFT) run -c release $(WERROR) Examples serve

## test: lint, every test (debug, then release), then every test again under AddressSanitizer
## with LeakSanitizer and under ThreadSanitizer (sizes scaled down there; see
## LOOPDISPATCH_TEST_SCALE), then a minute of fuzzing the HTTP parser, then the docs.
test: lint test-unit test-release test-c test-leaks test-tsan test-fuzz docs

## The debug and release passes run with close_guard preloaded (Tests/CloseGuard): a `close`
## that fails with EBADF (a descriptor closed twice, which takes another test's descriptor
## whenever the number was reused in between) stops the run with the place it came from.
CLOSE_GUARD := .build/close-guard/libcloseguard.so

$(CLOSE_GUARD): Tests/CloseGuard/close_guard.c
	mkdir -p $(dir $@)
	clang -O2 -Wall -Wextra -Werror -shared -fPIC -o $@ $< -ldl

test-unit: deps $(CLOSE_GUARD)
	$(SWIFT) build --build-tests $(WERROR)
	LD_PRELOAD=$(CURDIR)/$(CLOSE_GUARD) $(SWIFT) test --skip-build

## test-release: every suite against an optimised build (-enable-testing for the suites that
## use @testable): optimisation splits a module into several object files and inlines across
## them, which debug builds never do (it once hid per-file copies of a thread-local slot).
test-release: deps $(CLOSE_GUARD)
	$(SWIFT) build -c release --build-tests -Xswiftc -enable-testing $(WERROR)
	LD_PRELOAD=$(CURDIR)/$(CLOSE_GUARD) $(SWIFT) test -c release --skip-build -Xswiftc -enable-testing

## test-c: the GCD C API: the C test suite (Tests/CAPI), the differential check against the
## toolchain's libdispatch (Tests/CDiff: each program's output must match), C clients under
## ThreadSanitizer (a synchronised program clean, a racy one reported), the C seed programs
## (Examples/C), built with clang -fblocks against <dispatch/dispatch.h>, a program built
## against `make install`'s result; then the suite and the seeds again
## with the library and the programs under AddressSanitizer and LeakSanitizer, and the
## differential programs under AddressSanitizer (no leak check: they keep their printing
## handlers for their whole life, on purpose).
test-c: deps
	scripts/test-c-api.sh debug
	scripts/test-c-diff.sh debug
	scripts/test-c-tsan.sh debug
	scripts/test-c-seeds.sh debug
	scripts/test-c-install.sh
	CFLAGS=-fsanitize=address ASAN_OPTIONS=detect_leaks=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp \
	  scripts/test-c-api.sh debug --scratch-path .build/asan --sanitize=address
	CFLAGS=-fsanitize=address ASAN_OPTIONS=detect_leaks=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp \
	  scripts/test-c-seeds.sh debug --scratch-path .build/asan --sanitize=address
	CFLAGS=-fsanitize=address ASAN_OPTIONS=detect_leaks=0 \
	  scripts/test-c-diff.sh debug --scratch-path .build/asan --sanitize=address

## c-api: libloopdispatch.so and .a (release) and a pkg-config file; prints the directory to
## put in PKG_CONFIG_PATH.
c-api: deps
	@scripts/c-api.sh release | tail -n 1

## install: the C API under PREFIX (default /usr/local): include/dispatch/dispatch.h,
## lib/libloopdispatch.{so,a} and lib/pkgconfig/loopdispatch.pc.
PREFIX ?= /usr/local
install: deps
	scripts/install-c-api.sh "$(PREFIX)"

## test-leaks: every suite (stress at its small size, the server soak at its full ~20k
## requests) under AddressSanitizer; its LeakSanitizer fails the run on a leak. Programs the tests start (the
## examples, the server, the test host) are built with the sanitizer too.
test-leaks: deps
	LOOPDISPATCH_TEST_SCALE=0.1 LOOPDISPATCH_SOAK_SCALE=1 ASAN_OPTIONS=detect_leaks=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp $(SWIFT) test \
	  --scratch-path .build/asan --sanitize=address $(WERROR) --disable-xctest

## test-tsan: every suite (stress at its small size) under ThreadSanitizer, failing on any
## report.
test-tsan: deps
	LOOPDISPATCH_TEST_SCALE=0.05 TSAN_OPTIONS=halt_on_error=1 $(SWIFT) test \
	  --scratch-path .build/tsan --sanitize=thread $(WERROR) --disable-xctest

## test-fuzz: the HTTP request parser under libFuzzer and AddressSanitizer for FUZZ_SECONDS
## (default 60), from the seeds in Fuzz/corpus/http; fails on a crash (a broken invariant: see
## Fuzz/HTTPParserFuzz.swift), a leak or an input that takes over 5 s.
FUZZ_SECONDS ?= 60
test-fuzz:
	SWIFT=$(SWIFT) scripts/fuzz-http.sh $(FUZZ_SECONDS)

## bench: the Benchmarks package in release mode; prints a table of ratios. MODE=neighbours
## (one busy process per CPU beside it) or MODE=quota (in a cgroup limited to 1 CPU): see
## Benchmarks/scripts/bench-mode.sh. Benchmarks/C/run.sh (the C API) takes the same MODE.
bench: deps
	SWIFT=$(SWIFT) Benchmarks/scripts/swift-bench.sh $(ARGS)

## docs: the DocC archives of MainLoop and LoopDispatch in docs-out/, built with the toolchain's
## docc; fails on any DocC warning, undocumented public symbol or unlisted misuse message.
docs: deps
	SWIFT=$(SWIFT) scripts/build-docs.sh

## bench-http: wrk against `Examples serve` (built as `make run` builds it), the same server on
## Apple's Dispatch and the same routes on libevent's evhttp in C, plus on SwiftNIO when NIO_PATH
## names a swift-nio checkout (its siblings swift-atomics, swift-collections, swift-system beside
## it; no network), 127.0.0.1 only; installs wrk (apt-get) when it is missing. RUNS, DURATION,
## CONNECTIONS, ROUTES, MODE (neighbours: one busy process beside the servers and wrk; quota:
## each server in a cgroup limited to 1 CPU), NIO_PATH: see the script.
bench-http: deps
	@if ! command -v wrk >/dev/null 2>&1; then \
	  echo "Installing wrk with apt-get..."; \
	  $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y wrk; \
	fi
	SWIFT=$(SWIFT) Benchmarks/scripts/wrk-servers.sh

## lint: swift format lint --strict on every tracked Swift file.
lint:
	$(SWIFT) format lint --strict $$(git ls-files '*.swift')

clean:
	rm -rf .build Benchmarks/.build
