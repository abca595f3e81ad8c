#!/usr/bin/env bash
# libdispatch's own C tests against LoopDispatch's C API, beside Apple's libdispatch from the
# toolchain (the reference). Not part of `make test`: it needs a checkout of
# swift-corelibs-libdispatch, which CI does not have.
#
# Usage: scripts/libdispatch-tests.sh <swift-corelibs-libdispatch checkout> [test ...]
#   No test names: the Linux build's whole C selection (tests/CMakeLists.txt's DISPATCH_C_TESTS
#   and its EXTENDED_TEST_SUITE list, 32 tests).
# Environment (optional):
#   RUNS=1          runs per test and side
#   SIDES="ld ref"  ld = LoopDispatch, ref = the toolchain's libdispatch
#   AS_USER=nobody  run the binaries as this user (dispatch_io expects EACCES from a
#                   write-protected directory, which root never gets: it fails as root on both)
#   TIMEOUT=120     seconds per run
#   OUT=dir         where sources, binaries and logs go (default: a new temporary directory)
# A run passes when it exits 0 and printed no "[FAIL]" line. Exit status: 1 if any
# LoopDispatch run failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
checkout="${1:?usage: scripts/libdispatch-tests.sh <libdispatch checkout> [test ...]}"
shift
tests_dir="$checkout/tests"
[ -f "$tests_dir/dispatch_test.c" ] || { echo "no tests/dispatch_test.c under $checkout" >&2; exit 2; }
core="apply api debug queue_finalizer overcommit context_for_key after timer timer_short
  timer_timeout sema timer_bit31 timer_bit63 timer_set_time data io_muxed io_net io_pipe
  io_pipe_close select priority concur group read read2 starfish suspend_timer pingpong drift
  readsync cascade io"
tests="${*:-$core}"
RUNS="${RUNS:-1}"
SIDES="${SIDES:-ld ref}"
TIMEOUT="${TIMEOUT:-120}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out/src" "$out/bin" "$out/logs" "$out/refinc/dispatch"
chmod 755 "$out" "$out/bin"

pcdir="$("$root/scripts/c-api.sh" debug 2>"$out/c-api.log" | tail -n 1)" || {
  cat "$out/c-api.log" >&2
  exit 2
}
export PKG_CONFIG_PATH="$pcdir"
toolchain="$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")/lib/swift"
cp "$tests_dir"/{bsdtests.c,bsdtests.h,dispatch_test.c,dispatch_test.h,generic_unix_port.h} "$out/src/"
# The toolchain installs no <dispatch/private.h>; its libdispatch exports what the tests use.
cat > "$out/refinc/dispatch/private.h" <<'H'
#include <dispatch/dispatch.h>
enum { DISPATCH_QUEUE_OVERCOMMIT = 0x2ull };
#define DISPATCH_QUEUE_WIDTH_ACTIVE_CPUS -1
#define DISPATCH_QUEUE_WIDTH_MAX_PHYSICAL_CPUS -2
#define DISPATCH_QUEUE_WIDTH_MAX_LOGICAL_CPUS -3
void dispatch_queue_set_width(dispatch_queue_t queue, long width);
H
common=(-fblocks -D_GNU_SOURCE -Wall -Wno-deprecated-declarations -Wno-unused-function
  -Wno-unused-but-set-variable -g -I "$out/src" -I "$toolchain/Block")
run_as=()
if [ -n "${AS_USER:-}" ]; then
  run_as=(setpriv --reuid="$(id -u "$AS_USER")" --regid="$(id -g "$AS_USER")" --clear-groups)
fi
status=0
passed=0
total=0
table=()
for t in $tests; do
  cp "$tests_dir/dispatch_$t.c" "$out/src/" || { status=1; continue; }
  for side in $SIDES; do
    bin="$out/bin/$t.$side"
    if [ "$side" = ld ]; then
      # shellcheck disable=SC2046 # pkg-config output is a word list.
      clang "${common[@]}" $(pkg-config --cflags loopdispatch) "$out/src/dispatch_$t.c" \
        "$out/src/bsdtests.c" "$out/src/dispatch_test.c" $(pkg-config --libs loopdispatch) \
        -lpthread -lm -o "$bin" 2>>"$out/build.log"
    else
      clang "${common[@]}" -I "$toolchain" -I "$out/refinc" "$out/src/dispatch_$t.c" \
        "$out/src/bsdtests.c" "$out/src/dispatch_test.c" -L "$toolchain/linux" \
        -Wl,-rpath,"$toolchain/linux" -ldispatch -lBlocksRuntime -lpthread -lm -o "$bin" \
        2>>"$out/build.log"
    fi || echo "build failed: $t ($side), see $out/build.log" >&2
    line="$(printf '%-16s %-4s' "$t" "$side")"
    for ((i = 1; i <= RUNS; i++)); do
      log="$out/logs/$t.$side.$i.out"
      (cd /tmp && timeout "$TIMEOUT" "${run_as[@]}" "$bin") >"$log" 2>&1
      rc=$?
      if [ "$rc" = 0 ] && ! grep -q '^\[FAIL\]' "$log"; then
        verdict=pass
      else
        verdict="FAIL(rc=$rc)"
        [ "$side" = ld ] && status=1
      fi
      [ "$side" = ld ] && { total=$((total + 1)); [ "$verdict" = pass ] && passed=$((passed + 1)); }
      line+=" $verdict"
    done
    table+=("$line")
  done
done
printf '%s\n' "${table[@]}"
echo "LoopDispatch: $passed of $total runs passed (logs in $out/logs)"
exit "$status"
