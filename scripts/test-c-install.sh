#!/usr/bin/env bash
# Checks `make install`: installs the C API into a fresh prefix, then builds and runs a C++
# program against it from another directory, through each installed pkg-config file.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
make -s install PREFIX="$prefix" > /dev/null
cd /
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
for name in loopdispatch loopdispatch-static; do
  # shellcheck disable=SC2046
  clang++ -fblocks $(pkg-config --cflags "$name") "$root/Tests/CAPI/cxx_smoke.cpp" \
    $(pkg-config --libs "$name") -o "$prefix/smoke-$name"
  timeout 60 "$prefix/smoke-$name" > /dev/null
  echo "ok c-api installed ($name)"
done
