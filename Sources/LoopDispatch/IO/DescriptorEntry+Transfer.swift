import Glibc
import MainLoop

/// Moving the bytes of the operation at the head of a lane (all on the entry's `queue`).
///
/// Regular files are read and written with blocking calls (`pread`/`pwrite` for a RANDOM
/// channel, `read`/`write` at the file position for a STREAM one), a chunk per turn of the
/// queue. Anything else was made non-blocking with the entry and is read and written when a
/// readiness source says so; the first try is made at once, with no source.
extension DescriptorEntry {
  // MARK: Regular files: a pool worker, blocking calls

  /// One chunk of a file operation per turn of `queue`, so a long transfer does not hold
  /// the entry: `close(stop:)`, barriers' bookkeeping and the other lanes get their turns
  /// between chunks.
  func runOnFile(_ operation: IOOperation) {
    guard !operation.finished else { return }
    if operation.filePosition < 0 {
      operation.filePosition = operation.settings.base + operation.offset
    }
    let chunk = DescriptorEntry.chunkSize
    switch operation.direction {
    case .read(let length):
      let want = Swift.min(chunk, length - operation.transferred)
      let position = off_t(operation.filePosition)
      let got = readChunk(operation, want: want, length: length) { base, count in
        operation.settings.kind == .random
          ? pread(fd, base, count, position) : Glibc.read(fd, base, count)
      }
      operation.filePosition += Int64(got)
    case .write:
      let (wrote, error, _) = writeChunk(
        operation, at: operation.settings.kind == .random ? operation.filePosition : nil)
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
      queue.async { [self] in runOnFile(operation) }
    }
  }

  // MARK: Streams: non-blocking, on readiness

  func runOnStream(_ operation: IOOperation) {
    // Try at once: a write usually goes out and a read often finds its bytes, with no
    // readiness source to make (and no trip through the I/O driver).
    switch operation.direction {
    case .read(let length): readReady(operation, length: length)
    case .write: writeReady(operation)
    case .barrier: return
    }
    if operation.finished { return }
    guard awaitReadiness(of: operation.lane) else {
      finish(operation, error: EBADF)
      return
    }
    // As libdispatch: a strict interval hands over whatever arrived at each tick. A
    // non-strict one hands over only what reached the low water mark, which each arrival
    // already does (`received`): it needs no timer.
    if let interval = operation.settings.interval, interval.strict,
      case .read = operation.direction
    {
      let timer = TimerSource(queue: queue, label: "io.channel.interval")
      let every = Duration.nanoseconds(Int64(clamping: interval.nanoseconds))
      timer.schedule(deadline: .now + every, repeating: every)
      timer.setEventHandler { [self] in
        guard !operation.finished, !operation.pending.isEmpty else { return }
        deliver(operation, done: false, all: true)
      }
      operation.intervalTimer = timer
      timer.activate()
    }
  }

  func readReady(_ operation: IOOperation, length: Int) {
    while !operation.finished && operation.transferred < length {
      let want = Swift.min(DescriptorEntry.streamChunk, length - operation.transferred)
      let got = readChunk(operation, want: want, length: length) { base, count in
        Glibc.read(fd, base, count)
      }
      // Nothing there yet (EAGAIN), or the operation ended. A short read is not taken for
      // "drained": the next read may bring an error that belongs to this operation
      // (libdispatch's dispatch_read reports a reset after the bytes before it).
      if got == 0 { return }
    }
  }

  /// A one-shot read found the stream drained: if it got bytes, it ends with them
  /// (libdispatch completes a convenience read with the data available at `EAGAIN`).
  private func drained(_ operation: IOOperation) {
    guard operation.transferred > 0 else { return }
    deliver(operation, done: true, all: true)
    complete(operation)
  }

  /// The most a stream read asks for (a pipe holds 64 KiB).
  static let streamChunk = 64 * 1024

  /// One read of up to `want` bytes for `operation` with `call` (`read` or `pread`, retried
  /// on `EINTR`): new bytes go to `received`, an error or the end of the file ends the
  /// operation, and so does `EAGAIN` for a one-shot read that got bytes. Returns how many
  /// bytes arrived: 0 for `EAGAIN` or an ended operation.
  private func readChunk(
    _ operation: IOOperation, want: Int, length: Int,
    _ call: (UnsafeMutableRawPointer?, Int) -> Int
  ) -> Int {
    var error: Int32 = 0
    let (bytes, got) = readBuffer.read(want: want) { memory, want in
      var got = 0
      repeat {
        got = call(memory, want)
      } while got < 0 && errno == EINTR
      if got < 0 { error = errno }
      return got
    }
    if error == EAGAIN || error == EWOULDBLOCK {
      // Drained: a one-shot read that got bytes ends with them (libdispatch completes a
      // convenience read with available data on EAGAIN); any other read waits for more.
      if operation.endsWhenDrained { drained(operation) }
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

  /// Writes what fits. A write that comes back short (fewer bytes than offered) filled the
  /// descriptor: the next try waits for readiness instead of hearing `EAGAIN` first.
  func writeReady(_ operation: IOOperation) {
    while !operation.finished && operation.writeOffset < operation.pending.count {
      let (wrote, error, offered) = writeChunk(operation, at: nil)
      if error == EAGAIN || error == EWOULDBLOCK { return }
      if error != 0 {
        finish(operation, error: error)
        return
      }
      didWrite(wrote, by: operation)
      if wrote < offered { return }
    }
  }

  /// One write call for `operation`: its pending regions gathered (`writev`, `pwritev` at
  /// `position`, or `sendmsg` with `MSG_NOSIGNAL` on a socket) up to one chunk, as
  /// libdispatch writes: at most 1 MiB and at most the high water mark, so a long write
  /// reports its progress between chunks. Retried on `EINTR`. Returns the bytes written and
  /// 0, or 0 and the error; and how many bytes were offered.
  func writeChunk(
    _ operation: IOOperation, at position: Int64?
  ) -> (wrote: Int, error: Int32, offered: Int) {
    let limit = Swift.min(DescriptorEntry.chunkSize, Swift.max(operation.settings.highWater, 1))
    // The vectors live on the stack: no allocation per write.
    return withUnsafeTemporaryAllocation(
      of: iovec.self, capacity: DescriptorEntry.maximumVectors
    ) { vectors in
      var used = 0
      var gathered = 0
      let start = operation.writeOffset
      _ = operation.pending.forEachRegion { offset, region in
        // Regions already written are skipped; the first one left starts where the last
        // write ended.
        guard offset + region.count > start else { return true }
        let skip = Swift.max(start - offset, 0)
        let count = Swift.min(region.count - skip, limit - gathered)
        // The pointer outlives the closure, safe: the region's storage is kept alive by
        // `operation.pending` until the call below has returned, and it is only read.
        vectors[used] = iovec(
          iov_base: UnsafeMutableRawPointer(mutating: region.baseAddress.map { $0 + skip }),
          iov_len: count)
        used += 1
        gathered += count
        return gathered < limit && used < vectors.count
      }
      let base = vectors.baseAddress
      var wrote = 0
      repeat {
        if let position {
          wrote = pwritev(fd, base, Int32(used), off_t(position))
        } else if isSocket {
          var message = msghdr()
          message.msg_iov = base
          message.msg_iovlen = used
          wrote = sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
        } else {
          wrote = writev(fd, base, Int32(used))
        }
      } while wrote < 0 && errno == EINTR
      return wrote < 0 ? (0, errno, gathered) : (wrote, 0, gathered)
    }
  }

  /// The most bytes one read or write call moves (libdispatch's chunk on Linux).
  static let chunkSize = 1 << 20
  /// The most regions one gathered write passes.
  static let maximumVectors = 64

  // MARK: Progress and completion

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
    let highWater = operation.settings.highWater
    while operation.pending.count > highWater {
      let chunk = operation.pending[0..<highWater]
      operation.pending = operation.pending[highWater..<operation.pending.count]
      operation.post(done: done && operation.pending.isEmpty, chunk, 0)
    }
    let rest = operation.pending
    guard !rest.isEmpty || done else { return }
    let reachedLow = operation.settings.lowWater.map { rest.count >= Swift.max($0, 1) } ?? false
    guard all || done || reachedLow || rest.count == highWater else { return }
    operation.pending = Bytes()
    operation.post(done: done, rest, 0)
  }

  /// `count` bytes of a write went out. The data is not re-sliced per write (an allocation
  /// each): `writeOffset` moves, and the bytes left are cut out only for a report.
  private func didWrite(_ count: Int, by operation: IOOperation) {
    operation.writeOffset += count
    operation.transferred += count
    if operation.writeOffset >= operation.pending.count {
      operation.post(done: true, Bytes(), 0)
      complete(operation)
      return
    }
    operation.sinceReport += count
    if let lowWater = operation.settings.lowWater,
      operation.sinceReport >= Swift.max(lowWater, 1)
    {
      operation.sinceReport = 0
      operation.post(done: false, operation.unwritten, 0)
    }
  }

  /// Ends `operation` with `error` (never 0). A read hands over what it holds first, in calls
  /// without `done`, then ends with the error and no bytes (io.h's contract, libdispatch's
  /// order); a write ends with what is left to write.
  func finish(_ operation: IOOperation, error: Int32) {
    guard !operation.finished else { return }
    if case .read = operation.direction {
      if !operation.pending.isEmpty { deliver(operation, done: false, all: true) }
      operation.post(done: true, Bytes(), error)
    } else {
      operation.post(done: true, operation.unwritten, error)
    }
    complete(operation)
  }
}
