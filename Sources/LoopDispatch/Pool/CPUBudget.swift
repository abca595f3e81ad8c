import CLoopShims
import Glibc

/// How many CPUs the pool sizes itself for (its base thread count), and why.
///
/// A container with a CPU limit (Kubernetes `limits.cpu`, cgroup `cpu.max`) sees every CPU of
/// the host in its affinity mask but may use only its quota; a pool sized by the mask alone
/// overshoots and is throttled. The choice, first match wins:
/// 1. `LOOPDISPATCH_CPUS`, a positive integer: that many (an operator's override).
/// 2. A cgroup CPU quota: cgroup v2 `cpu.max` (`<quota> <period>`, or `max`), or cgroup v1
///    `cpu.cfs_quota_us` / `cpu.cfs_period_us` (a quota of -1: none), of the process's cgroup
///    and each of its ancestors (the tightest limit applies), as quota / period rounded up,
///    at most the affinity count.
/// 3. The affinity mask (`sched_getaffinity`), at least 1.
///
/// Read once, when the pool starts (a quota changed later is not followed). The paths are
/// parameters so that tests can point them at a made-up cgroup tree.
struct CPUBudget: Equatable, Sendable {
  enum Source: String, Sendable {
    case environment = "LOOPDISPATCH_CPUS"
    case cgroupV2 = "cgroup v2 cpu.max"
    case cgroupV1 = "cgroup v1 cpu.cfs_quota_us"
    case affinity = "affinity"
  }

  /// The pool's base thread count.
  let cpus: Int
  let source: Source
  /// The affinity mask's count, for the record.
  let affinityCPUs: Int
  /// The cgroup directory whose quota set `cpus` (nil unless `source` is a cgroup): its
  /// `cpu.stat` counts the periods in which the quota throttled the process (`SpinGovernor`).
  var quotaDirectory: String? = nil

  /// The budget of this process.
  static let current = resolve(
    environment: getenv("LOOPDISPATCH_CPUS").map { String(cString: $0) },
    affinityCPUs: Int(cls_available_cpus()))

  /// The budget for the given environment value, affinity count and cgroup files.
  /// - Parameters:
  ///   - cgroupRoot: where the cgroup file systems are mounted (v2 unified at the root or at
  ///     `unified/`, v1 controllers in `cpu/` or `cpu,cpuacct/`).
  ///   - selfCgroup: the contents of `/proc/self/cgroup` (nil: read it).
  static func resolve(
    environment: String?, affinityCPUs: Int, cgroupRoot: String = "/sys/fs/cgroup",
    selfCgroup: String? = nil
  ) -> CPUBudget {
    let affinity = max(1, affinityCPUs)
    if let environment, let count = Int(environment.trimmingSpaces), count >= 1 {
      return CPUBudget(cpus: count, source: .environment, affinityCPUs: affinity)
    }
    let membership = selfCgroup ?? readSmallTextFile("/proc/self/cgroup", limit: 4096) ?? ""
    if let (limit, source, directory) = quota(cgroupRoot: cgroupRoot, membership: membership) {
      return CPUBudget(
        cpus: min(affinity, limit), source: source, affinityCPUs: affinity,
        quotaDirectory: directory)
    }
    return CPUBudget(cpus: affinity, source: .affinity, affinityCPUs: affinity)
  }

  /// The tightest CPU quota over the process's cgroup and its ancestors, in whole CPUs
  /// (rounded up, at least 1), which hierarchy set it and in which directory; nil when none
  /// is set.
  private static func quota(
    cgroupRoot: String, membership: String
  ) -> (Int, Source, String)? {
    var tightest: (limit: Int, directory: String)?
    var source = Source.affinity
    for line in membership.split(separator: "\n") {
      // "<id>:<controllers>:<path>"; the path may itself contain ':'.
      let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
      guard fields.count == 3 else { continue }
      let controllers = fields[1].split(separator: ",")
      let path = String(fields[2])
      var found: (limit: Int, directory: String)?
      if fields[0] == "0" && controllers.isEmpty {
        // v2: the unified hierarchy, mounted at the root (pure v2) or at unified/ (hybrid).
        for mount in [cgroupRoot, cgroupRoot + "/unified"] {
          if let limit = tightestLimit(mount: mount, path: path, readLimit: v2Limit) {
            found = limit
            break
          }
        }
        if let found, found.limit < (tightest?.limit ?? .max) {
          (tightest, source) = (found, .cgroupV2)
        }
      } else if controllers.contains("cpu") {
        let directory = controllers.joined(separator: ",")
        for mount in [cgroupRoot + "/" + directory, cgroupRoot + "/cpu"] {
          if let limit = tightestLimit(mount: mount, path: path, readLimit: v1Limit) {
            found = limit
            break
          }
        }
        if let found, found.limit < (tightest?.limit ?? .max) {
          (tightest, source) = (found, .cgroupV1)
        }
      }
    }
    return tightest.map { ($0.limit, source, $0.directory) }
  }

  /// The smallest limit `readLimit` finds in `mount + path` and each ancestor directory up to
  /// `mount`, and the directory that sets it; nil if none sets one.
  private static func tightestLimit(
    mount: String, path: String, readLimit: (String) -> Int?
  ) -> (limit: Int, directory: String)? {
    var components = path.split(separator: "/").map(String.init)
    var tightest: (limit: Int, directory: String)?
    while true {
      let directory = ([mount] + components).joined(separator: "/")
      if let limit = readLimit(directory), limit < (tightest?.limit ?? .max) {
        tightest = (limit, directory)
      }
      if components.isEmpty { break }
      components.removeLast()
    }
    return tightest
  }

  /// v2 `cpu.max`: "<quota> <period>" in microseconds, or "max <period>" for none.
  private static func v2Limit(_ directory: String) -> Int? {
    guard let text = readSmallTextFile(directory + "/cpu.max", limit: 128) else { return nil }
    let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
    guard fields.count >= 2, let quota = Int(fields[0]), let period = Int(fields[1]) else {
      return nil  // "max": no limit.
    }
    return wholeCPUs(quota: quota, period: period)
  }

  /// v1 `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`.
  private static func v1Limit(_ directory: String) -> Int? {
    guard let quotaText = readSmallTextFile(directory + "/cpu.cfs_quota_us", limit: 64),
      let periodText = readSmallTextFile(directory + "/cpu.cfs_period_us", limit: 64),
      let quota = Int(quotaText.trimmingSpaces), let period = Int(periodText.trimmingSpaces)
    else { return nil }
    return wholeCPUs(quota: quota, period: period)
  }

  /// quota / period rounded up, at least 1; nil for no quota (negative) or a bad period.
  private static func wholeCPUs(quota: Int, period: Int) -> Int? {
    guard quota > 0, period > 0 else { return nil }
    return max(1, (quota + period - 1) / period)
  }
}

extension String {
  /// Without leading and trailing spaces, tabs and newlines.
  fileprivate var trimmingSpaces: String {
    let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\t" }
    guard let first = firstIndex(where: { !isSpace($0) }),
      let last = lastIndex(where: { !isSpace($0) })
    else { return "" }
    return String(self[first...last])
  }
}
