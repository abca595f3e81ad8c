#!/usr/bin/env bash
# The differential check against libdispatch: each program in Tests/CDiff is built twice,
# against the toolchain's libdispatch (its headers and libdispatch.so) and against
# LoopDispatch (`pkg-config loopdispatch`), run, and the two outputs must be identical. A
# change that drifts from libdispatch's observable behaviour fails here.
#
# Usage: scripts/test-c-diff.sh [debug|release] [swift build arguments...]
# CFLAGS (optional) is added to the LoopDispatch side's compile line: with
# `-fsanitize=address` and `--sanitize=address` the programs and the library run under
# AddressSanitizer (LeakSanitizer too), and must still print what libdispatch prints.
set -euo pipefail
cd "$(dirname "$0")/.."
pcdir="$(scripts/c-api.sh "$@" | tail -n 1)"
export PKG_CONFIG_PATH="$pcdir"
# The toolchain's own libdispatch: <toolchain>/usr/lib/swift/{dispatch,linux/libdispatch.so}.
toolchain="$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")/lib/swift"
if [ ! -f "$toolchain/linux/libdispatch.so" ] || [ ! -f "$toolchain/dispatch/dispatch.h" ]; then
  echo "test-c-diff: no libdispatch under $toolchain" >&2
  exit 1
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
status=0
for program in Tests/CDiff/diff_*.c; do
  name="$(basename "$program" .c)"
  # shellcheck disable=SC2046 # pkg-config output is a word list.
  clang -fblocks -Wall -Werror -g -I Tests/CDiff -I "$toolchain" "$program" \
    -L "$toolchain/linux" -Wl,-rpath,"$toolchain/linux" -ldispatch -lBlocksRuntime -lpthread \
    -o "$out/$name.libdispatch"
  # shellcheck disable=SC2046
  # shellcheck disable=SC2086 # CFLAGS is a word list (e.g. -fsanitize=address).
  clang -fblocks -Wall -Werror -g ${CFLAGS:-} -I Tests/CDiff $(pkg-config --cflags loopdispatch) "$program" \
    $(pkg-config --libs loopdispatch) -lpthread -o "$out/$name.loopdispatch"
  for side in libdispatch loopdispatch; do
    if ! timeout 120 "$out/$name.$side" > "$out/$name.$side.txt" 2> "$out/$name.$side.err"; then
      echo "FAIL c-diff $name: the $side build did not exit 0" >&2
      cat "$out/$name.$side.txt" "$out/$name.$side.err" >&2
      status=1
    fi
  done
  if ! diff -u --label libdispatch --label loopdispatch \
    "$out/$name.libdispatch.txt" "$out/$name.loopdispatch.txt" > "$out/$name.diff"; then
    echo "FAIL c-diff $name: the outputs differ (- libdispatch, + LoopDispatch):" >&2
    cat "$out/$name.diff" >&2
    status=1
  else
    echo "ok c-diff $name ($(wc -l < "$out/$name.loopdispatch.txt") lines alike)"
  fi
done
exit "$status"
