import Glibc
import Testing

@testable import LoopDispatch

/// `CPUBudget` against made-up cgroup trees: cgroup v2 `cpu.max`, cgroup v1 CFS quotas, no
/// quota, a missing controller, the tightest ancestor, and the `LOOPDISPATCH_CPUS` override.
@Suite struct CPUBudgetTests {
  /// A temporary directory standing in for /sys/fs/cgroup.
  final class Tree {
    let root: String
    /// What `write` created, in order: removed in reverse by `deinit`.
    private var created: [(path: String, isDirectory: Bool)] = []

    init() {
      var template = Array("/tmp/ld-cgroup.XXXXXX".utf8CString)
      root = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    }

    func write(_ relative: String, _ text: String) {
      var directory = root
      for component in relative.split(separator: "/").dropLast() {
        directory += "/" + component
        if mkdir(directory, 0o755) == 0 { created.append((directory, true)) }
      }
      let path = root + "/" + relative
      let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
      precondition(fd >= 0, "cannot write \(path)")
      _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
      close(fd)
      created.append((path, false))
    }

    deinit {
      for entry in created.reversed() {
        if entry.isDirectory { rmdir(entry.path) } else { unlink(entry.path) }
      }
      rmdir(root)
    }
  }

  @Test func cgroupV2QuotaRoundsUpAndCapsAtTheAffinity() {
    let tree = Tree()
    tree.write("kubepods/pod1/cpu.max", "150000 100000\n")
    let budget = CPUBudget.resolve(
      environment: nil, affinityCPUs: 8, cgroupRoot: tree.root, selfCgroup: "0::/kubepods/pod1\n")
    #expect(
      budget
        == CPUBudget(
          cpus: 2, source: .cgroupV2, affinityCPUs: 8, quotaDirectory: tree.root + "/kubepods/pod1")
    )
    let capped = CPUBudget.resolve(
      environment: nil, affinityCPUs: 1, cgroupRoot: tree.root, selfCgroup: "0::/kubepods/pod1\n")
    #expect(capped.cpus == 1)
  }

  @Test func theTightestAncestorWins() {
    let tree = Tree()
    tree.write("a/cpu.max", "100000 100000\n")  // 1 CPU on the parent,
    tree.write("a/b/cpu.max", "400000 100000\n")  // 4 on the child.
    let budget = CPUBudget.resolve(
      environment: nil, affinityCPUs: 8, cgroupRoot: tree.root, selfCgroup: "0::/a/b\n")
    #expect(budget.cpus == 1)
    #expect(budget.source == .cgroupV2)
    #expect(budget.quotaDirectory == tree.root + "/a")
  }

  @Test func cgroupV2WithoutAQuotaFallsBackToTheAffinity() {
    let tree = Tree()
    tree.write("svc/cpu.max", "max 100000\n")
    let budget = CPUBudget.resolve(
      environment: nil, affinityCPUs: 6, cgroupRoot: tree.root, selfCgroup: "0::/svc\n")
    #expect(budget == CPUBudget(cpus: 6, source: .affinity, affinityCPUs: 6))
  }

  @Test func aHybridHostsUnifiedMountIsRead() {
    let tree = Tree()
    tree.write("unified/job/cpu.max", "250000 100000\n")
    let budget = CPUBudget.resolve(
      environment: nil, affinityCPUs: 16, cgroupRoot: tree.root, selfCgroup: "0::/job\n")
    #expect(
      budget
        == CPUBudget(
          cpus: 3, source: .cgroupV2, affinityCPUs: 16, quotaDirectory: tree.root + "/unified/job"))
  }

  @Test func cgroupV1QuotaAndPeriod() {
    let tree = Tree()
    tree.write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "50000\n")
    tree.write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n")
    let membership = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/x\n"
    let budget = CPUBudget.resolve(
      environment: nil, affinityCPUs: 4, cgroupRoot: tree.root, selfCgroup: membership)
    #expect(
      budget
        == CPUBudget(
          cpus: 1, source: .cgroupV1, affinityCPUs: 4,
          quotaDirectory: tree.root + "/cpu,cpuacct/docker/abc"))
  }

  @Test func cgroupV1UnlimitedQuotaAndAMissingControllerMeanNoQuota() {
    let tree = Tree()
    tree.write("cpu/job/cpu.cfs_quota_us", "-1\n")
    tree.write("cpu/job/cpu.cfs_period_us", "100000\n")
    let unlimited = CPUBudget.resolve(
      environment: nil, affinityCPUs: 4, cgroupRoot: tree.root, selfCgroup: "3:cpu:/job\n")
    #expect(unlimited == CPUBudget(cpus: 4, source: .affinity, affinityCPUs: 4))
    // A cpu line whose files are missing (controller not mounted), and no cpu line at all.
    let missing = CPUBudget.resolve(
      environment: nil, affinityCPUs: 4, cgroupRoot: tree.root, selfCgroup: "3:cpu:/elsewhere\n")
    #expect(missing.source == .affinity)
    let none = CPUBudget.resolve(
      environment: nil, affinityCPUs: 4, cgroupRoot: tree.root, selfCgroup: "5:memory:/job\n")
    #expect(none.source == .affinity)
  }

  @Test func theEnvironmentOverridesAndBadValuesAreIgnored() {
    let tree = Tree()
    tree.write("q/cpu.max", "100000 100000\n")
    let chosen = CPUBudget.resolve(
      environment: "12", affinityCPUs: 2, cgroupRoot: tree.root, selfCgroup: "0::/q\n")
    #expect(chosen == CPUBudget(cpus: 12, source: .environment, affinityCPUs: 2))
    for bad in ["0", "-3", "many", ""] {
      let ignored = CPUBudget.resolve(
        environment: bad, affinityCPUs: 2, cgroupRoot: tree.root, selfCgroup: "0::/q\n")
      #expect(ignored.source == .cgroupV2, "LOOPDISPATCH_CPUS=\(bad)")
    }
  }

  /// The running pool reports its budget, and its base threads are that many.
  @Test func statsShowThePoolsBudget() {
    let stats = RuntimeStats.current
    #expect(stats.poolCPUs == WorkerPool.shared.baseThreads)
    #expect(stats.poolCPUs >= 1)
    #expect(stats.description.contains("pool_cpus \(stats.poolCPUs)"))
    #expect(stats.description.contains("pool_cpus_source \(stats.poolCPUSource)"))
    #expect(stats.prometheusText.contains("\nloopdispatch_pool_cpus \(stats.poolCPUs)\n"))
  }
}
