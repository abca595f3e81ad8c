import Glibc
import Testing

/// Every interleaving of the pool's wake-up protocol for three workers, two lanes, two
/// submitters (one off the pool, one a pool job that blocks in the kernel) and four jobs
/// (`PoolProtocolModel.swift`), explored state by state (each state once).
///
/// Checked in every state: at most `maximumSearchers` workers spin; a worker asleep on a
/// word of 1 whose bit was claimed has a waker on its way (`unpark` pending), so no claimed
/// wake is lost. Checked where no thread can move: every job has run. A state with a job
/// queued while every worker is parked or blocked in the kernel and the supervisor sleeps is
/// such a state, and fails the check: the job is stranded.
///
/// The search starts from a quiet pool (every worker parked, the supervisor asleep), where the
/// stranding of issue 30 begins. Not run under the sanitizers: the model is single-threaded
/// plain values, and instrumented it takes minutes.
@Suite(.enabled(if: !runningUnderSanitizer, "pure single-threaded code: nothing to sanitize"))
struct PoolProtocolModelTests {
  @Test func theFixedProtocolNeverStrandsAJob() {
    let result = ModelExplorer(model: PoolModel(protocolVersion: .fixed)).explore()
    #expect(result.violation == nil, "\(result.violation ?? "") after \(result.states) states")
    // The whole space was searched (6,198,261 states when this was written): a model that
    // lost its interleavings would search far fewer.
    #expect(result.states > 5_000_000, "only \(result.states) states")
  }

  /// The checker has teeth: the protocol before issue 30's fix strands J1 (S's worker blocked
  /// with J1 in its local queue, the spinner that took J2 blocked too, W2 parked, the
  /// supervisor asleep), and the trace it prints is the issue's scenario.
  @Test func theOriginalProtocolStrandsAJob() {
    let result = ModelExplorer(model: PoolModel(protocolVersion: .original)).explore()
    let violation = result.violation ?? "none"
    #expect(violation.hasPrefix("stranded: W0.local[1] = J1;"), "\(violation)")
  }

  /// Rule 4 is needed too: with the wake passed on only after a spin, a worker that gives up
  /// its spin after the submissions saw it, then finds work in its park's re-check, takes J2
  /// and strands J1 the same way.
  @Test func passingOnOnlyAfterSpinsStillStrandsAJob() {
    let result = ModelExplorer(model: PoolModel(protocolVersion: .fixedOnlyAfterSpins)).explore()
    let violation = result.violation ?? "none"
    #expect(violation.hasPrefix("stranded: W0.local[1] = J1;"), "\(violation)")
  }

  /// Deferred wake-ups (`WorkerPool+DeferredWake.swift`): the submitter off the pool may leave
  /// any of its wake-ups to the supervisor, which it tells; no job is stranded, whichever it
  /// defers. (The model's tick wakes a parked worker whenever work waits, a little more than
  /// the code, which waits for a tick with no job started: the supervisor's help is what
  /// rule 3 rests on, and the model checks that it is always asked for.)
  @Test func deferredWakesLeftToTheSupervisorStrandNothing() {
    let result = ModelExplorer(model: PoolModel(protocolVersion: .fixedDeferring)).explore()
    #expect(result.violation == nil, "\(result.violation ?? "") after \(result.states) states")
    #expect(result.states > 5_000_000, "only \(result.states) states")
  }

  /// A deferral that does not tell the supervisor strands a job (E never blocks, so it never
  /// pays).
  @Test func aDeferralThatTellsNobodyStrandsAJob() {
    let model = PoolModel(protocolVersion: .fixedDeferringSilently)
    let violation = ModelExplorer(model: model).explore().violation ?? "none"
    #expect(violation.hasPrefix("stranded"), "\(violation)")
  }

  /// A waker that claims a bit and never delivers the wake is caught.
  @Test func aClaimedWakeThatIsNeverDeliveredIsFound() {
    let result = ModelExplorer(model: PoolModel(protocolVersion: .fixedWithoutUnpark)).explore()
    let violation = result.violation ?? "none"
    #expect(violation.contains("claimed wake-up was lost"), "\(violation)")
  }

  /// Without the `maximumSearchers` gate two workers spin at once, and that is caught.
  @Test func twoSpinnersAreFound() {
    let model = PoolModel(protocolVersion: .fixedWithoutSearcherLimit)
    let violation = ModelExplorer(model: model).explore().violation ?? "none"
    #expect(violation.hasPrefix("2 workers spin at once"), "\(violation)")
  }
}

/// Whether AddressSanitizer or ThreadSanitizer is in the process.
let runningUnderSanitizer = dlsym(nil, "__asan_init") != nil || dlsym(nil, "__tsan_init") != nil

/// A depth-first search over the model's states, with the path to the first violation.
struct ModelExplorer {
  let model: PoolModel
  /// A bound on the search: a model that grows past it fails instead of running for hours.
  var stateLimit = 20_000_000

  struct Result {
    var states = 0
    /// What went wrong and the steps that led there, or nil.
    var violation: String?
  }

  private struct Frame {
    var state: ModelState
    var successors: [(thread: Int, state: ModelState)]
    var next = 0
  }

  func explore() -> Result {
    var result = Result()
    var seen: Set<ModelState> = []
    let initial = model.initialState
    seen.insert(initial)
    var stack: [Frame] = []
    if let problem = check(initial) { return Result(states: 1, violation: problem) }
    stack.append(Frame(state: initial, successors: successors(of: initial)))
    while !stack.isEmpty {
      let top = stack.count - 1
      if stack[top].successors.isEmpty && !stack[top].state.allDone {
        result.violation = "stranded: " + describe(stack[top].state) + "\n" + trace(stack)
        break
      }
      guard stack[top].next < stack[top].successors.count else {
        stack.removeLast()
        continue
      }
      let (_, state) = stack[top].successors[stack[top].next]
      stack[top].next += 1
      guard seen.insert(state).inserted else { continue }
      if seen.count > stateLimit {
        result.violation = "more than \(stateLimit) states: the model grew"
        break
      }
      if let problem = check(state) {
        result.violation = problem + ": " + describe(state) + "\n" + trace(stack)
        break
      }
      stack.append(Frame(state: state, successors: successors(of: state)))
    }
    result.states = seen.count
    return result
  }

  private func successors(of state: ModelState) -> [(thread: Int, state: ModelState)] {
    var all: [(thread: Int, state: ModelState)] = []
    for thread in 0..<PoolModel.threads {
      for next in model.steps(of: thread, from: state) { all.append((thread, next)) }
    }
    return all
  }

  /// The invariants that hold in every state.
  private func check(_ state: ModelState) -> String? {
    let spinning = (0..<PoolModel.workers).filter { model.isSpinning(state, $0) }.count
    if spinning > PoolModel.maximumSearchers { return "\(spinning) workers spin at once" }
    for worker in 0..<PoolModel.workers
    where state.pc(worker) == ModelPC.sleep.rawValue && state.parkWord(worker) == 1
      && !state.idle(worker)
    {
      let waker = (0..<PoolModel.threads).contains {
        state.pc($0) == ModelPC.unpark.rawValue && state.arg($0) == worker
      }
      if !waker { return "worker \(worker)'s claimed wake-up was lost" }
    }
    return nil
  }

  private static let threadNames = ["W0", "W1", "W2", "E", "supervisor"]
  private static let jobNames = ["S", "J1", "J2", "J3"]

  /// The steps from the initial state to the top of `stack`, one line each.
  private func trace(_ stack: [Frame]) -> String {
    var lines: [String] = []
    for index in 1..<stack.count {
      let from = stack[index - 1]
      let (thread, _) = from.successors[from.next - 1]
      let pc = ModelPC(rawValue: from.state.pc(thread))!
      lines.append("\(Self.threadNames[thread]): \(pc)")
    }
    return lines.joined(separator: "\n")
  }

  private func describe(_ state: ModelState) -> String {
    var parts: [String] = []
    for queue in 0..<ModelState.queueCount where !state.isEmpty(queue) {
      let jobs = (0..<ModelState.slots).compactMap { state.job(in: queue, slot: $0) }
        .map { Self.jobNames[Int($0)] }
      let name =
        queue < 2
        ? "injection[\(queue)]" : "W\((queue - 2) / PoolModel.lanes).local[\((queue - 2) % 2)]"
      parts.append("\(name) = \(jobs.joined(separator: ","))")
    }
    for thread in 0..<PoolModel.threads {
      let pc = ModelPC(rawValue: state.pc(thread))!
      let job = state.job(thread)
      let isRunning = thread < PoolModel.workers && job < 4
      let running = isRunning ? " running \(Self.jobNames[Int(job)])" : ""
      parts.append("\(Self.threadNames[thread]) at \(pc)\(running)")
    }
    parts.append("searching \(state.searching), supervisor word \(state.supervisorWord)")
    return parts.joined(separator: "; ")
  }
}
