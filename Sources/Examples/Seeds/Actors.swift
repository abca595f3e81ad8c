import Glibc
import LoopDispatch

// Swift concurrency on LoopDispatch: an actor whose executor is a serial queue, pool tasks
// doing CPU work, and UI-style updates hopping to the main actor, which runs on the main
// loop on the process main thread.

/// An actor serialised by its own LoopDispatch queue (`Queue.current` inside is "library").
actor PhotoLibrary {
  private let queue = Queue(label: "library")
  private var photos: [String] = []
  nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }

  func add(_ name: String) -> Int {
    photos.append(name)
    say("library: stored \(name) (\(photos.count) in all)")
    return photos.count
  }

  var count: Int { photos.count }
}

/// UI-style state: only ever touched on the main actor (the main queue).
@MainActor final class StatusLine {
  private(set) var updates = 0

  func show(_ text: String) {
    updates += 1
    say("screen: \(text) (on the main thread: \(EventLoop.main.isInLoopThread))")
  }
}

func runActors(_ arguments: [String]) -> Int32 {
  ConcurrencyIntegration.install()  // @MainActor → main loop, tasks → LoopDispatch's pool.
  Task { @MainActor in
    let library = PhotoLibrary()
    let status = StatusLine()
    status.show("importing 4 photos")
    await withTaskGroup(of: Void.self) { group in
      for index in 1...4 {
        group.addTask {
          // CPU work on a pool worker, then the actor, then a main-actor update.
          var checksum: UInt64 = 0
          for byte in 0..<(index * 200_000) { checksum = checksum &* 31 &+ UInt64(byte & 0xff) }
          say("decoded photo\(index) (checksum \(String(checksum % 10_000)))")
          let total = await library.add("photo\(index)")
          await MainActor.run { status.show("photo\(index) imported, \(total) of 4") }
        }
      }
    }
    let total = await library.count
    status.show("done: \(total) photos after \(status.updates) screen updates")
    flushOutput()
    exit(total == 4 && status.updates == 6 ? 0 : 1)
  }
  Queue.runMain()
}
