import Glibc
import LoopDispatch

/// An idle runtime costs nothing: with the pool, the service loop and the main loop all
/// started and then idle, the whole process wakes at most about once per second.
///
/// Counts context switches of the runtime's threads (`/proc/self/task/*/status`: the main
/// thread and every `ld.*` thread; a sanitizer's own background thread is not ours) over
/// LOOPDISPATCH_IDLE_SECONDS (default 3; the figure is for 10).
func idleScenario() {
  let seconds = getenv("LOOPDISPATCH_IDLE_SECONDS").flatMap { Int(String(cString: $0)) } ?? 3
  // Wake everything once: pool workers, the service loop (a timer), the main loop.
  let warmed = Group()
  for _ in 0..<16 { Queue.global().async(group: warmed) {} }
  warmed.wait()
  Queue.global().after(.milliseconds(1)) {}.cancel()
  let fired = Semaphore(value: 0)
  Queue.global().after(.milliseconds(1)) { fired.signal() }
  fired.wait()
  // Let spinning workers park, and any worker grown under load retire, before measuring.
  let settleBy = Deadline.now + .seconds(20)
  repeat {
    Queue.runMain(until: .now + .milliseconds(100))
    let stats = RuntimeStats.current
    if stats.parkedWorkers == stats.poolThreads && stats.pendingJobs == 0
      && stats.poolThreads <= Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    {
      break
    }
  } while Deadline.now < settleBy
  let before = contextSwitches()
  Queue.runMain(until: .now + .seconds(Int64(seconds)))
  let after = contextSwitches()
  let wakes = after - before
  print("idle for \(seconds) s: \(wakes) context switches in \(threadCount()) threads")
  // The bounded run itself costs a wake at its deadline; allow one per second in all.
  if wakes > seconds + 1 { fail("\(wakes) context switches while idle for \(seconds) s") }
}

/// Voluntary plus involuntary context switches of all threads of this process.
private func contextSwitches() -> Int {
  var total = 0
  forEachTask { status in
    // Voluntary switches are wake-ups from sleep; involuntary ones are preemptions by other
    // processes' load, which say nothing about the runtime.
    for line in status.split(separator: "\n") where line.hasPrefix("voluntary_ctxt_switches:") {
      total += Int(line.split(separator: ":").last?.trimmingCharacters() ?? "") ?? 0
    }
  }
  return total
}

private func threadCount() -> Int {
  var count = 0
  forEachTask { _ in count += 1 }
  return count
}

private func forEachTask(_ body: (String) -> Void) {
  guard let directory = opendir("/proc/self/task") else { return }
  defer { closedir(directory) }
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    guard Int(name) != nil else { continue }
    // Ours: the main thread (the main loop) and LoopDispatch's threads (`ld.*`).
    let isMain = Int32(name) == getpid()
    guard isMain || threadName(name).hasPrefix("ld.") else { continue }
    let fd = open("/proc/self/task/\(name)/status", O_RDONLY)
    guard fd >= 0 else { continue }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let n = read(fd, &buffer, buffer.count)
    close(fd)
    if n > 0 { body(String(decoding: buffer[..<n], as: UTF8.self)) }
  }
}

private func threadName(_ tid: String) -> String {
  let fd = open("/proc/self/task/\(tid)/comm", O_RDONLY)
  guard fd >= 0 else { return "" }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: 32)
  let n = read(fd, &buffer, buffer.count)
  return n > 0 ? String(decoding: buffer[..<n], as: UTF8.self) : ""
}

extension Substring {
  fileprivate func trimmingCharacters() -> String {
    String(filter { !$0.isWhitespace })
  }
}
