# shellcheck shell=bash
# shellcheck disable=SC2034  # bench_mode_prefix is read by the scripts that source this file
# Benchmark modes, shared by Benchmarks/C/run.sh, Benchmarks/scripts/swift-bench.sh (`make bench`)
# and Benchmarks/scripts/wrk-servers.sh (`make bench-http`). Source it; it defines functions and
# variables prefixed bench_mode_ / bench__ and runs nothing by itself.
#
# MODE selects what the measured processes run beside:
#   quiet       (default) nothing started on purpose: the figures as before.
#   neighbours  NEIGHBOURS busy processes (default: what the caller passes to bench_mode_setup:
#               one per CPU, `nproc`, for run.sh and make bench; one for make bench-http) spin
#               at the same priority as the benchmark (no nice, no pinning) for the whole timed
#               run: a pool that spins or wakes more threads than it has CPUs to itself pays
#               for it here.
#   quota       every measured process runs in a scratch cgroup limited to QUOTA_CPUS CPUs
#               (default 1): cgroup v2 `cpu.max` = "<QUOTA_CPUS*100000> 100000" where the
#               unified hierarchy has a cpu controller we may use, else cgroup v1
#               `cpu.cfs_quota_us` = QUOTA_CPUS*100000 over `cpu.cfs_period_us` = 100000 (the
#               v1 cpu controller's mount: cpu, cpu,cpuacct, ...). The cgroup is made under the
#               script's own cgroup, and removed at exit. LoopDispatch sizes its pool from the
#               quota (Sources/LoopDispatch/Pool/CPUBudget.swift); libdispatch does not. Where
#               no writable cpu controller exists, bench_mode_setup prints "skipped: ..." and
#               exits 0.
#
# Use:
#   bench_mode_setup N      validate MODE; neighbours: N by default; quota: make the cgroup
#                           (or skip, exit 0). First installs `trap bench_mode_cleanup EXIT`
#                           and INT, TERM and HUP traps that exit (so the EXIT trap runs); a
#                           caller that sets its own EXIT trap later must call
#                           bench_mode_cleanup from it.
#   bench_mode_start        neighbours: start them (no-op in the other modes)
#   "${bench_mode_prefix[@]}" CMD ...   run CMD in the mode: in quota mode a `sh` that writes its
#                           own pid to the cgroup's cgroup.procs and execs CMD (so CMD's pid is
#                           the one `$!` gives, and CMD is in the cgroup from its first
#                           instruction); empty otherwise. With `set -u` on bash < 4.4 use
#                           ${bench_mode_prefix[@]+"${bench_mode_prefix[@]}"}.
#   bench_mode_stop         neighbours: kill them (by pid) and reap them
#   bench_mode_heading      one line naming the mode (and the neighbour count or the cgroup)
#   bench_mode_throttled    quota: "<periods throttled> <ns throttled>" so far (cpu.stat); else
#                           "0 0"
#   bench_mode_cleanup      stop the neighbours, kill what is left in the cgroup (processes this
#                           script started) and remove it; idempotent.
#
# No neighbour outlives the script: each one checks every ~0.1 s that the script's pid is still
# alive and exits if not (even after a SIGKILL of the script, which no trap sees). A cgroup left
# behind by a SIGKILLed script is removed by the next bench_mode_setup (empty scratch cgroups
# named loopdispatch-bench.<pid> whose pid is gone).

bench_mode="${MODE:-quiet}"
bench_mode_prefix=()
bench__neighbours=0
bench__neighbour_pids=()
bench__cgroup_dir=""
bench__cgroup_kind=""
bench__cgroup_enabled_cpu_in=""  # v2: the parent whose subtree_control we added +cpu to
bench__quota_cpus="${QUOTA_CPUS:-1}"
bench__period_us=100000

bench_mode_setup() {
  local default_neighbours="$1"
  # Before anything is made: a signal ends the script through exit, so that the EXIT trap
  # (bench_mode_cleanup, or the caller's, which calls it) runs. Ctrl-C also reaches the measured
  # process (same process group); the neighbours, being background jobs of a non-interactive
  # shell, ignore SIGINT and are killed by the cleanup.
  trap bench_mode_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  case "$bench_mode" in
    quiet) ;;
    neighbours)
      bench__neighbours="${NEIGHBOURS:-$default_neighbours}"
      if ! [[ "$bench__neighbours" =~ ^[1-9][0-9]*$ ]]; then
        echo "NEIGHBOURS must be a positive integer (got '$bench__neighbours')" >&2
        exit 2
      fi
      ;;
    quota)
      if ! [[ "$bench__quota_cpus" =~ ^[1-9][0-9]*$ ]]; then
        echo "QUOTA_CPUS must be a positive integer (got '$bench__quota_cpus')" >&2
        exit 2
      fi
      bench__quota_setup
      ;;
    *)
      echo "MODE must be quiet, neighbours or quota (got '$bench_mode')" >&2
      exit 2
      ;;
  esac
}

bench_mode_start() {
  [[ "$bench_mode" == neighbours ]] || return 0
  local i
  for ((i = 0; i < bench__neighbours; i++)); do
    # A plain busy loop (user time only; dash's kill is a builtin, so no fork), checking every
    # 100k iterations (~0.1 s) that the script ($1) is alive.
    # shellcheck disable=SC2016  # expanded by the inner sh
    sh -c 'while kill -0 "$1" 2>/dev/null; do
             i=0; while [ "$i" -lt 100000 ]; do i=$((i + 1)); done
           done' bench-neighbour "$$" &
    bench__neighbour_pids+=("$!")
  done
}

bench_mode_stop() {
  local pid
  for pid in ${bench__neighbour_pids[@]+"${bench__neighbour_pids[@]}"}; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in ${bench__neighbour_pids[@]+"${bench__neighbour_pids[@]}"}; do
    wait "$pid" 2>/dev/null || true
  done
  bench__neighbour_pids=()
}

bench_mode_heading() {
  case "$bench_mode" in
    quiet) echo "mode: quiet (nothing else started; $(nproc) CPUs)" ;;
    neighbours)
      local noun=processes
      ((bench__neighbours == 1)) && noun=process
      echo "mode: neighbours ($bench__neighbours busy neighbour $noun at the same priority" \
        "for the whole timed run; $(nproc) CPUs)"
      ;;
    quota)
      if [[ "$bench__cgroup_kind" == v2 ]]; then
        echo "mode: quota (cgroup v2 $bench__cgroup_dir, cpu.max" \
          "\"$(cat "$bench__cgroup_dir/cpu.max")\": $bench__quota_cpus of $(nproc) CPUs)"
      else
        echo "mode: quota (cgroup v1 $bench__cgroup_dir, cpu.cfs_quota_us" \
          "$(cat "$bench__cgroup_dir/cpu.cfs_quota_us") / cpu.cfs_period_us" \
          "$(cat "$bench__cgroup_dir/cpu.cfs_period_us"): $bench__quota_cpus of $(nproc) CPUs)"
      fi
      ;;
  esac
}

bench_mode_throttled() {
  if [[ -z "$bench__cgroup_dir" ]]; then
    echo "0 0"
    return
  fi
  # v1: nr_throttled, throttled_time (ns); v2: nr_throttled, throttled_usec.
  awk '$1 == "nr_throttled" { n = $2 }
       $1 == "throttled_time" { ns = $2 }
       $1 == "throttled_usec" { ns = $2 * 1000 }
       END { printf "%d %d\n", n, ns }' "$bench__cgroup_dir/cpu.stat"
}

bench_mode_cleanup() {
  bench_mode_stop
  bench__quota_cleanup
}

# ---- quota: the scratch cgroup ------------------------------------------------------------------

bench__skip() {
  echo "skipped: MODE=quota needs a writable cgroup cpu controller: $1"
  exit 0
}

# bench__write VALUE FILE: write VALUE to FILE; non-zero status (and no message) on failure.
bench__write() {
  { printf '%s\n' "$1" >"$2"; } 2>/dev/null
}

# bench__remove_stale PARENT: remove empty loopdispatch-bench.<pid> cgroups whose pid is gone
# (left by a SIGKILLed run). rmdir fails on a cgroup that still has processes or children.
bench__remove_stale() {
  local dir pid
  for dir in "$1"/loopdispatch-bench.*; do
    [[ -d "$dir" ]] || continue
    pid="${dir##*.}"
    if [[ "$pid" =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null; then
      rmdir "$dir" 2>/dev/null && echo "removed stale cgroup $dir" >&2
    fi
  done
  return 0
}

bench__quota_setup() {
  local quota_us=$((bench__quota_cpus * bench__period_us))
  local v2_mount="" v1_mount="" v2_path="" v1_path=""
  local _device mountpoint type options _rest id controllers path
  while read -r _device mountpoint type options _rest; do
    if [[ "$type" == cgroup2 && -z "$v2_mount" ]]; then
      v2_mount="$mountpoint"
    elif [[ "$type" == cgroup && ",$options," == *,cpu,* && -z "$v1_mount" ]]; then
      v1_mount="$mountpoint"
    fi
  done </proc/self/mounts
  while IFS=: read -r id controllers path; do
    if [[ "$id" == 0 && -z "$controllers" ]]; then
      v2_path="$path"
    elif [[ ",$controllers," == *,cpu,* ]]; then
      v1_path="$path"
    fi
  done </proc/self/cgroup
  v2_path="${v2_path%/}"
  v1_path="${v1_path%/}"

  # cgroup v2, where the unified hierarchy offers the cpu controller to our cgroup.
  if [[ -n "$v2_mount" ]]; then
    local parent="$v2_mount$v2_path"
    if grep -qw cpu "$parent/cgroup.controllers" 2>/dev/null; then
      bench__remove_stale "$parent"
      local enabled=""
      if ! grep -qw cpu "$parent/cgroup.subtree_control" 2>/dev/null; then
        # Fails on a non-root cgroup that has processes of its own (no internal processes).
        bench__write +cpu "$parent/cgroup.subtree_control" && enabled="$parent"
      fi
      if grep -qw cpu "$parent/cgroup.subtree_control" 2>/dev/null; then
        local dir="$parent/loopdispatch-bench.$$"
        if mkdir "$dir" 2>/dev/null; then
          bench__cgroup_dir="$dir"
          bench__cgroup_kind=v2
          bench__cgroup_enabled_cpu_in="$enabled"
          if bench__write "$quota_us $bench__period_us" "$dir/cpu.max"; then
            # shellcheck disable=SC2016  # expanded by the inner sh
            bench_mode_prefix=(sh -c 'echo "$$" >"$1" && shift && exec "$@"' bench-quota
              "$dir/cgroup.procs")
            return 0
          fi
          bench__quota_cleanup
        fi
      elif [[ -n "$enabled" ]]; then
        bench__write -cpu "$enabled/cgroup.subtree_control" || true
      fi
    fi
  fi

  # cgroup v1: the cpu controller's own hierarchy.
  if [[ -z "$v1_mount" ]]; then
    bench__skip "no cgroup v2 cpu controller available to this cgroup and no cgroup v1 cpu mount"
  fi
  local parent="$v1_mount$v1_path"
  [[ -d "$parent" ]] || bench__skip "$parent (this process's v1 cpu cgroup) is not visible"
  bench__remove_stale "$parent"
  local dir="$parent/loopdispatch-bench.$$"
  mkdir "$dir" 2>/dev/null || bench__skip "cannot create $dir (read-only mount or not root?)"
  bench__cgroup_dir="$dir"
  bench__cgroup_kind=v1
  # The period first: a quota is checked against the period (and against the parent's quota).
  if ! bench__write "$bench__period_us" "$dir/cpu.cfs_period_us" ||
    ! bench__write "$quota_us" "$dir/cpu.cfs_quota_us"; then
    bench__quota_cleanup
    bench__skip "cannot set cpu.cfs_quota_us=$quota_us / cpu.cfs_period_us=$bench__period_us in $dir"
  fi
  # shellcheck disable=SC2016  # expanded by the inner sh
  bench_mode_prefix=(sh -c 'echo "$$" >"$1" && shift && exec "$@"' bench-quota "$dir/cgroup.procs")
}

bench__quota_cleanup() {
  local dir="$bench__cgroup_dir"
  [[ -n "$dir" ]] || return 0
  bench__cgroup_dir=""
  bench_mode_prefix=()
  # Whatever is still in the cgroup is a measured process this script started (an interrupted
  # run); kill it by pid, then remove the cgroup (rmdir fails while it has processes).
  local try pids
  for try in $(seq 50); do
    pids="$(cat "$dir/cgroup.procs" 2>/dev/null || true)"
    [[ -z "$pids" ]] && break
    # shellcheck disable=SC2086  # one pid a line: split on purpose
    kill -KILL $pids 2>/dev/null || true
    ((try < 50)) && sleep 0.1
  done
  if ! rmdir "$dir" 2>/dev/null; then
    echo "warning: could not remove the scratch cgroup $dir" >&2
  fi
  if [[ -n "$bench__cgroup_enabled_cpu_in" ]]; then
    bench__write -cpu "$bench__cgroup_enabled_cpu_in/cgroup.subtree_control" || true
    bench__cgroup_enabled_cpu_in=""
  fi
}
