/// Waiting for a socket, pipe or terminal to be ready (all on the entry's `queue`).
///
/// One ``ReadSource`` and one ``WriteSource`` per entry, made the first time an operation
/// of that lane finds the descriptor not ready, and kept until the entry ends: one `fstat`
/// and one `epoll_ctl(ADD)` for the descriptor's life instead of per waiting operation (and
/// a `DEL` each). Between waits the source is suspended (an atomic count, no system call),
/// so readiness nobody waits for runs no handler: the I/O driver leaves the interest
/// disarmed after one report a suspended source declined, and the source delivers that
/// report when it is resumed.
///
/// Invariant: `listening[lane]` is true exactly while the lane's source is resumed. A source
/// is resumed when the first operation of its lane waits, and suspended when its handler
/// finds no operation of the lane waiting; so at most one report of readiness runs a handler
/// with nothing to do, after a waiting operation ended some other way (a STOP close).
extension DescriptorEntry {
  /// The first operation of `lane` (`Lane.read` or `Lane.write`) waits for readiness: the
  /// lane's source is made or resumed. False if it cannot be made (the descriptor is no
  /// longer open).
  func awaitReadiness(of lane: Int) -> Bool {
    if listening[lane] { return true }
    if let source = readiness[lane] {
      listening[lane] = true
      source.resume()
      return true
    }
    let source: Source
    do {
      source =
        lane == Lane.read
        ? try ReadSource(fd: fd, queue: queue, label: "io.channel.read")
        : try WriteSource(fd: fd, queue: queue, label: "io.channel.write")
    } catch {
      return false
    }
    source.setEventHandler { [self] in readinessFired(in: lane) }
    readiness[lane] = source
    listening[lane] = true
    source.activate()
    return true
  }

  /// The lane's descriptor is ready: its first operation moves what it can. If no operation
  /// of the lane is left waiting (it finished, and the next, if any, finished at once or is
  /// not a stream transfer), the source is suspended.
  private func readinessFired(in lane: Int) {
    if let first = waitingOperation(in: lane) {
      switch first.direction {
      case .read(let length): readReady(first, length: length)
      case .write: writeReady(first)
      case .barrier: break
      }
    }
    guard waitingOperation(in: lane) == nil, listening[lane], let source = readiness[lane]
    else { return }
    listening[lane] = false
    source.suspend()
  }

  /// The lane's first operation if it has started and not finished: it waits for readiness.
  private func waitingOperation(in lane: Int) -> IOOperation? {
    guard let first = lanes[lane].first, first.started, !first.finished else { return nil }
    return first
  }

  /// At the entry's end: the sources are cancelled (a suspended one resumed after, so that
  /// its cancellation completes; a cancelled source runs no more handlers).
  func stopListening() {
    for lane in readiness.indices {
      guard let source = readiness[lane] else { continue }
      source.cancel()
      if !listening[lane] { source.resume() }
      listening[lane] = false
      readiness[lane] = nil
    }
  }
}
