import Glibc
import LoopDispatch

/// A FileSource on the main queue: its handler runs on the main thread for a write made by a
/// worker and a chmod made on the main thread, and its cancel handler runs there once.
func fileSourceMainScenario() {
  var template = Array("/tmp/loopdispatch-file-main-XXXXXX".utf8CString)
  guard let made = mkdtemp(&template) else { fail("mkdtemp: errno \(errno)") }
  let directory = String(cString: made)
  let path = directory + "/watched"
  let fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o644)
  guard fd >= 0 else { fail("open: errno \(errno)") }
  let source: FileSource
  do {
    source = try FileSource(fd: fd, events: [.write, .attrib], queue: .main, label: "main-file")
  } catch {
    fail("\(error)")
  }
  let seen = MainConfined(FileSource.Events())
  let offMain = MainConfined(0)
  let cancelled = MainConfined(0)
  source.setEventHandler { [unowned source] in
    if !(EventLoop.main.isInLoopThread && Queue.main.isCurrent) { offMain.value += 1 }
    seen.value.formUnion(source.changes)
  }
  source.setCancelHandler {
    if !EventLoop.main.isInLoopThread { offMain.value += 1 }
    cancelled.value += 1
    close(fd)
  }
  source.activate()
  Queue.global().async { _ = write(fd, "x", 1) }
  guard Queue.runMain(until: { seen.value.contains(.write) }, deadline: .now + .seconds(30)) else {
    fail("the write was never reported")
  }
  guard fchmod(fd, 0o600) == 0 else { fail("fchmod: errno \(errno)") }
  guard Queue.runMain(until: { seen.value.contains(.attrib) }, deadline: .now + .seconds(30))
  else {
    fail("the chmod was never reported")
  }
  source.cancel()
  guard Queue.runMain(until: { cancelled.value == 1 }, deadline: .now + .seconds(30)) else {
    fail("the cancel handler never ran")
  }
  unlink(path)
  rmdir(directory)
  if offMain.value != 0 { fail("\(offMain.value) handlers ran off the main queue") }
  if seen.value != [.write, .attrib] { fail("events \(seen.value.rawValue)") }
  print("ok file-source-main")
}
