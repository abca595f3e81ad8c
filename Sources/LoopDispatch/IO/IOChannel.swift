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
/// Order and lifetime:
/// - Operations start in submission order: reads one at a time, writes one at a time, a read
///   and a write at once; a barrier (``barrier(_:)``) waits for everything before it and
///   holds back everything after it.
/// - ``close(stop:)``: operations submitted afterwards fail with `ECANCELED`; with `stop`,
///   so do the ones not finished.
/// - The cleanup handler runs once, when the channel no longer uses the descriptor: after it
///   is closed (or released) and its last operation has finished, or soon after creation
///   for a channel that cannot be used (a bad descriptor, a missing path, a directory). A
///   channel made from a path opens the file at its first operation and closes it before
///   the cleanup handler runs.
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
/// only on its private serial queue (`control`); the methods hop onto it.
public final class IOChannel: @unchecked Sendable {
  // @unchecked Sendable: the mutable state below is touched only by blocks running on
  // `control` (a serial queue), which orders every access.

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

  /// Whether offsets count (``Kind/random``) or not (``Kind/stream``).
  public let kind: Kind
  /// The channel's own serial queue: every state change runs on it.
  let control: Queue
  private let cleanupQueue: Queue
  private var cleanupHandler: (@Sendable (Int32) -> Void)?
  /// The error the cleanup handler reports: the failure that made the channel unusable, or
  /// 0. (`failure` itself becomes ECANCELED once the descriptor is given back.)
  private var cleanupError: Int32 = 0

  // MARK: State (only on `control`)

  /// Where the descriptor comes from.
  private enum Origin {
    case descriptor(Int32)
    case path(String, flags: Int32, mode: mode_t)
    case channel(IOChannel)
  }
  private let origin: Origin
  /// The descriptor once known (-1 before a path is opened).
  private var fd: Int32 = -1
  /// Whether `fd` was checked (fstat) and prepared.
  private var prepared = false
  /// A regular file (or block device): I/O on a pool worker, not through readiness.
  private var isFile = false
  private var isSocket = false
  /// Whether this channel holds a use of the descriptor's O_NONBLOCK (`DescriptorFlags`).
  private var holdsNonBlocking = false
  /// The file position when the channel was made (random channels' offset 0).
  private var baseOffset: off_t = 0
  /// The first error that makes the channel unusable (a bad descriptor, a failed open).
  private var failure: Int32 = 0
  private var closed = false
  private var cleanedUp = false

  private var waiting: [IOOperation] = []
  /// Finished operations whose last handler call has not run yet: barriers and the cleanup
  /// wait for them, so they come after every handler of the operations before them.
  private var undelivered = 0
  private var activeRead: IOOperation?
  private var activeWrite: IOOperation?

  /// Water marks (``setLowWater(_:)``, ``setHighWater(_:)``). The low one defaults to one
  /// chunk, as libdispatch's: a read of a long stream hands over a megabyte at a time rather
  /// than holding everything until the end.
  private var lowWater: Int? = IOChannel.defaultLowWater
  static let defaultLowWater = 1 << 20
  private var highWater = Int.max
  private var interval: (nanoseconds: UInt64, strict: Bool)?

  // MARK: Creation

  /// The fields every channel sets the same way.
  private init(
    kind: Kind, origin: Origin, queue: Queue, cleanup: (@Sendable (Int32) -> Void)?
  ) {
    self.kind = kind
    self.origin = origin
    control = IOChannel.makeControlQueue()
    cleanupQueue = queue
    cleanupHandler = cleanup
  }

  /// A channel over `fd`, which stays the caller's: the channel never closes it, and the
  /// caller may close it once `cleanup` has run.
  public convenience init(
    kind: Kind, fd: Int32, queue: Queue = .global(),
    cleanup: (@Sendable (_ error: Int32) -> Void)? = nil
  ) {
    self.init(kind: kind, origin: .descriptor(fd), queue: queue, cleanup: cleanup)
    self.fd = fd
    // As libdispatch: a descriptor that is not open (EBADF), or of a type the channel cannot
    // use, fails every operation rather than the creation, and the channel gives it up at
    // once: the cleanup handler is submitted now, with the error.
    var status = stat()
    failure =
      fd < 0 || fstat(fd, &status) != 0
      ? EBADF : IOChannel.unusable(kind: kind, mode: status.st_mode)
    if failure != 0 {
      control.async { [self] in giveUpIfUnusable() }
      return
    }
    if kind == .random {
      baseOffset = lseek(fd, 0, SEEK_CUR)
      if baseOffset < 0 { baseOffset = 0 }
    }
  }

  /// A channel over the file at `path` (absolute), opened with `flags` and `mode` at the
  /// channel's first operation and closed by the channel. Nil for a relative path.
  public convenience init?(
    kind: Kind, path: String, flags: Int32, mode: mode_t = 0, queue: Queue = .global(),
    cleanup: (@Sendable (_ error: Int32) -> Void)? = nil
  ) {
    guard path.hasPrefix("/") else { return nil }
    self.init(
      kind: kind, origin: .path(path, flags: flags, mode: mode), queue: queue, cleanup: cleanup)
    // As libdispatch: the path is checked at creation (before any operation), the file
    // opened at the first operation.
    control.async { [self] in
      checkPath(path, flags: flags)
      giveUpIfUnusable()
    }
  }

  /// A channel found unusable at creation gives up at once, as libdispatch's, which submits
  /// the cleanup handler then: operations still fail with the error, but no later than
  /// creation does the handler learn it.
  private func giveUpIfUnusable() {
    if failure != 0 && !cleanedUp { finishCleanup() }
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
  /// (stat's) unless `O_CREAT` may create it (its directory exists).
  private func checkPath(_ path: String, flags: Int32) {
    var status = stat()
    let found =
      flags & O_NOFOLLOW != 0 ? lstat(path, &status) == 0 : stat(path, &status) == 0
    guard failure == 0 else { return }
    guard found else {
      let error = errno
      if flags & O_CREAT != 0, !path.hasSuffix("/"),
        let slash = path.lastIndex(of: "/"),
        stat(String(path[..<slash]), &status) == 0
      {
        return
      }
      failure = error
      return
    }
    failure = IOChannel.unusable(kind: kind, mode: status.st_mode)
  }

  /// A channel over the descriptor of `other` (which keeps it: the new channel never closes
  /// it). If `other` was closed before this call, the new channel is unusable: its
  /// operations and its cleanup handler get `ECANCELED`, as in libdispatch.
  public convenience init(
    kind: Kind, sharing other: IOChannel, queue: Queue = .global(),
    cleanup: (@Sendable (_ error: Int32) -> Void)? = nil
  ) {
    self.init(kind: kind, origin: .channel(other), queue: queue, cleanup: cleanup)
    // As libdispatch: the other channel is asked in its queue's order, so a close called
    // before this counts and one called after does not. Closed: this one is unusable from
    // creation, with ECANCELED; else it takes the descriptor now. `control` stays suspended
    // until then, so no operation starts first.
    control.suspend()
    other.control.async { [self] in
      // Written off `control`, safe: it is suspended with nothing running, and its resume
      // publishes these writes to the blocks it runs next.
      if other.closed {
        failure = ECANCELED
      } else {
        other.prepare()
        (fd, baseOffset) = (other.failure == 0 ? other.fd : -1, other.baseOffset)
        if fd < 0 { failure = EBADF }
      }
      giveUpIfUnusable()
      control.resume()
    }
  }

  deinit {
    // Released with nothing in flight (operations hold the channel): the last chance to give
    // the descriptor back.
    if !cleanedUp { finishCleanup() }
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
  private func read(
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

  /// Runs `body` once every operation submitted before it has finished, before any submitted
  /// after it starts.
  public func barrier(_ body: @escaping @Sendable () -> Void) {
    submit(IOOperation(barrier: body))
  }

  /// Closes the channel: operations submitted afterwards fail with `ECANCELED`; with `stop`,
  /// the unfinished ones too (their handlers get `done` and `ECANCELED`).
  public func close(stop: Bool = false) {
    control.async { [self] in
      closed = true
      if stop {
        // The running operations end first (they were submitted first), then the waiting
        // ones in order; barriers among them still run, in their turn. Only barriers are
        // left waiting, and none can start while the ended operations' handlers are
        // undelivered, so the `startWhatMay` inside `finish` starts nothing early.
        let cancelled = waiting.filter { !$0.isBarrier }
        waiting.removeAll { !$0.isBarrier }
        if let read = activeRead { finish(read, error: ECANCELED) }
        if let write = activeWrite { finish(write, error: ECANCELED) }
        for operation in cancelled { fail(operation, ECANCELED) }
      }
      startWhatMay()
    }
  }

  /// The descriptor, or -1 while a path channel has not opened its file (or failed to).
  /// Waits for the channel's queue.
  public var fileDescriptor: Int32 {
    // From a barrier (which runs on `control`, maybe inside other queues), read it in place.
    if control.isCurrent { return failure == 0 ? fd : -1 }
    return control.sync { failure == 0 ? fd : -1 }
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

  /// Calls read handlers with what arrived at least every `interval`, whatever the low
  /// water mark (`strict`: exactly at that interval).
  public func setInterval(_ interval: Duration, strict: Bool = false) {
    let nanoseconds = UInt64(clamping: interval.saturatingNanoseconds)
    control.async { [self] in self.interval = (nanoseconds, strict) }
  }

  // MARK: One-shot reads and writes (`dispatch_read`, `dispatch_write`)

  /// Reads up to `length` bytes (`Int.max`: to the end of the file) from `fd` at its current
  /// position and calls `handler` once on `queue` with them, or with what arrived before an
  /// error and the error's `errno`. A file is read to `length` or its end; a stream (a pipe,
  /// a socket) until `length`, its end, or, as libdispatch's `dispatch_read`, the first time
  /// a read finds nothing more after some bytes arrived: what is there now, not a full
  /// `length`. The handler runs after the channel has given the descriptor back (its flags
  /// restored), so it may close it.
  public static func read(
    from fd: Int32, length: Int, queue: Queue,
    handler: @escaping @Sendable (_ data: Bytes, _ error: Int32) -> Void
  ) {
    let (channel, outcome) = oneShot(fd: fd, queue: queue, handler: handler)
    channel.setLowWater(Int.max)
    channel.read(
      offset: 0, length: length, endsWhenDrained: true, queue: channel.control
    ) { done, data, error in
      // One call at a time, in order (the operation's handler queue is serial).
      outcome.collect(data)
      guard done else { return }
      outcome.arrive(error: error)
      channel.close()
    }
  }

  /// Writes `data` to `fd` and calls `handler` once on `queue` with what could not be
  /// written (empty when all was) and the error's `errno` (0: none), after the channel has
  /// given the descriptor back.
  public static func write(
    to fd: Int32, data: Bytes, queue: Queue,
    handler: @escaping @Sendable (_ remaining: Bytes, _ error: Int32) -> Void
  ) {
    let (channel, outcome) = oneShot(fd: fd, queue: queue, handler: handler)
    channel.write(data: data, queue: channel.control) { done, remaining, error in
      guard done else { return }
      outcome.collect(remaining)
      outcome.arrive(error: error)
      channel.close()
    }
  }

  /// A stream channel for one read or write, and the outcome that calls `handler` on `queue`
  /// once both the operation has ended and the channel has given the descriptor back.
  private static func oneShot(
    fd: Int32, queue: Queue, handler: @escaping @Sendable (Bytes, Int32) -> Void
  ) -> (IOChannel, OneShotOutcome) {
    let outcome = OneShotOutcome { bytes, error in queue.async { handler(bytes, error) } }
    let channel = IOChannel(kind: .stream, fd: fd, queue: queue) { cleanupError in
      outcome.arrive(cleanupError: cleanupError)
    }
    return (channel, outcome)
  }

  // MARK: The engine (on `control`)

  private func submit(_ operation: IOOperation) {
    control.async { [self] in
      if let target = operation.target { operation.queue = handlerQueue(for: target) }
      // On a closed channel reads and writes fail; a barrier still waits its turn.
      if closed, !operation.isBarrier {
        fail(operation, ECANCELED)
        return
      }
      // As libdispatch: a read of no bytes, or a write of none, is done at once (no data, no
      // error), without waiting its turn; on a stream it would otherwise wait for readiness
      // it has no use for and hold back every later operation.
      if operation.isEmptyTransfer, failure == 0 {
        fail(operation, 0)
        return
      }
      waiting.append(operation)
      startWhatMay()
    }
  }

  /// A channel's own queue: it does not rename the workers that drain it.
  private static func makeControlQueue() -> Queue {
    let queue = Queue(label: "io.channel")
    queue.namesThreads = false
    return queue
  }

  /// Serial queues made for handlers on concurrent queues, one per such queue (each keeps
  /// its target alive, so a key never names a freed queue).
  private var handlerQueues: [ObjectIdentifier: Queue] = [:]

  /// A serial queue on which handlers for `target` run in order: `target` itself when it is
  /// serial (or the main queue), else one made once per channel and target.
  private func handlerQueue(for target: Queue) -> Queue {
    switch target.kind {
    case .serial, .main: return target
    case .root, .concurrent:
      if let made = handlerQueues[ObjectIdentifier(target)] { return made }
      let made = Queue(label: "io.handler", target: target)
      made.namesThreads = false
      handlerQueues[ObjectIdentifier(target)] = made
      return made
    }
  }

  /// Whether `startWhatMay` is running (an operation that finishes at once calls it again
  /// from inside it: the outer call goes round again instead of recursing).
  private var starting = false
  private var startAgain = false

  /// Starts the waiting operations in order while each may start. Never recursive: a call
  /// from inside one (an operation that finished at once) makes the outer one loop again.
  private func startWhatMay() {
    if starting {
      startAgain = true
      return
    }
    starting = true
    repeat {
      startAgain = false
      startWaiting()
    } while startAgain
    starting = false
    cleanUpIfDone()
  }

  private func startWaiting() {
    while let next = waiting.first {
      switch next.direction {
      case .barrier(let body):
        guard activeRead == nil && activeWrite == nil && undelivered == 0 else { return }
        waiting.removeFirst()
        body()
      case .read:
        guard activeRead == nil else { return }
        waiting.removeFirst()
        activeRead = next
        start(next)
      case .write:
        guard activeWrite == nil else { return }
        waiting.removeFirst()
        activeWrite = next
        start(next)
      }
    }
  }

  /// Opens and checks the descriptor once, before the first operation.
  private func prepare() {
    guard !prepared else { return }
    prepared = true
    guard failure == 0 else { return }  // Found unusable at creation.
    switch origin {
    case .descriptor:
      break
    case .path(let path, let flags, let mode):
      let opened = open(path, flags | O_CLOEXEC, mode)
      if opened < 0 {
        failure = errno
        return
      }
      fd = opened
    case .channel:
      // The other channel's descriptor (and, for a random channel, its starting position)
      // was taken at creation.
      break
    }
    guard failure == 0 else { return }
    var status = stat()
    guard fstat(fd, &status) == 0 else {
      failure = errno
      return
    }
    let type = status.st_mode & S_IFMT
    isSocket = type == S_IFSOCK
    // Regular files and block devices, and character devices epoll refuses (/dev/null,
    // /dev/zero: EPERM), are read and written with blocking calls on a pool worker; a
    // readiness source on them would never fire.
    isFile = type == S_IFREG || type == S_IFBLK || (type == S_IFCHR && !isPollable(fd))
    if kind == .random, case .path = origin { baseOffset = 0 }
  }

  /// Whether epoll accepts `fd` (a scratch epoll set, once per channel).
  private func isPollable(_ fd: Int32) -> Bool {
    let scratch = cls_epoll_create()
    guard scratch >= 0 else { return true }
    defer { _ = Glibc.close(scratch) }
    return cls_epoll_control(scratch, cls_epoll_ctl_add, fd, cls_epollin, 0) == 0
  }

  private func start(_ operation: IOOperation) {
    prepare()
    // A descriptor that could not be had (a failed open): given up at once, as libdispatch
    // does, before the operation's failure is reported.
    if failure != 0 && !cleanedUp { finishCleanup() }
    if failure != 0 {
      finish(operation, error: failure)
      return
    }
    if isFile {
      runOnFile(operation)
    } else {
      runOnStream(operation)
    }
  }

  // MARK: Regular files: a pool worker, blocking calls

  /// One chunk of a file operation per turn of `control`, so a long transfer does not hold
  /// the channel: `close(stop:)`, barriers' bookkeeping and the other direction get their
  /// turns between chunks.
  private func runOnFile(_ operation: IOOperation) {
    guard !operation.finished else { return }
    if operation.filePosition < 0 {
      operation.filePosition = Int64(baseOffset) + operation.offset
    }
    let chunk = 1 << 20
    switch operation.direction {
    case .read(let length):
      let want = Swift.min(chunk, length - operation.transferred)
      let position = off_t(operation.filePosition)
      let got = readChunk(operation, want: want, length: length) { base, count in
        kind == .random ? pread(fd, base, count, position) : Glibc.read(fd, base, count)
      }
      operation.filePosition += Int64(got)
    case .write:
      var wrote = 0
      var error: Int32 = 0
      let position = off_t(operation.filePosition)
      _ = operation.pending.forEachRegion { _, region in
        repeat {
          wrote =
            kind == .random
            ? pwrite(fd, region.baseAddress, region.count, position)
            : Glibc.write(fd, region.baseAddress, region.count)
        } while wrote < 0 && errno == EINTR
        if wrote < 0 { error = errno }
        return false  // One region per turn.
      }
      if error != 0 {
        finish(operation, error: error)
        return
      }
      operation.filePosition += Int64(wrote)
      didWrite(wrote, by: operation)
    case .barrier:
      return
    }
    if !operation.finished {
      control.async { [self] in runOnFile(operation) }
    }
  }

  // MARK: Streams: non-blocking, on readiness

  private func runOnStream(_ operation: IOOperation) {
    if !holdsNonBlocking { holdsNonBlocking = DescriptorFlags.acquire(fd) }
    // Try at once: a write usually goes out and a read often finds its bytes, with no
    // readiness source to make (and no trip through the I/O driver).
    switch operation.direction {
    case .read(let length): readReady(operation, length: length)
    case .write: writeReady(operation)
    case .barrier: return
    }
    if operation.finished { return }
    let source: Source
    do {
      switch operation.direction {
      case .read: source = try ReadSource(fd: fd, queue: control, label: "io.channel.read")
      case .write: source = try WriteSource(fd: fd, queue: control, label: "io.channel.write")
      case .barrier: return
      }
    } catch {
      finish(operation, error: EBADF)
      return
    }
    operation.source = source
    source.setEventHandler { [self] in
      switch operation.direction {
      case .read(let length): readReady(operation, length: length)
      case .write: writeReady(operation)
      case .barrier: break
      }
    }
    if let interval, case .read = operation.direction {
      let timer = TimerSource(queue: control, label: "io.channel.interval")
      let every = Duration.nanoseconds(Int64(clamping: interval.nanoseconds))
      timer.schedule(deadline: .now + every, repeating: every)
      timer.setEventHandler { [self] in
        guard !operation.finished, !operation.pending.isEmpty else { return }
        deliver(operation, done: false, all: true)
      }
      operation.intervalTimer = timer
      timer.activate()
    }
    source.activate()
  }

  private func readReady(_ operation: IOOperation, length: Int) {
    let chunk = 64 * 1024
    while !operation.finished && operation.transferred < length {
      let want = Swift.min(chunk, length - operation.transferred)
      let got = readChunk(operation, want: want, length: length) { base, count in
        Glibc.read(fd, base, count)
      }
      if got == 0 { return }  // Nothing there yet (EAGAIN), or the operation ended.
    }
  }

  /// One read of up to `want` bytes for `operation` with `call` (`read` or `pread`, retried
  /// on `EINTR`): new bytes go to `received`, an error or the end of the file ends the
  /// operation, and so does `EAGAIN` for a one-shot read that got bytes. Returns how many
  /// bytes arrived: 0 for `EAGAIN` or an ended operation.
  private func readChunk(
    _ operation: IOOperation, want: Int, length: Int,
    _ call: (UnsafeMutableRawPointer?, Int) -> Int
  ) -> Int {
    var got = 0
    var error: Int32 = 0
    let bytes = Bytes(readingUpTo: want) { buffer in
      repeat {
        got = call(buffer.baseAddress, want)
      } while got < 0 && errno == EINTR
      if got < 0 { error = errno }
      return Swift.max(got, 0)
    }
    if error == EAGAIN || error == EWOULDBLOCK {
      // Drained: a one-shot read that got bytes ends with them (libdispatch completes a
      // convenience read with available data on EAGAIN); any other read waits for more.
      if operation.endsWhenDrained && operation.transferred > 0 {
        deliver(operation, done: true, all: true)
        complete(operation)
      }
      return 0
    }
    if error != 0 {
      finish(operation, error: error)
      return 0
    }
    if got == 0 {
      endOfFile(operation)
      return 0
    }
    received(bytes, by: operation, length: length)
    return got
  }

  private func writeReady(_ operation: IOOperation) {
    while !operation.finished && !operation.pending.isEmpty {
      var wrote = 0
      var error: Int32 = 0
      _ = operation.pending.forEachRegion { _, region in
        repeat {
          wrote =
            isSocket
            ? send(fd, region.baseAddress, region.count, Int32(MSG_NOSIGNAL))
            : Glibc.write(fd, region.baseAddress, region.count)
        } while wrote < 0 && errno == EINTR
        if wrote < 0 { error = errno }
        return false
      }
      if error == EAGAIN || error == EWOULDBLOCK { return }
      if error != 0 {
        finish(operation, error: error)
        return
      }
      didWrite(wrote, by: operation)
    }
  }

  // MARK: Progress and completion (on `control`)

  /// New bytes for a read: hands them on as the water marks say; `done` at `length`.
  private func received(_ bytes: Bytes, by operation: IOOperation, length: Int) {
    operation.pending = operation.pending + bytes
    operation.transferred += bytes.count
    if operation.transferred >= length {
      deliver(operation, done: true, all: true)
      complete(operation)
      return
    }
    deliver(operation, done: false, all: false)
  }

  /// The end of the file: what is held goes out, then `done` with no bytes (libdispatch's
  /// order).
  private func endOfFile(_ operation: IOOperation) {
    if !operation.pending.isEmpty { deliver(operation, done: false, all: true) }
    operation.post(done: true, Bytes(), 0)
    complete(operation)
  }

  /// Hands a read's held bytes to its handler: whole `highWater` chunks, then (with `all`)
  /// the rest, else the rest only once it reaches the low water mark. The last call carries
  /// `done` when asked.
  private func deliver(_ operation: IOOperation, done: Bool, all: Bool) {
    while operation.pending.count > highWater {
      let chunk = operation.pending[0..<highWater]
      operation.pending = operation.pending[highWater..<operation.pending.count]
      operation.post(done: done && operation.pending.isEmpty, chunk, 0)
    }
    let rest = operation.pending
    guard !rest.isEmpty || done else { return }
    let reachedLow = lowWater.map { rest.count >= Swift.max($0, 1) } ?? false
    guard all || done || reachedLow || rest.count == highWater else { return }
    operation.pending = Bytes()
    operation.post(done: done, rest, 0)
  }

  /// `count` bytes of a write went out.
  private func didWrite(_ count: Int, by operation: IOOperation) {
    operation.pending = operation.pending[count..<operation.pending.count]
    operation.transferred += count
    if operation.pending.isEmpty {
      operation.post(done: true, Bytes(), 0)
      complete(operation)
      return
    }
    operation.sinceReport += count
    if let lowWater, operation.sinceReport >= Swift.max(lowWater, 1) {
      operation.sinceReport = 0
      operation.post(done: false, operation.pending, 0)
    }
  }

  /// Ends `operation` with `error` (never 0). A read hands over what it holds first, in calls
  /// without `done`, then ends with the error and no bytes (io.h's contract, libdispatch's
  /// order); a write ends with what is left to write.
  private func finish(_ operation: IOOperation, error: Int32) {
    guard !operation.finished else { return }
    if case .read = operation.direction {
      if !operation.pending.isEmpty { deliver(operation, done: false, all: true) }
      operation.post(done: true, Bytes(), error)
    } else {
      operation.post(done: true, operation.pending, error)
    }
    complete(operation)
  }

  /// Ends an operation that never started with `error` (0: an empty transfer), counted like a finished one so the
  /// barriers and the cleanup come after its handler.
  private func fail(_ operation: IOOperation, _ error: Int32) {
    operation.post(done: true, operation.pending, error)
    awaitDelivery(of: operation)
  }

  /// Counts `operation`'s handler calls as undelivered until the last one has run (its
  /// handler queue is serial: a block queued after them runs after them).
  private func awaitDelivery(of operation: IOOperation) {
    guard let handlerQueue = operation.queue else { return }
    undelivered += 1
    handlerQueue.async { [self] in
      control.async { [self] in
        undelivered -= 1
        startWhatMay()
      }
    }
  }

  /// Takes a finished operation off the channel and starts what may follow.
  private func complete(_ operation: IOOperation) {
    operation.finished = true
    operation.source?.cancel()
    operation.source = nil
    operation.intervalTimer?.cancel()
    operation.intervalTimer = nil
    if activeRead === operation { activeRead = nil }
    if activeWrite === operation { activeWrite = nil }
    awaitDelivery(of: operation)
    startWhatMay()
  }

  /// Cleans up once the channel is closed and idle.
  private func cleanUpIfDone() {
    guard closed, !cleanedUp, waiting.isEmpty, activeRead == nil, activeWrite == nil,
      undelivered == 0
    else { return }
    finishCleanup()
  }

  /// Gives the descriptor back (its flags, or the file a path channel opened) and submits
  /// the cleanup handler, once.
  private func finishCleanup() {
    cleanedUp = true
    cleanupError = failure
    if holdsNonBlocking {
      DescriptorFlags.release(fd)
      holdsNonBlocking = false
    }
    if case .path = origin, fd >= 0 { _ = Glibc.close(fd) }
    // Given back: the number may now name another file.
    fd = -1
    if failure == 0 { failure = ECANCELED }
    if let handler = cleanupHandler {
      cleanupHandler = nil  // Run once; drop what it holds.
      let error = cleanupError
      cleanupQueue.async { handler(error) }
    }
  }
}

/// What a one-shot read or write ends with, and the join of its two ends: the operation's
/// last handler call and the channel's cleanup (which may come in either order: a descriptor
/// that is not open is given up before the operation's failure is reported). `finish` runs
/// once, after both, under the lock.
private final class OneShotOutcome: Sendable {
  private struct State {
    var bytes = Bytes()
    var error: Int32 = 0
    var cleanupError: Int32 = 0
    var arrived = 0
  }
  private let state = LockedValue(State())
  private let finish: @Sendable (Bytes, Int32) -> Void

  init(finish: @escaping @Sendable (Bytes, Int32) -> Void) { self.finish = finish }

  func collect(_ data: Bytes) { state.withLock { $0.bytes = $0.bytes + data } }

  func arrive(error: Int32) { arrive { $0.error = error } }

  func arrive(cleanupError: Int32) { arrive { $0.cleanupError = cleanupError } }

  private func arrive(_ change: (inout State) -> Void) {
    let ready = state.withLock { state -> (Bytes, Int32)? in
      change(&state)
      state.arrived += 1
      guard state.arrived == 2 else { return nil }
      return (state.bytes, state.error != 0 ? state.error : state.cleanupError)
    }
    if let (bytes, error) = ready { finish(bytes, error) }
  }
}
