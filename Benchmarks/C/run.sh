#!/usr/bin/env bash
# The GCD C API benchmarks (bench.c) against LoopDispatch's C API and against Apple's
# libdispatch from the toolchain, as one Markdown table.
#
# 1. Builds libloopdispatch.so (scripts/c-api.sh release) and bench.c twice: against our
#    header and library (pkg-config loopdispatch), and against libdispatch's header and
#    library (-I/opt/swift/usr/lib/swift, -ldispatch).
# 2. Runs the two binaries alternately RUNS times (default 5), each row in its own process,
#    row by row ours then libdispatch (the side that goes first alternates between runs).
# 3. Optionally (SWIFT_ROW=1, the default) runs the Swift API's `Queue.sync` figure from the
#    Benchmarks package (row queue/sync, LoopDispatch side only, --repeat RUNS), so that the
#    C entry overhead of dispatch_sync_f can be stated against it.
# 4. Prints per row: the median wall ns/op of each side, the ratio ours/libdispatch, the
#    median CPU ns/op of each side (getrusage RUSAGE_SELF user+sys over the timed section),
#    the median heap allocations per op of each side (bench.c interposes malloc and friends
#    and counts every call in the process during the timed section), and the range (min–max)
#    of the wall figures across the runs; then the paired ratio: ours over libdispatch within
#    each run (the two processes ran back to back, so a neighbour's or the host's slow minute
#    weighs on both), its median and its range across the runs. (after_dense: the wall figures
#    are the p99 timer lateness in ns, not ns/op.)
#
#
# MODE (see Benchmarks/scripts/bench-mode.sh):
#   quiet       (default) as above.
#   neighbours  one busy process per CPU (`nproc`; NEIGHBOURS overrides the count), at the same
#               priority, spinning from before the first timed row to after the Swift row, killed
#               at exit (also on Ctrl-C or failure). Builds happen before they start.
#   quota       every measured process (each row's, and the Swift row's) runs in a scratch
#               cgroup limited to 1 CPU (QUOTA_CPUS overrides): cgroup v2 cpu.max, else cgroup v1
#               cpu.cfs_quota_us / cpu.cfs_period_us; removed at exit. LoopDispatch sizes its pool
#               from the quota, libdispatch does not. Prints "skipped: ..." and exits 0 where no
#               writable cpu controller exists. Also prints, per row, the periods each side was
#               throttled (the cgroup's cpu.stat nr_throttled over the row's process).
# The table's heading names the mode (and the neighbour count, or the cgroup and its quota).
#
# Environment: RUNS (default 5), CC (default /opt/swift/usr/bin/clang), SWIFT (default swift),
# SWIFT_ROW (1: also measure Swift's Queue.sync; 0: skip), CFLAGS_EXTRA, MODE, NEIGHBOURS,
# QUOTA_CPUS.
# Usage: Benchmarks/C/run.sh [row ...]   (rows as bench.c names them; none: all)
#   e.g. SWIFT_ROW=0 RUNS=3 MODE=neighbours Benchmarks/C/run.sh group sync_f
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../scripts/bench-mode.sh
source "$root/Benchmarks/scripts/bench-mode.sh"
# Exits 0 with "skipped: ..." for a quota the machine cannot set; sets the EXIT trap that kills
# the neighbours and removes the cgroup.
bench_mode_setup "$(nproc)"
runs="${RUNS:-5}"
cc="${CC:-/opt/swift/usr/bin/clang}"
swift="${SWIFT:-swift}"
swift_row="${SWIFT_ROW:-1}"
toolchain_swift_dir="${TOOLCHAIN_SWIFT_DIR:-/opt/swift/usr/lib/swift}"
out="$here/.build"
mkdir -p "$out"

read -r -a cflags_extra <<<"${CFLAGS_EXTRA:-}"
cflags=(-O2 -Wall -Wextra -Werror ${cflags_extra[@]+"${cflags_extra[@]}"})

# ---- 1. Build -------------------------------------------------------------------------------
pcdir="$(SWIFT="$swift" "$root/scripts/c-api.sh" release 2>"$out/c-api.log" | tail -n 1)" || {
  cat "$out/c-api.log" >&2
  echo "run.sh: scripts/c-api.sh failed" >&2
  exit 1
}
read -r -a ours_flags <<<"$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs loopdispatch)"
"$cc" "${cflags[@]}" -o "$out/bench-loopdispatch" "$here/bench.c" "${ours_flags[@]}" -lpthread
"$cc" "${cflags[@]}" -fblocks -I"$toolchain_swift_dir" -o "$out/bench-libdispatch" "$here/bench.c" \
  -L"$toolchain_swift_dir/linux" -ldispatch -lBlocksRuntime \
  -Wl,-rpath,"$toolchain_swift_dir/linux" -lpthread
if [[ "$swift_row" == 1 ]]; then
  # Built here, before any neighbour starts, so that the build neither slows nor is slowed;
  # with make bench's flags (warnings as errors), so that the two do not rebuild each other's
  # products.
  (cd "$root/Benchmarks" && "$swift" build -c release -Xswiftc -warnings-as-errors \
    --product Benchmarks >"$out/benchmarks-build.log" 2>&1) || {
    cat "$out/benchmarks-build.log" >&2
    echo "run.sh: building the Benchmarks package failed" >&2
    exit 1
  }
fi

# ---- 2. Run, alternating ------------------------------------------------------------------------
# Every row runs in a fresh process (no worker threads left over from an earlier row), the
# two sides alternating row by row; which side goes first alternates between runs.
# side, run, then bench's line as it is: row, wall ns/op, CPU ns/op, allocations/op, ...,
# description (always the last field).
results="$out/results.tsv"
: >"$results"
throttle="$out/throttle.tsv"  # quota: side, run, row, periods throttled, ns throttled
: >"$throttle"
if (($# > 0)); then rows=("$@"); else mapfile -t rows < <("$out/bench-loopdispatch" --list); fi
# A row the other build lacks (the fd row needs the source API in the header) runs on one side.
mapfile -t rival_rows < <("$out/bench-libdispatch" --list)
run_side() {  # side run row
  local side="$1" run="$2" row="$3"
  if [[ "$side" == libdispatch ]] && ! printf '%s\n' "${rival_rows[@]}" | grep -qx "$row"; then
    return
  fi
  local before after
  before="$(bench_mode_throttled)"
  # In quota mode the prefix puts the process in the cgroup before it execs the bench.
  ${bench_mode_prefix[@]+"${bench_mode_prefix[@]}"} "$out/bench-$side" "$row" |
    awk -v side="$side" -v run="$run" '{ print side "\t" run "\t" $0 }' >>"$results"
  if [[ "$bench_mode" == quota ]]; then
    after="$(bench_mode_throttled)"
    printf '%s\t%s\t%s\t%s\t%s\n' "$side" "$run" "$row" \
      "$((${after% *} - ${before% *}))" "$((${after#* } - ${before#* }))" >>"$throttle"
  fi
}
heading="$(bench_mode_heading)"
echo "$heading" >&2
bench_mode_start
for ((i = 1; i <= runs; i++)); do
  echo "run $i/$runs" >&2
  for row in "${rows[@]}"; do
    if ((i % 2)); then
      run_side loopdispatch "$i" "$row"
      run_side libdispatch "$i" "$row"
    else
      run_side libdispatch "$i" "$row"
      run_side loopdispatch "$i" "$row"
    fi
  done
done

# ---- 3. The Swift API's Queue.sync ------------------------------------------------------------
swift_sync=""
if [[ "$swift_row" == 1 ]]; then
  echo "Swift Queue.sync (Benchmarks row queue/sync, --side ours --repeat $runs)" >&2
  # The filter "uncontended" selects exactly the queue/sync row; its LoopDispatch column is
  # the median of the runs.
  swift_sync="$(cd "$root/Benchmarks" && ${bench_mode_prefix[@]+"${bench_mode_prefix[@]}"} \
    .build/release/Benchmarks uncontended --side ours --repeat "$runs" 2>/dev/null |
    awk -F'|' '$2 ~ /uncontended sync/ { gsub(/ /, "", $4); print $4 }')"
fi
bench_mode_stop  # the timed part is over

# ---- 4. Table ------------------------------------------------------------------------------------
echo "C API benchmarks, $heading"
echo

awk -F'\t' -v runs="$runs" -v swift_sync="$swift_sync" '
  function sort(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  }
  function median(a, n) { sort(a, n); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function stat(side, row, column, what,   a, n, i) {
    n = count[side, row]
    for (i = 1; i <= n; i++) a[i] = value[side, row, column, i]
    if (n == 0) return ""
    if (what == "median") return median(a, n)
    sort(a, n)
    return what == "min" ? a[1] : a[n]
  }
  function fmt(x) {
    if (x == "") return "n/a"
    return x >= 100 ? sprintf("%.0f", x) : sprintf("%.1f", x)
  }
  function fmt_allocs(x) {
    if (x == "") return "n/a"
    return x >= 10 ? sprintf("%.1f", x) : sprintf("%.3f", x)
  }
  {
    side = $1; row = $3
    n = ++count[side, row]
    value[side, row, "wall", n] = $4
    value[side, row, "cpu", n] = $5
    value[side, row, "allocs", n] = $6
    wall[side, row, $2] = $4
    if (!(row in seen)) { seen[row] = 1; order[++rows] = row; name[row] = $NF }
  }
  END {
    print "| Row | LoopDispatch ns/op | libdispatch ns/op | Ratio ours/libdispatch | CPU ns/op (ours) | CPU ns/op (libdispatch) | allocs/op (ours) | allocs/op (libdispatch) | Range ours (min–max) | Range libdispatch (min–max) | Paired ratio, median (min–max) |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for (r = 1; r <= rows; r++) {
      row = order[r]
      ours = stat("loopdispatch", row, "wall", "median")
      theirs = stat("libdispatch", row, "wall", "median")
      ratio = (ours != "" && theirs != "" && theirs > 0) ? sprintf("%.2fx", ours / theirs) : "n/a"
      # `call` runs the same instructions on both sides (no dispatch at all): its ratio is the
      # noise between the two binaries of the harness, shown as such and not a result.
      if (row == "call" && ratio != "n/a") ratio = "control " ratio
      med[row, "ours"] = ours; med[row, "theirs"] = theirs
      # The paired ratio: per run, ours over theirs, over the runs where both sides ran.
      np = 0; delete pr
      for (i = 1; i <= runs; i++)
        if ((("loopdispatch", row, i) in wall) && (("libdispatch", row, i) in wall) && wall["libdispatch", row, i] > 0)
          pr[++np] = wall["loopdispatch", row, i] / wall["libdispatch", row, i]
      paired = "n/a"
      if (np > 0) { pm = median(pr, np); paired = sprintf("%.2fx (%.2f–%.2f)", pm, pr[1], pr[np]) }
      printf "| `%s`: %s | %s | %s | %s | %s | %s | %s | %s | %s–%s | %s–%s | %s |\n", row, name[row],
        fmt(ours), fmt(theirs), ratio,
        fmt(stat("loopdispatch", row, "cpu", "median")), fmt(stat("libdispatch", row, "cpu", "median")),
        fmt_allocs(stat("loopdispatch", row, "allocs", "median")), fmt_allocs(stat("libdispatch", row, "allocs", "median")),
        fmt(stat("loopdispatch", row, "wall", "min")), fmt(stat("loopdispatch", row, "wall", "max")),
        fmt(stat("libdispatch", row, "wall", "min")), fmt(stat("libdispatch", row, "wall", "max")),
        paired
    }
    print ""
    printf "Medians of %d runs per side; every row in a fresh process, the two binaries alternating row by row (the side that goes first alternates between runs). ", runs
    print "Each row runs once untimed at a tenth of its size, then once timed. CPU ns/op = getrusage(RUSAGE_SELF) user + system of the whole process over the timed section, per op. allocs/op = heap allocations (malloc, calloc, realloc, posix_memalign, aligned_alloc, ...; interposed in the executable, so the calls of the libraries count too) of the whole process over the timed section, per op. Ratio below 1: LoopDispatch is faster. The paired ratio divides the two sides run by run (each run'"'"'s two processes ran back to back) and takes the median of those quotients: a slow stretch of the machine weighs on both sides of a pair, so it separates a change from a lucky set better than the ratio of the two medians."
    if ("call" in seen)
      print "`call` is the control row: both binaries run the same loop of indirect calls and no dispatch, so its ratio is the noise between two processes in this mode, not a result; a ratio on another row within that distance of 1.00x is a tie."
    if ("after_dense" in seen)
      print "`after_dense`: the wall columns (and their ratio and ranges) are the p99 lateness of the timers in ns, not ns/op; CPU and allocs are per timer."
    if ((("sync_f", "ours") in med) && (("sync_block", "ours") in med)) {
      print ""
      print "C entry overhead (medians, ns/call):"
      printf "- block form over `_f` form (`sync_block` − `sync_f`): LoopDispatch %+.1f, libdispatch %+.1f\n",
        med["sync_block", "ours"] - med["sync_f", "ours"], med["sync_block", "theirs"] - med["sync_f", "theirs"]
      if (("call", "ours") in med)
        printf "- `dispatch_sync_f` over a plain indirect call (`sync_f` − `call`): LoopDispatch %.1f, libdispatch %.1f\n",
          med["sync_f", "ours"] - med["call", "ours"], med["sync_f", "theirs"] - med["call", "theirs"]
      if (swift_sync != "")
        printf "- LoopDispatch C `dispatch_sync_f` over the Swift API `Queue.sync` (Benchmarks row queue/sync, median %s ns): %+.1f ns/call (requirement: about 20 or less)\n",
          swift_sync, med["sync_f", "ours"] - swift_sync
    }
  }
' "$results"

# ---- 5. Quota: how often each side was throttled --------------------------------------------
if [[ "$bench_mode" == quota ]]; then
  echo
  awk -F'\t' -v runs="$runs" '
    function median(list,   a, n, i, j, t) {
      n = split(list, a, " ")
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    {
      periods[$1, $3] = periods[$1, $3] " " $4; ms[$1, $3] = ms[$1, $3] " " $5 / 1e6
      if (!($3 in seen)) { seen[$3] = 1; order[++rows] = $3 }
    }
    END {
      print "| Row | throttled periods (ours) | throttled periods (libdispatch) | throttled ms (ours) | throttled ms (libdispatch) |"
      print "|---|---:|---:|---:|---:|"
      for (r = 1; r <= rows; r++) {
        row = order[r]
        o = (("loopdispatch", row) in periods); t = (("libdispatch", row) in periods)
        printf "| `%s` | %s | %s | %s | %s |\n", row,
          o ? median(periods["loopdispatch", row]) : "n/a", t ? median(periods["libdispatch", row]) : "n/a",
          o ? sprintf("%.1f", median(ms["loopdispatch", row])) : "n/a", t ? sprintf("%.1f", median(ms["libdispatch", row])) : "n/a"
      }
      print ""
      printf "Medians of %d runs: the scratch cgroup'"'"'s cpu.stat (nr_throttled, throttled time) over each row'"'"'s process, warm-up included. A throttled period: the process used its quota before the 100 ms period ended and none of its threads ran until the next one.\n", runs
    }' "$throttle"
fi
