#!/usr/bin/env bash
# wrk against three HTTP servers (four with NIO_PATH) with the same routes and answers, on
# 127.0.0.1 only:
#   LoopDispatch  `Examples serve` (root package), built as `make run` builds it (release,
#                 warnings as errors), so the binary measured is the one a user runs;
#   Dispatch      the same server written with Apple's Dispatch (`DispatchServe`, this package);
#   evhttp        the routes on libevent's own HTTP server in C (`EvhttpServe`, this package):
#                 one event_base, one thread, /hash computed inline on the loop thread;
#   SwiftNIO      only when NIO_PATH is set: the routes on SwiftNIO (`NIOServe`, its own package
#                 in Benchmarks/NIOServe): System.coreCount event loops, NIO's HTTP/1.1
#                 pipeline, /hash computed inline on the connection's loop. NIO_PATH is a
#                 swift-nio checkout whose siblings are swift-atomics, swift-collections and
#                 swift-system (no network: swift-nio uses them when SWIFTCI_USE_LOCAL_DEPS=1,
#                 which the build sets).
#
# For each run (the order of the servers rotates from run to run, so each goes first, second,
# and so on, in turn), each server is started on a free port (--port 0, the port parsed from its
# "listening on" line), probed, loaded with
#   wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency http://127.0.0.1:PORT/ROUTE
# for every route, then stopped with SIGTERM; it must exit 0 within 10 s. Prints a Markdown table
# per run and one of medians: requests/s, p99 latency, and the ratios LoopDispatch/Dispatch,
# LoopDispatch/evhttp and, with NIO_PATH, LoopDispatch/SwiftNIO (requests/s; above 1 means
# LoopDispatch served more).
#
# MODE (see Benchmarks/scripts/bench-mode.sh):
#   quiet       (default) as above.
#   neighbours  one busy process (NEIGHBOURS overrides the count) at the same priority beside the
#               servers and wrk, from before the first run's first server starts until after the
#               last one stops (the builds happen before); killed at exit, also on Ctrl-C.
#   quota       each server runs in a scratch cgroup limited to 1 CPU (QUOTA_CPUS overrides); wrk
#               runs outside it. `Examples serve` sizes its pool from the quota, DispatchServe
#               does not, evhttp has one thread anyway; SwiftNIO's System.coreCount reads the
#               quota of /sys/fs/cgroup only (the cgroup root), not the scratch cgroup's, so it
#               does not either (NIO_ARGS="--threads 1" sizes it by hand). Also prints the
#               periods each server was throttled. Prints "skipped: ..." and exits 0 where no
#               writable cpu controller exists.
# The mode is printed in the heading above the tables.
#
# Environment: RUNS (3), DURATION (10s), CONNECTIONS (64), THREADS (2), MODE, NEIGHBOURS,
#   QUOTA_CPUS,
#   ROUTES ("/ /hash?bytes=1000"), EXAMPLES_ROOT (the package that builds `Examples`; default
#   the repository root), DISPATCH_ARGS (extra DispatchServe flags, e.g. "--idle-timer after"),
#   EVHTTP_ARGS (extra EvhttpServe flags), NIO_PATH (see above; unset: no SwiftNIO), NIO_ARGS
#   (extra NIOServe flags, e.g. "--threads 1"), SKIP_BUILD=1 (use the existing release binaries).
#   Raw wrk output and server logs are kept in a temporary directory whose path is printed at
#   the end.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=bench-mode.sh
source "$here/bench-mode.sh"
# Exits 0 with "skipped: ..." for a quota the machine cannot set; sets an EXIT trap (cleanup,
# below, replaces it and calls bench_mode_cleanup too).
bench_mode_setup 1
benchmarks="$(cd "$here/.." && pwd)"
root="$(cd "$benchmarks/.." && pwd)"
examples_root="${EXAMPLES_ROOT:-$root}"
SWIFT="${SWIFT:-swift}"
RUNS="${RUNS:-3}"
DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-2}"
read -r -a routes <<<"${ROUTES:-/ /hash?bytes=1000}"
read -r -a dispatch_args <<<"${DISPATCH_ARGS:-}"
read -r -a evhttp_args <<<"${EVHTTP_ARGS:-}"
read -r -a nio_args <<<"${NIO_ARGS:-}"
servers=(LoopDispatch Dispatch evhttp)
nio_path=""
if [[ -n "${NIO_PATH:-}" ]]; then
  nio_path="$(cd "$NIO_PATH" && pwd)"  # NIOServe's manifest takes it relative to its directory
  for sibling in swift-atomics swift-collections swift-system; do
    if [[ ! -f "$nio_path/../$sibling/Package.swift" ]]; then
      echo "NIO_PATH=$NIO_PATH: no $sibling checkout beside it ($nio_path/../$sibling)" >&2
      exit 1
    fi
  done
  servers+=(SwiftNIO)
fi

if ! command -v wrk >/dev/null 2>&1; then
  echo "wrk not found; install it with: apt-get install -y wrk" >&2
  exit 1
fi

# The flags of the Makefile's `run` target: the same flags build the same binary (other flags
# would make `make run` and this script rebuild each other's products).
werror=(-Xswiftc -warnings-as-errors)
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  (cd "$examples_root" && "$SWIFT" build -c release "${werror[@]}" --product Examples)
  (cd "$benchmarks" && "$SWIFT" build -c release "${werror[@]}" --product DispatchServe)
  (cd "$benchmarks" && "$SWIFT" build -c release "${werror[@]}" --product EvhttpServe)
fi
# NIOServe: warnings are errors in its own target only (its manifest), not in swift-nio's.
nio_swift() {
  (cd "$benchmarks/NIOServe" && NIO_PATH="$nio_path" SWIFTCI_USE_LOCAL_DEPS=1 "$SWIFT" "$@")
}
if [[ -n "$nio_path" ]]; then
  [[ "${SKIP_BUILD:-0}" == 1 ]] || nio_swift build -c release --product NIOServe
  nio_bin="$(nio_swift build -c release --show-bin-path)/NIOServe"
fi
loopdispatch_bin="$(cd "$examples_root" && "$SWIFT" build -c release "${werror[@]}" --show-bin-path)/Examples"
benchmarks_bin="$(cd "$benchmarks" && "$SWIFT" build -c release "${werror[@]}" --show-bin-path)"
dispatch_bin="$benchmarks_bin/DispatchServe"
evhttp_bin="$benchmarks_bin/EvhttpServe"

work="$(mktemp -d "${TMPDIR:-/tmp}/wrk-servers.XXXXXX")"
results="$work/results.tsv"  # run, server, route, requests/s, p99 in ms
: >"$results"
throttle="$work/throttle.tsv"  # quota: run, server, periods throttled, ns throttled
: >"$throttle"
server_pid=""

cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  bench_mode_cleanup  # the neighbours; the quota's cgroup
}
trap cleanup EXIT

# start_server NAME LOG: starts the server, sets server_pid and server_port. In quota mode the
# prefix (a sh that joins the cgroup, then execs the server) keeps $! the server's pid.
start_server() {
  local name="$1" log="$2"
  local -a server
  case "$name" in
    LoopDispatch) server=("$loopdispatch_bin" serve --port 0) ;;
    Dispatch) server=("$dispatch_bin" --port 0 ${dispatch_args[@]+"${dispatch_args[@]}"}) ;;
    evhttp) server=("$evhttp_bin" --port 0 ${evhttp_args[@]+"${evhttp_args[@]}"}) ;;
    SwiftNIO) server=("$nio_bin" --port 0 ${nio_args[@]+"${nio_args[@]}"}) ;;
  esac
  # Made here, not only by the server's redirection: the loop below may read it before the
  # forked child has opened it (seen with a busy neighbour: sed "can't read", and set -e exit).
  : >"$log"
  ${bench_mode_prefix[@]+"${bench_mode_prefix[@]}"} "${server[@]}" >"$log" 2>&1 &
  server_pid=$!
  server_port=""
  for _ in $(seq 100); do
    server_port="$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$log")"
    [[ -n "$server_port" ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$server_port" ]]; then
    echo "$name did not print its listening line:" >&2
    cat "$log" >&2
    exit 1
  fi
  # One request on a fresh connection: the server must answer before it is measured.
  # shellcheck disable=SC2016  # expanded by the inner bash
  if ! timeout 5 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1"
    printf "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" >&3
    read -r status <&3
    [[ "$status" == "HTTP/1.1 200 OK"* ]]' _ "$server_port" 2>/dev/null; then
    echo "$name (pid $server_pid) printed port $server_port but does not answer GET /" >&2
    exit 1
  fi
}

# stop_server NAME: SIGTERM, then the server must exit 0 within 10 s.
stop_server() {
  local name="$1" status=0
  kill -TERM "$server_pid"
  for _ in $(seq 100); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$server_pid" 2>/dev/null; then
    echo "$name (pid $server_pid) still running 10 s after SIGTERM; killing it" >&2
    kill -KILL "$server_pid"
    exit 1
  fi
  wait "$server_pid" || status=$?
  server_pid=""
  if [[ "$status" != 0 ]]; then
    echo "$name exited with status $status after SIGTERM (expected 0)" >&2
    exit 1
  fi
}

# A wrk latency figure ("850.00us", "3.21ms", "1.02s", "2.00m") in milliseconds.
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
    printf "%.3f", n
  }'
}

measure() {
  local run="$1" name="$2"
  local log="$work/$name.run$run.server.log"
  local throttled_before
  throttled_before="$(bench_mode_throttled)"
  start_server "$name" "$log"
  local route
  for route in "${routes[@]}"; do
    local out
    out="$work/$name.run$run.$(echo "$route" | tr -c 'A-Za-z0-9=\n' '_').wrk.txt"
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
      "http://127.0.0.1:$server_port$route" >"$out"
    local rps p99
    rps="$(awk '/^Requests\/sec:/ { print $2 }' "$out")"
    p99="$(awk '$1 == "99%" { print $2 }' "$out")"
    if [[ -z "$rps" || -z "$p99" ]]; then
      echo "could not parse wrk output for $name $route:" >&2
      cat "$out" >&2
      exit 1
    fi
    if grep -qE 'Non-2xx|Socket errors' "$out"; then
      echo "note: $name $route: $(grep -E 'Non-2xx|Socket errors' "$out" | tr -s ' ')" >&2
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$run" "$name" "$route" "$rps" "$(to_ms "$p99")" >>"$results"
    echo "run $run: $name $route: $rps requests/s, p99 $p99" >&2
  done
  stop_server "$name"
  if [[ "$bench_mode" == quota ]]; then
    local throttled_after
    throttled_after="$(bench_mode_throttled)"
    printf '%s\t%s\t%s\t%s\n' "$run" "$name" "$((${throttled_after% *} - ${throttled_before% *}))" \
      "$((${throttled_after#* } - ${throttled_before#* }))" >>"$throttle"
  fi
}

heading="$(bench_mode_heading)"
echo "$heading" >&2
bench_mode_start
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq "$RUNS"); do
  # Run 1: LoopDispatch Dispatch evhttp; run 2: Dispatch evhttp LoopDispatch; run 3: evhttp
  # LoopDispatch Dispatch; and again (with SwiftNIO last in run 1, the rotation has four steps).
  first=$(((run - 1) % ${#servers[@]}))
  order=("${servers[@]:first}" "${servers[@]:0:first}")
  echo "run $run of $RUNS: ${order[*]}" >&2
  for name in "${order[@]}"; do measure "$run" "$name"; done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
bench_mode_stop

# table FILTER: a Markdown table from the results; FILTER picks rows (a run, or "median"). The
# SwiftNIO rows and ratio column only when it ran.
table() {
  awk -F'\t' -v want="$1" -v routes="${routes[*]}" -v nio="${nio_path:+1}" '
    function median(list,   a, n, i, t) {
      n = split(list, a, " ")
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    want == "median" || $1 == want {
      rps[$2, $3] = rps[$2, $3] " " $4; p99[$2, $3] = p99[$2, $3] " " $5
    }
    END {
      print "| server | route | requests/s | p99 latency | LoopDispatch/Dispatch (req/s) | LoopDispatch/evhttp (req/s) |" (nio ? " LoopDispatch/SwiftNIO (req/s) |" : "")
      print "|---|---|---:|---:|---:|---:|" (nio ? "---:|" : "")
      blank = nio ? " | | |" : " | |"
      n = split(routes, r, " ")
      for (i = 1; i <= n; i++) {
        l = median(rps["LoopDispatch", r[i]]); d = median(rps["Dispatch", r[i]])
        e = median(rps["evhttp", r[i]])
        printf "| LoopDispatch | `%s` | %.0f | %.2f ms | %.2fx | %.2fx |", r[i], l, median(p99["LoopDispatch", r[i]]), l / d, l / e
        if (nio) { s = median(rps["SwiftNIO", r[i]]); printf " %.2fx |", l / s }
        printf "\n"
        printf "| Dispatch | `%s` | %.0f | %.2f ms |%s\n", r[i], d, median(p99["Dispatch", r[i]]), blank
        printf "| evhttp | `%s` | %.0f | %.2f ms |%s\n", r[i], e, median(p99["evhttp", r[i]]), blank
        if (nio) printf "| SwiftNIO | `%s` | %.0f | %.2f ms |%s\n", r[i], s, median(p99["SwiftNIO", r[i]]), blank
      }
    }' "$results"
}

echo
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, 127.0.0.1, $(nproc) cores; $heading;" \
  "load average before: $load_before, after: $load_after" \
  "(other work on the machine skews the figures)"
for run in $(seq "$RUNS"); do
  echo
  echo "Run $run:"
  echo
  table "$run"
done
echo
echo "Medians of $RUNS runs (ratios = median LoopDispatch req/s / median req/s of the other server):"
echo
table median
if [[ "$bench_mode" == quota ]]; then
  echo
  echo "Throttled periods of 100 ms per server and run (the scratch cgroup's cpu.stat, from start to stop):"
  echo
  awk -F'\t' '
    BEGIN { print "| run | server | throttled periods | throttled ms |"; print "|---|---|---:|---:|" }
    { printf "| %s | %s | %d | %.0f |\n", $1, $2, $3, $4 / 1e6 }' "$throttle"
fi
echo
echo "raw wrk output and server logs: $work"
