import Glibc
import LoopDispatch
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

// Small helpers shared by the seed programs: a log line that says where it runs, counters
// built on `Synchronization`, a lock (a pthread mutex, which ThreadSanitizer understands:
// it cannot see `Synchronization.Mutex`'s futex, and `make test` runs the demos under it), a rendezvous to force an interleaving, and plain
// POSIX threads for the one demo (`once`) that needs real threads racing.

/// When the program started (first touched by `main.swift`); lines show the time since then.
let programStart = Deadline.now

/// Held while a line is stamped and printed, so that lines appear in time order. (The value
/// is unused; it is not `Void` because a zero-sized value shares its address with the mutex,
/// which ThreadSanitizer's access checks then report as a race.)
private let outputLock = LockedValue<Int>(0)

/// Prints `text` with the time, the queue the calling thread is running work for
/// (`Queue.current?.label`) and the thread's name (`ld.worker.N` for a pool worker; the
/// queue's label once a worker has drained it for a tick or more):
/// `[+  1.234 ms] [store @ ld.worker.1] read a=1 (2 readers inside)`.
///
/// Thread-safety: any thread; each line is printed whole.
func say(_ text: String) {
  let thread = EventLoop.main.isInLoopThread ? "main thread" : currentThreadName()
  let place = Queue.current.map { "\($0.label) @ \(thread)" } ?? thread
  outputLock.withLock { _ in
    let micros = max(0, (Deadline.now - programStart).saturatingNanoseconds / 1_000)
    let millis = String(micros / 1_000)
    let time = String(repeating: " ", count: max(0, 4 - millis.count)) + millis
    let fraction = String(micros % 1_000)
    let stamp = "+\(time).\(String(repeating: "0", count: 3 - fraction.count))\(fraction) ms"
    print("[\(stamp)] [\(place)] \(text)")
  }
}

/// The calling thread's name as the kernel knows it: `ld.worker.N` for a pool worker, or the
/// label of the custom queue it has been draining for a tick or more.
func currentThreadName() -> String {
  let fd = open("/proc/thread-self/comm", O_RDONLY)
  guard fd >= 0 else { return "thread" }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: 32)
  let count = read(fd, &buffer, buffer.count)
  guard count > 0 else { return "thread" }
  return String(decoding: buffer[..<count], as: UTF8.self).trimmingNewlines
}

/// Names the calling thread (at most 15 bytes), as shown by `say` and by `top -H`.
func setCurrentThreadName(_ name: String) {
  let fd = open("/proc/thread-self/comm", O_WRONLY)
  guard fd >= 0 else { return }
  _ = name.withCString { write(fd, $0, min(strlen($0), 15)) }
  close(fd)
}

/// Flushes standard output, so that lines printed so far come before whatever a trap or a
/// child process writes next.
func flushOutput() {
  fflush(nil)  // nil: every output stream
}

/// An integer shared between threads.
final class AtomicCounter: Sendable {
  private let storage = Atomic<Int>(0)

  /// Adds one and returns the new value.
  @discardableResult
  func increment() -> Int {
    storage.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
  }

  /// The current value.
  var value: Int { storage.load(ordering: .sequentiallyConsistent) }
}

/// A flag set once, from any thread.
final class AtomicFlag: Sendable {
  private let storage = Atomic<Bool>(false)
  func set() { storage.store(true, ordering: .sequentiallyConsistent) }
  var isSet: Bool { storage.load(ordering: .sequentiallyConsistent) }
}

/// A value behind a mutex, shared between threads.
final class Guarded<Value: Sendable>: Sendable {
  private let mutex: LockedValue<Value>
  init(_ value: Value) { mutex = LockedValue(value) }
  func withLock<T: Sendable>(_ body: (inout Value) -> T) -> T {
    mutex.withLock { body(&$0) }
  }
  var value: Value { mutex.withLock { $0 } }
}

/// Holds each of `parties` threads until all of them have arrived.
///
/// The demos use it to *force* an interleaving (two readers inside the store at the same
/// time, every racer past the check) instead of hoping the scheduler produces it: showing
/// concurrency with sleeps proves nothing on a busy machine.
final class Rendezvous: Sendable {
  private let parties: Int
  private let arrived = Atomic<Int>(0)
  private let released = Semaphore(value: 0)

  init(parties: Int) { self.parties = parties }

  /// Waits until all parties have arrived. Returns `false` if that took longer than
  /// `timeout` (the interleaving could not happen: a demo reports it and fails).
  @discardableResult
  func arriveAndWait(timeout: Duration = .seconds(10)) -> Bool {
    // Sequentially consistent: the last arrival must see every earlier one.
    if arrived.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue == parties {
      for _ in 1..<parties { released.signal() }
      return true
    }
    return released.wait(timeout: timeout) == .success
  }
}

/// Runs `body(0) … body(count - 1)` on `count` new POSIX threads named `prefix.N`, all
/// released at the same moment, and returns when all have finished.
///
/// The demos use plain threads for their *clients* (racers, readers): pool workers would not
/// do, since there is one per CPU, so eight racers might run one after another, and a worker
/// blocked in `sync` is a worker taken from the queues' own work.
func runOnNewThreads(_ count: Int, named prefix: String, _ body: @escaping @Sendable (Int) -> Void)
{
  let ready = Semaphore(value: 0)
  let go = Semaphore(value: 0)
  let threads = (0..<count).map { index in
    startThread {
      setCurrentThreadName("\(prefix).\(index)")
      ready.signal()
      go.wait()
      body(index)
    }
  }
  for _ in 0..<count { ready.wait() }
  for _ in 0..<count { go.signal() }
  for thread in threads { pthread_join(thread, nil) }
}

/// Starts a POSIX thread running `body`.
private func startThread(_ body: @escaping @Sendable () -> Void) -> pthread_t {
  final class Body {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
  }
  // Unmanaged: the new thread takes over this +1 reference and releases it.
  let context = Unmanaged.passRetained(Body(body)).toOpaque()
  var thread = pthread_t()
  let status = pthread_create(
    &thread, nil,
    { raw in
      Unmanaged<Body>.fromOpaque(raw!).takeRetainedValue().run()
      return nil
    }, context)
  if status != 0 {
    writeError("Examples: pthread_create failed (\(status))\n")
    exit(1)
  }
  return thread
}
