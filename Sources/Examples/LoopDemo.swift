import Glibc
import LoopDispatch
import MainLoop

/// Shows one turn-by-turn picture of `EventLoop.main` on the process main thread:
/// timers that never fire early, a pipe watch fed by another thread, posts from another
/// thread, and SIGINT handled as an ordinary event. Ends by itself after the last timer.
func runLoopDemo() -> Int32 {
  let loop = EventLoop.main
  let start = Deadline.now
  @Sendable func stamp() -> String {
    let micros = (Deadline.now - start).saturatingNanoseconds / 1_000
    return "[+\(micros / 1_000).\(String(micros % 1_000).leftPadded(3)) ms]"
  }
  print("\(stamp()) EventLoop.main runs on the process main thread: \(loop.isInLoopThread)")

  // 1. Timers: each reports how late it fired (it is never early).
  for milliseconds in [5, 10, 20] {
    let deadline = Deadline.now + .milliseconds(milliseconds)
    loop.schedule(at: deadline) {
      let late = (Deadline.now - deadline).saturatingNanoseconds / 1_000
      print("\(stamp()) timer \(milliseconds) ms fired \(late) µs after its deadline")
    }
  }

  // 2. A pipe watch: a worker thread writes three messages; the main loop reads them.
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else { return 1 }
  let (readEnd, writeEnd) = (fds[0], fds[1])
  _ = fcntl(readEnd, F_SETFL, fcntl(readEnd, F_GETFL) | O_NONBLOCK)
  let received = Box(0)
  let watch: FDWatch
  do {
    watch = try loop.watch(fd: readEnd, for: .read) {
      var buffer = [UInt8](repeating: 0, count: 256)
      let n = read(readEnd, &buffer, buffer.count)
      guard n > 0 else { return }
      received.value += 1
      let text = String(decoding: buffer[..<n], as: UTF8.self)
      print("\(stamp()) fd watch read \(n) bytes: \(text.trimmingNewlines)")
    }
  } catch {
    writeError("Examples: \(error)\n")
    return 1
  }

  // 3. Posts from another thread run on the main loop, in order.
  let worker = NativeThread.spawn(name: "demo-worker") {
    for index in 1...3 {
      let message = "message \(index)\n"
      _ = message.withCString { write(writeEnd, $0, strlen($0)) }
      loop.execute {
        print("\(stamp()) posted closure \(index) runs on the main thread: \(loop.isInLoopThread)")
      }
    }
  }

  // 4. SIGINT becomes an ordinary event: it stops the demo early and cleanly.
  let interrupt = try? loop.watchSignal(SIGINT) {
    print("\(stamp()) SIGINT received: stopping")
    loop.stop()
  }

  // 5. The last timer closes everything: cancel, then close the fd in the completion.
  loop.schedule(after: .milliseconds(40)) {
    watch.cancel {
      close(readEnd)
      close(writeEnd)
      print("\(stamp()) fd watch cancelled and its descriptors closed")
    }
    interrupt?.cancel()
    loop.stop()
  }
  loop.run()
  worker?.join()
  print("\(stamp()) loop stopped after \(loop.turnCount) turns; \(received.value) reads")
  return 0
}

/// A mutable box confined to the main loop's thread.
final class Box<Value>: @unchecked Sendable {
  // @unchecked Sendable: only touched on the main thread in these examples.
  var value: Value
  init(_ value: Value) { self.value = value }
}

extension String {
  func leftPadded(_ width: Int) -> String {
    count >= width ? self : String(repeating: "0", count: width - count) + self
  }
  var trimmingNewlines: String {
    var copy = self
    while copy.last == "\n" { copy.removeLast() }
    return copy.split(separator: "\n").joined(separator: " | ")
  }
}
