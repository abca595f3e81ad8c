#!/usr/bin/env bash
# Builds the GCD C API, then compiles and runs the C seed programs (Examples/C/*.c):
#
# 1. scripts/c-api.sh builds libloopdispatch.so (its arguments are passed through) and prints
#    the directory of loopdispatch.pc;
# 2. every Examples/C/<name>.c is compiled with -Wall -Werror, the flags pkg-config gives and
#    $CFLAGS, into <bin path>/c-seeds/<name>;
# 3. each program runs (with a generous timeout); it must exit 0 and print every line of
#    Examples/C/<name>.expected (each one a fixed string, found with grep -F).
#
# Prints "ok c-seed <name>" per program; exits non-zero if any program fails to build or run.
#
# Usage: scripts/test-c-seeds.sh [debug|release] [extra swift build arguments...]
#   e.g. CFLAGS=-fsanitize=address \
#        scripts/test-c-seeds.sh debug --scratch-path .build/asan --sanitize=address
# Environment: CC (default clang), CFLAGS (extra compile/link flags), C_SEED_TIMEOUT (seconds
# per program, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
cc="${CC:-clang}"
timeout_seconds="${C_SEED_TIMEOUT:-60}"
read -r -a extra_flags <<<"${CFLAGS:-}"

build_log="$(mktemp)"
trap 'rm -f "$build_log"' EXIT
pcdir="$(scripts/c-api.sh "$@" 2>"$build_log" | tail -n 1)" || pcdir=""
if [[ -z "$pcdir" || ! -f "$pcdir/loopdispatch.pc" ]]; then
  cat "$build_log" >&2
  echo "FAILED: scripts/c-api.sh $*" >&2
  exit 1
fi
read -r -a cflags <<<"$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags loopdispatch)"
read -r -a libs <<<"$(PKG_CONFIG_PATH="$pcdir" pkg-config --libs loopdispatch)"
outdir="$pcdir/../c-seeds"
mkdir -p "$outdir"

failures=0
fail() {
  echo "FAILED c-seed $1: $2"
  failures=$((failures + 1))
}

for source in Examples/C/*.c; do
  name="$(basename "$source" .c)"
  program="$outdir/$name"
  output="$outdir/$name.out"
  if ! "$cc" -Wall -Werror "${cflags[@]}" "${extra_flags[@]}" "$source" "${libs[@]}" \
    -o "$program" 2>"$output"; then
    cat "$output"
    fail "$name" "does not compile"
    continue
  fi
  status=0
  timeout "$timeout_seconds" "$program" >"$output" 2>&1 || status=$?
  missing=()
  if [[ -f "Examples/C/$name.expected" ]]; then
    while IFS= read -r line || [[ -n "$line" ]]; do
      [[ -z "$line" ]] && continue
      grep -qF -- "$line" "$output" || missing+=("$line")
    done <"Examples/C/$name.expected"
  else
    missing+=("(no Examples/C/$name.expected)")
  fi
  if [[ $status -ne 0 || ${#missing[@]} -ne 0 ]]; then
    sed 's/^/    /' "$output"
    for line in "${missing[@]}"; do echo "    missing line: $line"; done
    fail "$name" "exit status $status, ${#missing[@]} expected line(s) missing"
    continue
  fi
  echo "ok c-seed $name"
done

if [[ $failures -ne 0 ]]; then
  echo "c-seeds: $failures program(s) FAILED"
  exit 1
fi
echo "c-seeds: all $(ls Examples/C/*.c | wc -l) programs passed"
