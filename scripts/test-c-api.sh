#!/usr/bin/env bash
# The C API's tests: builds libloopdispatch (scripts/c-api.sh, with the arguments given),
# compiles Tests/CAPI/capi_tests.c with clang -fblocks against the header through
# pkg-config, runs the suite (which ends in dispatch_main), then each misuse case, which must
# crash with a "BUG IN CLIENT OF LOOPDISPATCH:" line naming the bug.
#
# Usage: scripts/test-c-api.sh [debug|release] [swift build arguments...]
# CFLAGS adds compiler flags (the ASan run: CFLAGS=-fsanitize=address with
# `debug --scratch-path .build/asan --sanitize=address`).
set -euo pipefail
cd "$(dirname "$0")/.."
pcdir="$(scripts/c-api.sh "$@" | tail -n 1)"
export PKG_CONFIG_PATH="$pcdir"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# shellcheck disable=SC2086 # CFLAGS and pkg-config output are word lists.
clang -fblocks -Wall -Werror -g ${CFLAGS:-} $(pkg-config --cflags loopdispatch) \
  Tests/CAPI/capi_tests.c $(pkg-config --libs loopdispatch) \
  $(pkg-config --libs libevent_core) -o "$out/capi_tests"  # The suite adds its own events.

# shellcheck disable=SC2086
clang++ -fblocks -Wall -Werror ${CFLAGS:-} $(pkg-config --cflags loopdispatch) \
  Tests/CAPI/cxx_smoke.cpp $(pkg-config --libs loopdispatch) -o "$out/cxx_smoke"
timeout 60 "$out/cxx_smoke"
echo "ok c-api from C++"
if [ -z "${CFLAGS:-}" ]; then  # The static form (not under a sanitizer's runtime).
  # shellcheck disable=SC2046
  clang++ -fblocks -Wall -Werror $(pkg-config --cflags loopdispatch-static) \
    Tests/CAPI/cxx_smoke.cpp $(pkg-config --libs loopdispatch-static) -o "$out/cxx_static"
  timeout 60 "$out/cxx_static"
  echo "ok c-api linked statically"
fi

timeout 120 "$out/capi_tests" 2> "$out/suite-errors.txt" | tee "$out/suite.txt" \
  || { cat "$out/suite-errors.txt" >&2; exit 1; }
cat "$out/suite-errors.txt" >&2
grep -q "checks, 0 failures" "$out/suite.txt"
# dispatch_debug: one line per call, naming the object.
grep -qxF 'queue "c.debug": debug line 5' "$out/suite-errors.txt"
grep -qxF 'semaphore (initial value 3): semaphore line' "$out/suite-errors.txt"
echo "ok c-api suite"
# Serial queues beside neighbours (a debug library only: the verdict is forced through the
# environment there). Threads keep their own names (no renaming to the queue's label), so
# that an overcommit thread still reads ld.oc.* however long its drain took.
if [ "${1:-}" = debug ]; then
  LOOPDISPATCH_THREAD_NAMES=0 LOOPDISPATCH_TEST_NEIGHBOURS=1 \
    timeout 60 "$out/capi_tests" neighbours yes
  LOOPDISPATCH_THREAD_NAMES=0 LOOPDISPATCH_TEST_NEIGHBOURS=2 \
    timeout 60 "$out/capi_tests" neighbours no
fi

expect_bug() {
  local name="$1" message="$2" status
  # In a subshell whose stderr is dropped: the shell's own "Aborted" report is noise here.
  status=$( (timeout 60 "$out/capi_tests" misuse "$name" > "$out/$name.txt" 2>&1; echo $?) \
    2>/dev/null)
  if [ "$status" -eq 0 ] || ! grep -qF "BUG IN CLIENT OF LOOPDISPATCH: $message" "$out/$name.txt"; then
    echo "FAIL c-api misuse $name (exit $status): expected \"$message\"; got:" >&2
    cat "$out/$name.txt" >&2
    exit 1
  fi
  echo "ok c-api misuse $name"
}
expect_bug over-resume 'resume() on queue "c.balanced" that is not suspended (over-resume)'
expect_bug sync-on-current 'sync onto queue "c.mine" already owned by this thread'
expect_bug group-over-leave 'Group.leave() called more times than enter()'
expect_bug not-a-queue 'dispatch_async_f called with an object that is not a queue'
expect_bug assert-queue 'dispatch_assert_queue: not running on queue "c.elsewhere"'
expect_bug wait-plain-block 'dispatch_block_wait on a block not made by dispatch_block_create'
expect_bug wait-block-run-twice \
  'dispatch_block_wait: a block object may not be both run more than once and waited for'
expect_bug release-suspended 'queue "c.suspended" was released while suspended or inactive'
expect_bug not-data 'dispatch_data_get_size called with an object that is not a dispatch_data_t'
expect_bug data-null-buffer 'dispatch_data_create called with a NULL buffer of 8 bytes'
expect_bug proc-fork \
  'process source "dispatch-proc" asks for DISPATCH_PROC_FORK (.fork), which Linux cannot report'
expect_bug pressure-unknown-bits \
  'memory pressure source "dispatch-memorypressure" given unknown level bits 0x10'
expect_bug vnode-funlock \
  'dispatch_source_create(DISPATCH_SOURCE_TYPE_VNODE) with DISPATCH_VNODE_FUNLOCK (0x100)'
