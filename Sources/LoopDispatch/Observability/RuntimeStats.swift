import MainLoop
import Synchronization

/// Process-wide counters kept with relaxed atomics (read for reporting only).
enum RuntimeCounters {
  /// Custom queues alive (global and main queues are not counted).
  static let liveQueues = Atomic<Int>(0)
  /// Sources alive (including cancelled sources not yet released).
  static let liveSources = Atomic<Int>(0)
}

/// One event loop's counters.
public struct LoopStats: Sendable, Equatable {
  /// Completed loop turns (one `epoll_wait` and the work it found).
  public var turns: UInt64
  /// fd and signal events whose handler ran.
  public var events: UInt64
  /// Timer firings (each period of a repeating timer counts once).
  public var timersFired: UInt64
  /// Timers scheduled and not yet fired or cancelled.
  public var pendingTimers: Int
  /// fd and signal watches registered.
  public var registeredWatches: Int
  /// Wake-ups written by other threads (one per batch of posted work, not one per post).
  public var wakeups: UInt64

  init(_ loop: EventLoop) {
    turns = loop.turnCount
    events = loop.eventCount
    timersFired = loop.timerFireCount
    pendingTimers = loop.pendingTimerCount
    registeredWatches = loop.registeredWatchCount
    wakeups = loop.wakeupCount
  }
}

/// A snapshot of the runtime's state, for logs and status pages: pool, loops and queues.
///
/// Figures are read one by one without stopping the runtime, so they are each exact at the
/// moment they were read but not a consistent cut. Thread-safety: a value type.
public struct RuntimeStats: Sendable, CustomStringConvertible {
  /// Custom queues alive.
  public var liveQueues: Int
  /// Sources alive.
  public var liveSources: Int
  /// Worker threads in the pool: the plain global queues' and the overcommit queues' (at most
  /// 255 together, see ``Queue/global(_:overcommit:)``).
  public var poolThreads: Int
  /// The CPUs the pool is sized for: its base thread count (a CPU quota's, the affinity
  /// mask's, or `LOOPDISPATCH_CPUS`; see ``poolCPUSource``).
  public var poolCPUs: Int
  /// Where ``poolCPUs`` comes from: `LOOPDISPATCH_CPUS`, `cgroup v2 cpu.max`,
  /// `cgroup v1 cpu.cfs_quota_us` or `affinity`.
  public var poolCPUSource: String
  /// The overcommit queues' share of ``poolThreads``.
  public var overcommitThreads: Int
  /// Workers parked (idle), plain and overcommit.
  public var parkedWorkers: Int
  /// Jobs waiting in the pool's lanes, plain and overcommit.
  public var pendingJobs: Int
  /// Jobs the pool has started since launch, plain and overcommit.
  public var jobsStarted: UInt64
  /// Workers added because the others were blocked.
  public var poolGrowthEvents: UInt64
  /// The main loop (the process main thread).
  public var mainLoop: LoopStats
  /// The service loop (timer and signal sources of non-main queues).
  public var serviceLoop: LoopStats
  /// Main-queue stalls reported by the watchdog (``Queue/setMainStallThreshold(_:)``).
  public var mainStalls: UInt64
  /// Descriptors of non-main sources registered with the I/O driver (each file once, with its
  /// read and write sources).
  public var ioWatches: Int
  /// Readiness events the I/O driver received.
  public var ioEvents: UInt64
  /// Source handlers the I/O driver ran on the thread that saw the event (no hand-off).
  public var ioInlineHandlers: UInt64
  /// `after` timers of non-main queues waiting in the I/O driver's timer heap (cancelled
  /// ones included until they leave it).
  public var ioPendingTimers: Int
  /// `after` timers the I/O driver fired.
  public var ioTimersFired: UInt64
  /// Of those, the ones whose work ran on the driver thread that saw the timer fire (an
  /// idle serial queue: no hand-off).
  public var ioInlineTimers: UInt64
  /// The global queues, the main queue and every live custom queue that has received work,
  /// one entry each (a queue's counters are created with its first item, so a queue that
  /// never ran anything costs nothing and is not listed).
  public var queues: [QueueStats]
  /// Released custom queues' totals, one entry per label (`queues` is 0 in them). Labels
  /// past the first 256 fold into one entry labelled `(other labels)`: a label first
  /// released after that point loses its totals to that entry, so its per-label counters
  /// in ``queuesByLabel`` restart from its live queues' figures.
  public var releasedQueues: [QueueStats]

  /// Timers pending on the main loop, the service loop and the I/O driver (the driver's in
  /// its heap: those scheduled since its last expiry, still on its lock-free stack, are not
  /// counted).
  public var pendingTimers: Int {
    mainLoop.pendingTimers + serviceLoop.pendingTimers + ioPendingTimers
  }
  /// fd and signal watches registered on the main loop, the service loop and the I/O driver.
  public var registeredWatches: Int {
    mainLoop.registeredWatches + serviceLoop.registeredWatches + ioWatches
  }

  /// Live and released queues folded by label: counters per label that never decrease
  /// (for the first 256 labels released; see ``releasedQueues``).
  public var queuesByLabel: [QueueStats] { QueueStats.byLabel(queues + releasedQueues) }

  /// Reads the counters now.
  public static var current: RuntimeStats {
    let pool = WorkerPool.shared
    // The main and global queues are created on first use; list them from the start.
    _ = Queue.main
    _ = Queue.global()
    let (live, released) = QueueRegistry.shared.snapshot()
    return RuntimeStats(
      liveQueues: RuntimeCounters.liveQueues.load(ordering: .relaxed),
      liveSources: RuntimeCounters.liveSources.load(ordering: .relaxed),
      poolThreads: pool.threadCount,
      poolCPUs: pool.budget.cpus,
      poolCPUSource: pool.budget.source.rawValue,
      overcommitThreads: pool.overcommitThreadCount,
      parkedWorkers: pool.parkedCount,
      pendingJobs: pool.queuedJobCount + pool.overcommitQueuedCount,
      jobsStarted: pool.jobsStarted
        &+ pool.overcommitJobsStarted.load(ordering: .relaxed),
      poolGrowthEvents: pool.growthEvents.load(ordering: .relaxed),
      mainLoop: LoopStats(EventLoop.main),
      serviceLoop: LoopStats(ServiceLoop.shared),
      mainStalls: MainStallWatchdog.shared.stallsReported.load(ordering: .relaxed),
      ioWatches: IODriver.registeredCount,
      ioEvents: IODriver.eventCount,
      ioInlineHandlers: IODriver.inlineCount,
      ioPendingTimers: DriverTimers.running?.heapCount ?? 0,
      ioTimersFired: DriverTimers.running?.firedCount.load(ordering: .relaxed) ?? 0,
      ioInlineTimers: DriverTimers.running?.inlineCount.load(ordering: .relaxed) ?? 0,
      queues: live,
      releasedQueues: released)
  }

  /// The process-wide figures: (name, Prometheus type, help, value).
  private var figures: [(String, String, String, String)] {
    var figures: [(String, String, String, String)] = [
      ("queues", "gauge", "Custom queues alive.", "\(liveQueues)"),
      ("sources", "gauge", "Sources alive.", "\(liveSources)"),
      ("pool_threads", "gauge", "Worker threads in the pool.", "\(poolThreads)"),
      (
        "pool_cpus", "gauge",
        "CPUs the pool is sized for (from \(poolCPUSource)).", "\(poolCPUs)"
      ),
      (
        "pool_overcommit_threads", "gauge", "Pool threads serving the overcommit queues.",
        "\(overcommitThreads)"
      ),
      ("pool_parked_workers", "gauge", "Workers parked (idle).", "\(parkedWorkers)"),
      ("pool_pending_jobs", "gauge", "Jobs waiting in the pool's lanes.", "\(pendingJobs)"),
      ("pool_jobs_started_total", "counter", "Jobs started by the pool.", "\(jobsStarted)"),
      (
        "pool_growth_events_total", "counter", "Workers added because the others were blocked.",
        "\(poolGrowthEvents)"
      ),
      (
        "timers_pending", "gauge",
        "Timers pending on the main and service loops and the I/O driver.",
        "\(pendingTimers)"
      ),
      (
        "watches_registered", "gauge", "fd and signal watches on the main and service loops.",
        "\(registeredWatches)"
      ),
      (
        "main_stalls_total", "counter", "Main-queue stalls reported by the watchdog.",
        "\(mainStalls)"
      ),
      ("io_events_total", "counter", "Readiness events seen by the I/O driver.", "\(ioEvents)"),
      (
        "io_inline_handlers_total", "counter",
        "Source handlers run on the I/O driver thread that saw the event.", "\(ioInlineHandlers)"
      ),
      (
        "io_timers_fired_total", "counter", "after timers fired by the I/O driver.",
        "\(ioTimersFired)"
      ),
      (
        "io_inline_timers_total", "counter",
        "after timers whose work ran on the I/O driver thread that fired them.",
        "\(ioInlineTimers)"
      ),
    ]
    for (name, loop) in [("main_loop", mainLoop), ("service_loop", serviceLoop)] {
      figures += [
        ("\(name)_turns_total", "counter", "Turns completed by the \(name).", "\(loop.turns)"),
        ("\(name)_events_total", "counter", "fd and signal events run.", "\(loop.events)"),
        ("\(name)_timers_fired_total", "counter", "Timer firings.", "\(loop.timersFired)"),
        ("\(name)_wakeups_total", "counter", "Cross-thread wake-ups.", "\(loop.wakeups)"),
      ]
    }
    return figures
  }

  /// The snapshot in the Prometheus text exposition format (version 0.0.4): one metric per
  /// process-wide figure, named `loopdispatch_<figure>`, then the per-queue figures folded
  /// by label (``queuesByLabel``) as `loopdispatch_queue_<figure>{queue="<label>"}`.
  public var prometheusText: String {
    var text = ""
    for (name, type, help, value) in figures {
      text += "# HELP loopdispatch_\(name) \(help)\n# TYPE loopdispatch_\(name) \(type)\n"
      text += "loopdispatch_\(name) \(value)\n"
    }
    let byLabel = queuesByLabel
    let queueFigures: [(String, String, String, (QueueStats) -> String)] = [
      ("submitted_total", "counter", "Items submitted to the queue.", { "\($0.submitted)" }),
      ("completed_total", "counter", "Items the queue finished.", { "\($0.completed)" }),
      ("depth", "gauge", "Items submitted and not finished.", { "\($0.depth)" }),
      (
        "max_wait_seconds", "gauge",
        "Longest wait from submission to start (serial queues time one item in eight).",
        { seconds($0.maxWait) }
      ),
      (
        "recent_wait_seconds", "gauge", "Moving average of recent waits (weight 1/8).",
        { seconds($0.recentWait) }
      ),
    ]
    for (name, type, help, value) in queueFigures {
      text += "# HELP loopdispatch_queue_\(name) \(help)\n"
      text += "# TYPE loopdispatch_queue_\(name) \(type)\n"
      for entry in byLabel {
        text +=
          "loopdispatch_queue_\(name){queue=\"\(escapedLabel(entry.label))\"} \(value(entry))\n"
      }
    }
    return text
  }

  /// One `name value` line per process-wide figure (`queues 3`, `pool_threads 4`, ...),
  /// then one line per queue label (``queuesByLabel``):
  /// `queue "<label>" kind serial queues 1 submitted 10 completed 9 depth 1
  /// max_wait_us 120 recent_wait_us 15`.
  public var description: String {
    var lines = figures.map { "\($0.0.replacingSuffix("_total")) \($0.3)" }
    lines.append("pool_cpus_source \(poolCPUSource)")
    for entry in queuesByLabel {
      lines.append(
        "queue \"\(escapedLabel(entry.label))\" kind \(entry.kind.rawValue) queues \(entry.queues)"
          + " submitted \(entry.submitted) completed \(entry.completed) depth \(entry.depth)"
          + " max_wait_us \(microseconds(entry.maxWait))"
          + " recent_wait_us \(microseconds(entry.recentWait))")
    }
    return lines.joined(separator: "\n")
  }
}

/// `duration` in seconds with nanosecond precision, e.g. `0.000120500`.
private func seconds(_ duration: Duration) -> String {
  let nanoseconds = duration.saturatingNanoseconds
  let fraction = String(nanoseconds % 1_000_000_000)
  return "\(nanoseconds / 1_000_000_000)."
    + String(repeating: "0", count: 9 - fraction.count) + fraction
}

/// `duration` in whole microseconds.
private func microseconds(_ duration: Duration) -> Int64 {
  duration.saturatingNanoseconds / 1000
}

/// A label as a Prometheus label value (and a quoted /stats field): `\`, `"` and line feeds
/// escaped, carriage returns too (as `\r`, so no raw line break can end a line early).
/// Works on Unicode scalars: a `Character` would hide a `"` or `\` followed by a combining
/// mark, and `"\r\n"` is one `Character`.
private func escapedLabel(_ label: String) -> String {
  var escaped = String.UnicodeScalarView()
  for scalar in label.unicodeScalars {
    switch scalar {
    case "\\": escaped.append(contentsOf: "\\\\".unicodeScalars)
    case "\"": escaped.append(contentsOf: "\\\"".unicodeScalars)
    case "\n": escaped.append(contentsOf: "\\n".unicodeScalars)
    case "\r": escaped.append(contentsOf: "\\r".unicodeScalars)
    default: escaped.append(scalar)
    }
  }
  return String(escaped)
}

extension String {
  fileprivate func replacingSuffix(_ suffix: String) -> String {
    hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
  }
}
