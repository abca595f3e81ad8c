#!/usr/bin/env bash
# Installs the GCD C API under a prefix: the header tree, libloopdispatch.so and
# libloopdispatch-static.a (release builds) and pkg-config files (loopdispatch,
# loopdispatch-static) that point at them.
# Usage: scripts/install-c-api.sh PREFIX
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$(mkdir -p "${1:?usage: $0 PREFIX}" && cd "$1" && pwd)"
pcdir="$(scripts/c-api.sh release | tail -n 1)"
libdir="$(dirname "$pcdir")"
swiftlibdir="$(sed -n 's/^swiftlibdir=//p' "$pcdir/loopdispatch.pc")"
install -d "$prefix/include/dispatch" "$prefix/lib/pkgconfig"
install -m 644 Sources/CDispatch/include/dispatch/dispatch.h "$prefix/include/dispatch/"
install -m 755 "$libdir/libloopdispatch.so" "$prefix/lib/"
install -m 644 "$libdir/libloopdispatch-static.a" "$prefix/lib/"
cat > "$prefix/lib/pkgconfig/loopdispatch.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib
swiftlibdir=$swiftlibdir

Name: loopdispatch
Description: Grand Central Dispatch's C API on LoopDispatch (a libevent main loop)
Version: 1.0
Cflags: -I\${includedir} -fblocks
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lloopdispatch -L\${swiftlibdir} -Wl,-rpath,\${swiftlibdir} -lBlocksRuntime
PC
sed -e "s|^includedir=.*|includedir=$prefix/include|" -e "s|^libdir=.*|libdir=$prefix/lib|" \
  "$pcdir/loopdispatch-static.pc" > "$prefix/lib/pkgconfig/loopdispatch-static.pc"
echo "installed the C API under $prefix (pkg-config: $prefix/lib/pkgconfig)"
