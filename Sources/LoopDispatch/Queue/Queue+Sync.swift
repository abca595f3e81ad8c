import MainLoop

extension Queue {
  /// Runs `work` on this queue and returns its value (or rethrows its error), on the calling
  /// thread.
  ///
  /// On an idle serial queue this is one CAS in and one out, with no allocation; on a busy
  /// queue the caller waits for its turn in submission order. On a concurrent queue a plain
  /// `sync` runs beside other items, a barrier `sync` runs alone. On a global queue the work
  /// runs at once.
  ///
  /// `sync` onto a queue the calling thread is already running (directly, or through the
  /// target chain) would never return: it traps with
  /// `BUG IN CLIENT OF LOOPDISPATCH: sync onto queue "<label>" already owned by this thread`.
  @inlinable
  public func sync<T, E: Error>(
    flags: Flags = [], execute work: () throws(E) -> T
  ) throws(E) -> T {
    try _sync(barrier: flags.contains(.barrier), work)
  }

  @usableFromInline
  func _sync<T, E: Error>(barrier: Bool, _ work: () throws(E) -> T) throws(E) -> T {
    switch kind {
    case .root:
      return try ThreadFrame.with(self, exclusive: false, work)
    case .serial:
      if trySyncLockChain() {
        defer { unlockSyncChain(upTo: nil) }
        return try withChainFrames(work)
      }
      return try syncSlow(barrier: barrier, work)
    case .concurrent:
      if concurrentTrySyncStart(barrier: barrier) {
        defer { concurrentFinished(barrier: barrier) }
        return try ThreadFrame.with(self, exclusive: barrier, work)
      }
      return try syncSlow(barrier: barrier, work)
    }
  }

  /// Runs `body` with frames pushed for this queue and every serial queue up its target
  /// chain (all held on this thread's behalf during a `sync`).
  /// The ancestors' frames are pushed first, so this queue's frame is innermost.
  func withChainFrames<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
    if let next = target, next.kind == .serial {
      return try next.withChainFrames { () throws(E) -> T in
        try ThreadFrame.with(self, exclusive: true, body)
      }
    }
    return try ThreadFrame.with(self, exclusive: true, body)
  }
}
