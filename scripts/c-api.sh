#!/usr/bin/env bash
# Builds the GCD C API (libloopdispatch.so and libloopdispatch-static.a) and writes a
# pkg-config file for it, with absolute paths, so that from any directory
#   PKG_CONFIG_PATH=<the directory printed last> pkg-config --cflags --libs loopdispatch
# gives a C program the header path, -fblocks, the library, BlocksRuntime and the runtime
# path of the Swift runtime libraries.
#
# Usage: scripts/c-api.sh [debug|release] [extra swift build arguments...]
# (e.g. `scripts/c-api.sh debug --scratch-path .build/asan --sanitize=address`).
set -euo pipefail
cd "$(dirname "$0")/.."
configuration="${1:-release}"
shift || true
swift="${SWIFT:-swift}"

"$swift" build -c "$configuration" --product loopdispatch "$@" >&2
"$swift" build -c "$configuration" --product loopdispatch-static "$@" >&2
libdir="$("$swift" build -c "$configuration" --show-bin-path "$@")"
# The Swift runtime the library was linked against (its .so files and libBlocksRuntime).
swiftlibdir="$("$swift" -print-target-info | sed -n '/runtimeLibraryPaths/,/]/p' \
  | grep -o '"/[^"]*"' | head -n 1 | tr -d '"')"
includedir="$(pwd)/Sources/CDispatch/include"
pcdir="$libdir/pkgconfig"
mkdir -p "$pcdir"
cat > "$pcdir/loopdispatch.pc" <<PC
includedir=$includedir
libdir=$libdir
swiftlibdir=$swiftlibdir

Name: loopdispatch
Description: Grand Central Dispatch's C API on LoopDispatch (a libevent main loop)
Version: 1.0
Cflags: -I\${includedir} -fblocks
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lloopdispatch -L\${swiftlibdir} -Wl,-rpath,\${swiftlibdir} -lBlocksRuntime
PC
# The static form: the archive, then what it needs from the Swift runtime (swiftrt.o
# registers the archive's metadata sections) and from the system.
cat > "$pcdir/loopdispatch-static.pc" <<PC
includedir=$includedir
libdir=$libdir
swiftlibdir=$swiftlibdir

Name: loopdispatch-static
Description: Grand Central Dispatch's C API on LoopDispatch, linked statically
Version: 1.0
Cflags: -I\${includedir} -fblocks
Libs: \${libdir}/libloopdispatch-static.a \${swiftlibdir}/$(uname -m)/swiftrt.o -L\${swiftlibdir} -Wl,-rpath,\${swiftlibdir} -lswiftCore -lswift_Concurrency -lswiftSynchronization -lswiftGlibc -lswift_StringProcessing -lswift_RegexParser -lswiftSwiftOnoneSupport -levent_core -levent_pthreads -lBlocksRuntime -lstdc++ -lm
PC
echo "$pcdir"
