import CLoopShims
import Glibc
import MainLoop

/// A channel over a file descriptor that reads and writes whole buffers for the program: GCD's
/// `dispatch_io_t`.
///
/// A read hands its handler the bytes as they arrive, in ``Bytes`` values between the water
/// marks, then a last call with `done`; a write reports what is left to write, then `done`.
/// Errors arrive as `errno` values in the handler, with `done` (and, for a read, no bytes:
/// those read before the error come in the calls before it).
///
/// Where the work happens: sockets, pipes and terminals are made non-blocking for the
/// channel's life (their flags are restored at cleanup) and are read and written when the
/// I/O driver reports them ready (``ReadSource``, ``WriteSource``): no thread waits on them.
/// Regular files are read and written with `pread`/`pwrite` (or `read`/`write` on a stream
/// channel) by a pool worker.
///
/// Handlers: when the handler's queue is a serial queue with nothing queued or running, the
/// handler runs at once on the thread that moved the bytes, with that queue claimed as an
/// uncontended `sync` would (one hop less; fd sources do the same). It then holds the
/// descriptor's queue while it runs, as a handler running long holds its own queue: a handler
/// must not block until another operation on the same descriptor makes progress.
///
/// Order and lifetime (every channel and one-shot call on one descriptor shares one entry,
/// `DescriptorEntry`, and these rules hold across all of them):
/// - Operations start in submission order: reads one at a time, writes one at a time, a read
///   and a write at once, except that a STREAM channel's reads and writes of a regular file
///   run one at a time (they share its position); a barrier (``barrier(_:)``) waits for
///   everything before it on the descriptor and holds back everything after it.
/// - ``close(stop:)``: operations submitted afterwards fail with `ECANCELED`; with `stop`,
///   so do the ones not finished.
/// - The cleanup handler runs once no channel uses the descriptor: after this channel and
///   every other on the same descriptor (one made from it with
///   ``init(kind:sharing:queue:cleanup:)`` among them) is closed or released and their
///   operations' last handler calls have run, as in libdispatch; or soon after creation for
///   a channel that cannot be used (a bad descriptor, a missing path, a directory). A
///   channel made from a path opens the file at its first operation (non-blocking unless it
///   is a regular file) and closes it before the cleanup handler runs; so does a channel
///   made from a path channel, with a descriptor of its own.
///
/// ```swift
/// let channel = IOChannel(kind: .stream, fd: pipeReadEnd, cleanup: { _ in close(pipeReadEnd) })
/// channel.setLowWater(1)
/// channel.read(length: .max, queue: .main) { done, data, error in
///   print("got \(data.count) bytes")
///   if done { channel.close() }
/// }
/// ```
///
/// Thread-safety: every method may be called from any thread. The channel's state is touched
/// only on its descriptor entry's serial queue (`control`); the methods hop onto it.
public final class IOChannel: @unchecked Sendable {
  // @unchecked Sendable: the mutable state below is touched only by blocks running on
  // `control` (the entry's serial queue), which orders every access.

  /// How offsets are read.
  public enum Kind: Sendable {
    /// A stream (a pipe, a socket, a terminal, or a file read from its current position):
    /// offsets are ignored.
    case stream
    /// A file read at offsets relative to its position when the channel was made.
    case random
  }

  /// Called as a read progresses: `done` on the last call, `data` the bytes since the last
  /// call, `error` an `errno` value (0: none; with `done` and empty data at the end of the
  /// file). An error comes only on the last call, with no bytes: the bytes read before it
  /// arrive in earlier calls without `done`, as in libdispatch.
  public typealias ReadHandler = @Sendable (_ done: Bool, _ data: Bytes, _ error: Int32) -> Void
  /// Called as a write progresses: `done` on the last call, `remaining` the bytes not yet
  /// written, `error` an `errno` value (0: none).
  public typealias WriteHandler =
    @Sendable (_ done: Bool, _ remaining: Bytes, _ error: Int32) -> Void
  typealias Cleanup = (queue: Queue, handler: @Sendable (Int32) -> Void)

  /// Whether offsets count (``Kind/random``) or not (``Kind/stream``).
  public let kind: Kind
  /// The descriptor's entry, shared with every other channel on it (a channel that failed
  /// at creation has one of its own, with no descriptor).
  let entry: DescriptorEntry
  /// The entry's serial queue: every state change of the channel runs on it.
  var control: Queue { entry.queue }

  // MARK: State (only on `control`)

  /// The cleanup handler until the channel joins its entry (which then holds it) or gives up.
  private var cleanup: Cleanup?
  /// Why the channel cannot be used, from its creation (0: it can).
  private var failure: Int32 = 0
  /// The file position when the channel was made (random channels' offset 0).
  private var baseOffset: Int64 = 0
  /// Whether the channel holds a use of its entry (joined and not yet left).
  private var joined = false
  private var left = false
  private var closed = false
  /// Operations submitted and not yet ended (their last handler call run): the channel
  /// leaves its entry only when closed with none.
  private var inFlight = 0

  /// Water marks (``setLowWater(_:)``, ``setHighWater(_:)``). The low one defaults to one
  /// chunk, as libdispatch's: a read of a long stream hands over a megabyte at a time rather
  /// than holding everything until the end.
  private var lowWater: Int? = IOChannel.defaultLowWater
  static let defaultLowWater = 1 << 20
  private var highWater = Int.max
  private var interval: (nanoseconds: UInt64, strict: Bool)?

  // MARK: Creation

  /// The fields every channel sets the same way.
  private init(kind: Kind, entry: DescriptorEntry, cleanup: Cleanup?) {
    self.kind = kind
    self.entry = entry
    self.cleanup = cleanup
  }

  /// A channel over `fd`, which stays the caller's: the channel never closes it, and the
  /// caller may close it once `cleanup` has run.
  public convenience init(
    kind: Kind, fd: Int32, queue: Queue = .global(),
    cleanup: (@Sendable (_ error: Int32) -> Void)? = nil
  ) {
    let given = cleanup.map { (queue: queue, handler: $0) }
    let (found, error) = DescriptorEntry.join(fd: fd, cleanup: given) { mode in
      IOChannel.unusable(kind: kind, mode: mode)
    }
    guard let found else {
      // As libdispatch: a descriptor that is not open (EBADF), or of a type the channel
      // cannot use, fails every operation rather than the creation, and the channel gives
      // up at once: the cleanup handler is submitted now, with the error.
      self.init(kind: kind, entry: .detached(), cleanup: given)
      failure = error
      control.async { [self] in giveUp() }
      return
    }
    self.init(kind: kind, entry: found, cleanup: nil)
    joined = true
    if kind == .random { baseOffset = IOChannel.position(of: fd) }
  }

  /// A channel over the file at `path` (absolute), opened with `flags` and `mode` at the
  /// channel's first operation and closed by the channel. Nil for a relative path.
  public convenience init?(
    kind: Kind, path: String, flags: Int32, mode: mode_t = 0, queue: Queue = .global(),
    cleanup: (@Sendable (_ error: Int32) -> Void)? = nil
  ) {
    guard path.hasPrefix("/") else { return nil }
    self.init(
      kind: kind, entry: .forPath(path, flags: flags, mode: mode),
      cleanup: cleanup.map { (queue: queue, handler: $0) })
    // As libdispatch: the path is checked at creation (before any operation), the file
    // opened at the first operation.
    control.async { [self] in
      failure = checkPath(path, flags: flags)
      if failure == 0 { joinEntry() } else { giveUp() }
    }
  }

  /// A channel over the descriptor of `other`. If `other` was made from a path, the new
  /// channel opens the path itself (a descriptor of its own, closed by it); else it shares
  /// `other`'s descriptor and entry, which then ends (running `other`'s cleanup handler)
  /// only once this channel is done too. If `other` was closed before this call, the new
  /// channel is unusable: its operations and its cleanup handler get `ECANCELED`, as in
  /// libdispatch. A random channel's offset 0 is the descriptor's position now.
  public convenience init(
    kind: Kind, sharing other: IOChannel, queue: Queue = .global(),
    cleanup: (@Sendable (_ error: Int32) -> Void)? = nil
  ) {
    let given = cleanup.map { (queue: queue, handler: $0) }
    guard case .path(let path, let flags, let mode) = other.entry.origin else {
      // Same entry, same queue: `other`'s close, if called before this, is already queued
      // ahead of the block below; operations on this channel queue up behind it.
      self.init(kind: kind, entry: other.entry, cleanup: given)
      control.async { [self] in
        failure = adoptState(of: other)
        guard failure == 0 else { return giveUp() }
        if kind == .random { baseOffset = IOChannel.position(of: entry.fd) }
        joinEntry()
      }
      return
    }
    self.init(kind: kind, entry: .forPath(path, flags: flags, mode: mode), cleanup: given)
    // Asked in `other`'s queue order, so a close called before this counts and one called
    // after does not; `control` (this channel's own) stays suspended until then, so no
    // operation starts first.
    control.suspend()
    other.control.async { [self] in
      // Written off `control`, safe: it is suspended with nothing running, and its resume
      // publishes these writes to the blocks it runs next.
      failure = adoptState(of: other)
      entry.pathType = other.entry.pathType
      control.resume()
      control.async { [self] in
        if failure == 0 { joinEntry() } else { giveUp() }
      }
    }
  }

  /// Why a channel made from `other` cannot be used (on `other`'s queue): `other` closed
  /// (ECANCELED), failed at creation (its error), or of a type this kind cannot use.
  private func adoptState(of other: IOChannel) -> Int32 {
    if other.closed { return ECANCELED }
    if other.failure != 0 { return other.failure }
    guard case .descriptor = other.entry.origin else {
      return IOChannel.unusable(kind: kind, mode: other.entry.pathType)
    }
    var status = stat()
    guard fstat(other.entry.fd, &status) == 0 else { return EBADF }
    return IOChannel.unusable(kind: kind, mode: status.st_mode)
  }

  /// The file position of `fd` (0 where it has none).
  private static func position(of fd: Int32) -> Int64 {
    let position = lseek(fd, 0, SEEK_CUR)
    return position < 0 ? 0 : Int64(position)
  }

  /// Joins the entry with the cleanup handler (on `control`).
  private func joinEntry() {
    entry.join(cleanup: cleanup)
    cleanup = nil
    joined = true
  }

  /// A channel found unusable at creation gives up at once, as libdispatch's, which submits
  /// the cleanup handler then: operations still fail with the error, but no later than
  /// creation does the handler learn it.
  private func giveUp() {
    guard let cleanup else { return }
    self.cleanup = nil  // Run once; drop what it holds.
    let error = failure
    let handler = cleanup.handler
    cleanup.queue.async { handler(error) }
  }

  /// Why a channel of `kind` cannot use a file of type `mode`, as libdispatch's
  /// `_dispatch_io_validate_type`: no channel reads or writes a directory (EISDIR), and a
  /// random channel on a pipe, FIFO or socket cannot seek (ESPIPE). 0: it can.
  private static func unusable(kind: Kind, mode: mode_t) -> Int32 {
    let type = mode & S_IFMT
    if type == S_IFDIR { return EISDIR }
    if kind == .random && (type == S_IFIFO || type == S_IFSOCK) { return ESPIPE }
    return 0
  }

  /// A path channel's check at creation (on `control`), as libdispatch's: a file that is
  /// there must be of a type the channel can use; one that is not there is an error
  /// (stat's) unless `O_CREAT` may create it (its directory exists). Records the type for
  /// the open.
  private func checkPath(_ path: String, flags: Int32) -> Int32 {
    var status = stat()
    let found =
      flags & O_NOFOLLOW != 0 ? lstat(path, &status) == 0 : stat(path, &status) == 0
    guard found else {
      let error = errno
      if flags & O_CREAT != 0, !path.hasSuffix("/"),
        let slash = path.lastIndex(of: "/"),
        stat(String(path[..<slash]), &status) == 0
      {
        entry.pathType = S_IFREG
        return 0
      }
      return error
    }
    entry.pathType = status.st_mode & S_IFMT
    return IOChannel.unusable(kind: kind, mode: status.st_mode)
  }

  deinit {
    // Released with nothing in flight (operations hold the channel): the last chance to
    // leave the entry.
    if joined && !left { entry.leave() }
  }

  // MARK: Operations

  /// Reads `length` bytes (`Int.max` or a negative length: to the end of the file) at
  /// `offset` (random channels; ignored on streams), calling `handler` on `queue` as they
  /// arrive and once with `done`. A length of 0 is done at once (no bytes, no error), as in
  /// libdispatch.
  public func read(
    offset: Int64 = 0, length: Int, queue: Queue, handler: @escaping ReadHandler
  ) {
    read(offset: offset, length: length, endsWhenDrained: false, queue: queue, handler: handler)
  }

  /// `read(offset:length:queue:handler:)`, and with `endsWhenDrained` the one-shot read's
  /// rule (``IOOperation/endsWhenDrained``).
  func read(
    offset: Int64, length: Int, endsWhenDrained: Bool, queue: Queue,
    handler: @escaping ReadHandler
  ) {
    let operation = IOOperation(
      direction: .read(length: length < 0 ? Int.max : length), offset: offset, queue: queue,
      readHandler: handler, writeHandler: nil)
    operation.endsWhenDrained = endsWhenDrained
    submit(operation)
  }

  /// Writes `data` at `offset` (random channels; ignored on streams), calling `handler` on
  /// `queue` as it progresses and once with `done`. Empty data is done at once (no error), as
  /// in libdispatch.
  public func write(
    offset: Int64 = 0, data: Bytes, queue: Queue, handler: @escaping WriteHandler
  ) {
    let operation = IOOperation(
      direction: .write(data), offset: offset, queue: queue, readHandler: nil,
      writeHandler: handler)
    submit(operation)
  }

  /// Runs `body` once every operation submitted before it on the descriptor (on this channel
  /// or any other sharing it) has finished, before any submitted after it starts.
  public func barrier(_ body: @escaping @Sendable () -> Void) {
    submit(IOOperation(barrier: body))
  }

  /// Closes the channel: operations submitted afterwards fail with `ECANCELED`; with `stop`,
  /// the unfinished ones too (their handlers get `done` and `ECANCELED`).
  public func close(stop: Bool = false) {
    control.async { [self] in closeOnControl(stop: stop) }
  }

  /// `close(stop:)` from a block already running on `control` (a one-shot's own handler).
  func closeOnControl(stop: Bool = false) {
    closed = true
    if stop { entry.stop(self) }
    leaveIfDone()
  }

  /// Sets the low water mark of a channel no block has run for yet (a one-shot's, just
  /// made): the submission that follows publishes it to `control`.
  func presetLowWater(_ bytes: Int) {
    lowWater = bytes
    if highWater < bytes { highWater = bytes }
  }

  /// The descriptor, or -1 once the channel is closed, or while a path channel has not
  /// opened its file (or failed to). In a barrier, a path channel opens its file first, as
  /// libdispatch's `dispatch_io_get_descriptor`. Waits for the channel's queue.
  public var fileDescriptor: Int32 {
    // From a barrier (which runs on `control`, maybe inside other queues), read it in place.
    if control.isCurrent {
      if entry.inBarrier && !closed && failure == 0 { _ = entry.prepare() }
      return currentDescriptor
    }
    return control.sync { currentDescriptor }
  }

  /// `fileDescriptor`'s answer (on `control`).
  private var currentDescriptor: Int32 {
    closed || failure != 0 || entry.openFailure != 0 ? -1 : entry.fd
  }

  /// The fewest bytes a read hands its handler at a time (except its last call). A high
  /// water mark below it is raised to it (io.h; libdispatch's `dispatch_io_set_low_water`).
  public func setLowWater(_ bytes: Int) {
    control.async { [self] in
      let low = Swift.max(bytes, 0)
      if highWater < low { highWater = Swift.max(low, 1) }
      lowWater = low
    }
  }

  /// The most bytes a read hands its handler at a time. A low water mark above it is lowered
  /// to it (io.h; libdispatch's `dispatch_io_set_high_water`).
  public func setHighWater(_ bytes: Int) {
    control.async { [self] in
      let high = Swift.max(bytes, 0)
      if let lowWater, lowWater > high { self.lowWater = high }
      highWater = Swift.max(high, 1)
    }
  }

  /// Calls read handlers at least every `interval`. With `strict`, whatever arrived goes out
  /// at each tick, below the low water mark too; without, only what reached it (io.h's
  /// `DISPATCH_IO_STRICT_INTERVAL`, libdispatch's behaviour).
  public func setInterval(_ interval: Duration, strict: Bool = false) {
    let nanoseconds = UInt64(clamping: interval.saturatingNanoseconds)
    control.async { [self] in self.interval = (nanoseconds, strict) }
  }

  // MARK: Submission and leaving (on `control`)

  private func submit(_ operation: IOOperation) {
    control.async { [self] in
      if let target = operation.target { operation.queue = handlerQueue(for: target) }
      operation.channel = self
      operation.settings = IOOperation.Settings(
        kind: kind, base: baseOffset, lowWater: lowWater, highWater: highWater,
        interval: interval)
      inFlight += 1
      // As libdispatch: on a closed channel reads and writes fail with ECANCELED, on one
      // unusable from creation with its error; a barrier still waits its turn.
      if !operation.isBarrier {
        let error = closed ? ECANCELED : failure
        if error != 0 {
          entry.fail(operation, error)
          return
        }
        // A read of no bytes, or a write of none, is done at once (no data, no error),
        // without waiting its turn; on a stream it would otherwise wait for readiness it
        // has no use for and hold back every later operation.
        if operation.isEmptyTransfer {
          entry.fail(operation, 0)
          return
        }
      }
      entry.enqueue(operation)
    }
  }

  /// An operation of this channel has ended and its last handler call has run (on
  /// `control`).
  func operationEnded() {
    inFlight -= 1
    leaveIfDone()
  }

  /// A closed channel with nothing in flight gives its use of the entry back, once.
  private func leaveIfDone() {
    guard closed, joined, !left, inFlight == 0 else { return }
    left = true
    entry.leave()
  }

  /// Serial queues made for handlers on concurrent queues, one per such queue (each keeps
  /// its target alive, so a key never names a freed queue).
  private var handlerQueues: [ObjectIdentifier: Queue] = [:]

  /// A serial queue on which handlers for `target` run in order: `target` itself when it is
  /// serial (or the main queue), else one made once per channel and target (also for a
  /// serial queue on which `setWidth` was called: `Queue+Wide.swift`).
  private func handlerQueue(for target: Queue) -> Queue {
    switch target.kind {
    case .serial where !target.widthRequested, .main: return target
    case .root, .concurrent, .serial:
      if let made = handlerQueues[ObjectIdentifier(target)] { return made }
      let made = Queue(label: "io.handler", target: target)
      made.namesThreads = false
      handlerQueues[ObjectIdentifier(target)] = made
      return made
    }
  }
}
