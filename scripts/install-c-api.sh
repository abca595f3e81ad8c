#!/usr/bin/env bash
# Installs the GCD C API under a prefix: the header tree, libloopdispatch.so and
# libloopdispatch-static.a (release builds) and pkg-config files (loopdispatch,
# loopdispatch-static) that point at them: the build's own files (scripts/c-api.sh) with
# the header and library directories moved to the prefix.
# Usage: scripts/install-c-api.sh PREFIX
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$(mkdir -p "${1:?usage: $0 PREFIX}" && cd "$1" && pwd)"
pcdir="$(scripts/c-api.sh release | tail -n 1)"
libdir="$(dirname "$pcdir")"
install -d "$prefix/include/dispatch" "$prefix/lib/pkgconfig"
install -m 644 Sources/CDispatch/include/dispatch/dispatch.h \
  Sources/CDispatch/include/dispatch/private.h "$prefix/include/dispatch/"
install -m 755 "$libdir/libloopdispatch.so" "$prefix/lib/"
install -m 644 "$libdir/libloopdispatch-static.a" "$prefix/lib/"
for name in loopdispatch loopdispatch-static; do
  sed -e "s|^includedir=.*|includedir=$prefix/include|" -e "s|^libdir=.*|libdir=$prefix/lib|" \
    "$pcdir/$name.pc" > "$prefix/lib/pkgconfig/$name.pc"
done
echo "installed the C API under $prefix (pkg-config: $prefix/lib/pkgconfig)"
