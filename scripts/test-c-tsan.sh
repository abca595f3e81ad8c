#!/usr/bin/env bash
# C clients under ThreadSanitizer: a correctly synchronised program (Tests/CAPI/tsan_clean.c)
# built with -fsanitize=thread against `pkg-config loopdispatch` links, runs and reports no
# race; a racy one (tsan_racy.c) is reported, so the silence is the detector's verdict.
#
# Usage: scripts/test-c-tsan.sh [debug|release] [swift build arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
pcdir="$(scripts/c-api.sh "$@" | tail -n 1)"
export PKG_CONFIG_PATH="$pcdir"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for name in tsan_clean tsan_racy; do
  # shellcheck disable=SC2046 # pkg-config output is a word list.
  clang -fblocks -fsanitize=thread -g -Wall -Werror $(pkg-config --cflags loopdispatch) \
    "Tests/CAPI/$name.c" $(pkg-config --libs loopdispatch) -o "$out/$name"
done
for round in 1 2 3; do
  if ! TSAN_OPTIONS="halt_on_error=1 exitcode=66" timeout 120 "$out/tsan_clean" \
    > "$out/clean.txt" 2>&1; then
    echo "FAIL c-tsan: the synchronised program failed or was reported (round $round):" >&2
    cat "$out/clean.txt" >&2
    exit 1
  fi
done
echo "ok c-tsan: a synchronised C client runs clean under ThreadSanitizer (3 rounds)"
status=0
TSAN_OPTIONS="exitcode=66" timeout 120 "$out/tsan_racy" > "$out/racy.txt" 2>&1 || status=$?
if [ "$status" -ne 66 ] || ! grep -q "WARNING: ThreadSanitizer: data race" "$out/racy.txt"; then
  echo "FAIL c-tsan: the racy program was not reported (exit $status):" >&2
  cat "$out/racy.txt" >&2
  exit 1
fi
echo "ok c-tsan: the racy C client is reported"
