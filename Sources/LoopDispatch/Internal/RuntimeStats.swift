import MainLoop
import Synchronization

/// Process-wide counters kept with relaxed atomics (read for reporting only).
enum RuntimeCounters {
  /// Custom queues alive (global and main queues are not counted).
  static let liveQueues = Atomic<Int>(0)
  /// Sources alive (including cancelled sources not yet released).
  static let liveSources = Atomic<Int>(0)
}

/// A snapshot of the runtime's state, for logs and status pages.
///
/// Figures are read one by one without stopping the runtime, so they are each exact at the
/// moment they were read but not a consistent cut. Thread-safety: a value type.
public struct RuntimeStats: Sendable, CustomStringConvertible {
  /// Custom queues alive.
  public var liveQueues: Int
  /// Sources alive.
  public var liveSources: Int
  /// Worker threads in the pool.
  public var poolThreads: Int
  /// Workers parked (idle).
  public var parkedWorkers: Int
  /// Jobs waiting in the pool's lanes.
  public var pendingJobs: Int
  /// Jobs the pool has started since launch.
  public var jobsStarted: UInt64
  /// Workers added because the others were blocked.
  public var poolGrowthEvents: UInt64
  /// Timers pending on the main loop and on the service loop.
  public var pendingTimers: Int
  /// fd and signal watches registered on the main loop and on the service loop.
  public var registeredWatches: Int
  /// Turns completed by the main loop.
  public var mainLoopTurns: UInt64

  /// Reads the counters now.
  public static var current: RuntimeStats {
    let pool = WorkerPool.shared
    let loops = [EventLoop.main, ServiceLoop.shared]
    return RuntimeStats(
      liveQueues: RuntimeCounters.liveQueues.load(ordering: .relaxed),
      liveSources: RuntimeCounters.liveSources.load(ordering: .relaxed),
      poolThreads: pool.threadCount,
      parkedWorkers: pool.parkedCount,
      pendingJobs: pool.pendingJobs.load(ordering: .relaxed),
      jobsStarted: pool.jobsStarted.load(ordering: .relaxed),
      poolGrowthEvents: pool.growthEvents.load(ordering: .relaxed),
      pendingTimers: loops.reduce(0) { $0 + $1.pendingTimerCount },
      registeredWatches: loops.reduce(0) { $0 + $1.registeredWatchCount },
      mainLoopTurns: EventLoop.main.turnCount)
  }

  /// The snapshot in the Prometheus text exposition format (version 0.0.4), one gauge or
  /// counter per figure, each metric named `loopdispatch_<figure>`.
  public var prometheusText: String {
    let figures: [(String, String, String, String)] = [
      ("queues", "gauge", "Custom queues alive.", "\(liveQueues)"),
      ("sources", "gauge", "Sources alive.", "\(liveSources)"),
      ("pool_threads", "gauge", "Worker threads in the pool.", "\(poolThreads)"),
      ("pool_parked_workers", "gauge", "Workers parked (idle).", "\(parkedWorkers)"),
      ("pool_pending_jobs", "gauge", "Jobs waiting in the pool's lanes.", "\(pendingJobs)"),
      ("pool_jobs_started_total", "counter", "Jobs started by the pool.", "\(jobsStarted)"),
      (
        "pool_growth_events_total", "counter", "Workers added because the others were blocked.",
        "\(poolGrowthEvents)"
      ),
      (
        "timers_pending", "gauge", "Timers pending on the main and service loops.",
        "\(pendingTimers)"
      ),
      (
        "watches_registered", "gauge", "fd and signal watches on the main and service loops.",
        "\(registeredWatches)"
      ),
      ("main_loop_turns_total", "counter", "Turns completed by the main loop.", "\(mainLoopTurns)"),
    ]
    var text = ""
    for (name, type, help, value) in figures {
      text += "# HELP loopdispatch_\(name) \(help)\n# TYPE loopdispatch_\(name) \(type)\n"
      text += "loopdispatch_\(name) \(value)\n"
    }
    return text
  }

  /// One `name value` line per figure (`queues 3`, `pool_threads 4`, ...), for status pages.
  public var description: String {
    """
    queues \(liveQueues)
    sources \(liveSources)
    pool_threads \(poolThreads)
    pool_parked \(parkedWorkers)
    pool_pending_jobs \(pendingJobs)
    pool_jobs_started \(jobsStarted)
    pool_growth_events \(poolGrowthEvents)
    timers_pending \(pendingTimers)
    watches_registered \(registeredWatches)
    main_loop_turns \(mainLoopTurns)
    """
  }
}
