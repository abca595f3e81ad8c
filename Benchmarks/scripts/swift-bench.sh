#!/usr/bin/env bash
# `make bench`: the Benchmarks package (LoopDispatch against raw libevent and Apple's Dispatch)
# in release mode, warnings as errors, as one table of ratios; arguments go to the Benchmarks
# program (filters, --repeat N, --side, --list: see Benchmarks/Sources/Benchmarks/Harness/
# Options.swift).
#
# MODE (see Benchmarks/scripts/bench-mode.sh):
#   quiet       (default) the program alone, as `swift run` ran it before.
#   neighbours  one busy process per CPU (`nproc`; NEIGHBOURS overrides the count), at the same
#               priority, from just before the program starts until it exits; the build happens
#               before they start.
#   quota       the program (and the child processes some rows start) runs in a scratch cgroup
#               limited to 1 CPU (QUOTA_CPUS overrides). Both sides share the process, so both
#               see the quota: LoopDispatch sizes its pool from it, Dispatch does not. Prints
#               "skipped: ..." and exits 0 where no writable cpu controller exists.
# The mode is printed before the table; in quota mode the periods the program was throttled
# (the cgroup's cpu.stat) after it.
#
# Environment: SWIFT (default swift), MODE, NEIGHBOURS, QUOTA_CPUS; BENCH_REPEAT and
# BENCH_WARMUP are read by the program.
# Usage: Benchmarks/scripts/swift-bench.sh [filter ...] [--repeat N] ...
#   e.g. MODE=neighbours make bench ARGS=queue
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
benchmarks="$(cd "$here/.." && pwd)"
swift="${SWIFT:-swift}"
# shellcheck source-path=SCRIPTDIR source=bench-mode.sh
source "$here/bench-mode.sh"
# Exits 0 with "skipped: ..." for a quota the machine cannot set; sets the EXIT trap that kills
# the neighbours and removes the cgroup.
bench_mode_setup "$(nproc)"

# The flags `swift run -c release -Xswiftc -warnings-as-errors Benchmarks` used, so the same
# binary as before.
flags=(-c release -Xswiftc -warnings-as-errors)
(cd "$benchmarks" && "$swift" build "${flags[@]}" --product Benchmarks)
bin="$(cd "$benchmarks" && "$swift" build "${flags[@]}" --show-bin-path)/Benchmarks"

echo "Benchmarks package, $(bench_mode_heading)"
echo
bench_mode_start
status=0
${bench_mode_prefix[@]+"${bench_mode_prefix[@]}"} "$bin" "$@" || status=$?
bench_mode_stop
if [[ "$bench_mode" == quota ]]; then
  read -r periods ns <<<"$(bench_mode_throttled)"
  echo
  echo "quota: the program was throttled in $periods periods of 100 ms, $((ns / 1000000)) ms in" \
    "all (the scratch cgroup's cpu.stat; both sides together)"
fi
exit "$status"
