import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// ProcessSource: a child's exit reaches the handler once, with DISPATCH_PROC_EXIT, and the
/// program's own waitpid still collects the status afterwards. (Main-queue targets:
/// MainQueueSourceTests, scenario "source-main-process".) Descriptor checks count the pidfds
/// of each test's own child (from /proc/self/fdinfo), so other tests' descriptors do not count.
@Suite(.serialized) struct SourceProcessTests {
  @Test func aChildsExitFiresOnceOnASerialQueueAndWaitpidStillGetsTheStatus() throws {
    let child = try WaitingChild(exitStatus: 7)
    let queue = Queue(label: "proc-serial")
    let source = try ProcessSource(pid: child.pid, queue: queue, label: "child")
    #expect(source.mask == .exit)
    let seen = Locked([UInt]())
    let fired = Latch()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      seen.withLock { $0.append(source.data) }
      fired.open()
    }
    source.setCancelHandler { cancelled.open() }
    source.activate()
    #expect(seen.value.isEmpty)  // The child waits for its stdin to close.
    child.letExit()
    #expect(fired.wait())
    // The status is still there for the program: the source did not reap.
    #expect(child.reap() == 7)
    // A second, unrelated round through the queue: the pidfd stays readable after the exit,
    // and a source that re-armed would have fired again by the time this data source has
    // delivered twice on the same queue.
    let marker = DataSource(merge: .add, queue: queue)
    let markers = Semaphore(value: 0)
    marker.setEventHandler { markers.signal() }
    marker.activate()
    marker.post(1)
    #expect(markers.wait(timeout: .seconds(30)) == .success)
    marker.post(1)
    #expect(markers.wait(timeout: .seconds(30)) == .success)
    marker.cancel()
    source.cancel()
    #expect(cancelled.wait())
    #expect(seen.value == [ProcessSource.Events.exit.rawValue])
    #expect(ProcessSource.Events.exit.rawValue == 0x8000_0000)
  }

  @Test func anExitedChildNotYetReapedFiresAtOnceOnAGlobalQueue() throws {
    let pid = try spawn(["/bin/true"])
    // Wait for the exit without reaping (WNOWAIT): the child is a zombie now.
    var info = siginfo_t()
    #expect(waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == 0)
    let source = try ProcessSource(pid: pid, label: "zombie")
    let data = Locked<UInt>(0)
    let fired = Latch()
    source.setEventHandler { [unowned source] in
      data.withLock { $0 = source.data }
      fired.open()
    }
    source.activate()
    #expect(fired.wait())
    #expect(data.value == 0x8000_0000)
    var status: Int32 = -1
    #expect(waitpid(pid, &status, 0) == pid)
    #expect(status == 0)  // Exited with 0.
    source.cancel()
  }

  @Test func cancelBeforeTheExitRunsTheCancelHandlerAndNoEventHandler() throws {
    let child = try WaitingChild(exitStatus: 3)
    let queue = Queue(label: "proc-cancel")
    let source = try ProcessSource(pid: child.pid, queue: queue, label: "cancelled")
    #expect(countPidfds(of: child.pid) == 1)
    let events = Counter()
    let cancelled = Latch()
    source.setEventHandler { events.increment() }
    source.setCancelHandler { cancelled.open() }
    source.activate()
    source.cancel()
    #expect(cancelled.wait())
    // The pidfd is closed once the watch is removed, before the cancel handler runs.
    #expect(countPidfds(of: child.pid) == 0)
    child.letExit()
    #expect(child.reap() == 3)
    queue.sync {}
    #expect(events.current == 0)
  }

  @Test func aSourceNeverActivatedClosesItsPidfdWhenReleased() throws {
    let child = try WaitingChild(exitStatus: 0)
    let cancelled = Latch()
    do {
      let source = try ProcessSource(pid: child.pid, label: "dropped")
      #expect(countPidfds(of: child.pid) == 1)
      source.setCancelHandler { cancelled.open() }
    }
    #expect(cancelled.wait())
    #expect(countPidfds(of: child.pid) == 0)
    child.letExit()
    #expect(child.reap() == 0)
  }

  @Test func aProcessThatDoesNotExistThrows() throws {
    let pid = try spawn(["/bin/true"])
    var status: Int32 = 0
    #expect(waitpid(pid, &status, 0) == pid)  // Reaped: the id names nothing now.
    #expect(throws: EventLoopError.noSuchProcess(pid)) { try ProcessSource(pid: pid) }
    // Above any pid_max Linux allows (2^22).
    #expect(throws: EventLoopError.noSuchProcess(Int32.max)) { try ProcessSource(pid: .max) }
    #expect(throws: EventLoopError.noSuchProcess(0)) { try ProcessSource(pid: 0) }
    #expect(throws: EventLoopError.noSuchProcess(-1)) { try ProcessSource(pid: -1) }
    #expect("\(EventLoopError.noSuchProcess(42))".contains("no process with id 42"))
  }

  @Test func askingForForkIsAClientBug() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = try? ProcessSource(pid: getpid(), events: [.exit, .fork], label: "forks")
    }
    expectMessage(
      result,
      "process source \"forks\" asks for DISPATCH_PROC_FORK (.fork), which Linux cannot report; "
        + "only DISPATCH_PROC_EXIT (.exit) is supported")
  }

  @Test func askingForExecIsAClientBug() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = try? ProcessSource(pid: getpid(), events: .exec, label: "execs")
    }
    expectMessage(result, "process source \"execs\" asks for DISPATCH_PROC_EXEC (.exec)")
  }

  @Test func unknownEventBitsAreAClientBug() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = try? ProcessSource(pid: getpid(), events: .init(rawValue: 0x8000_0001), label: "odd")
    }
    expectMessage(result, "process source \"odd\" given unknown event bits 0x1")
  }

  @Test func noEventAtAllIsAClientBug() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = try? ProcessSource(pid: getpid(), events: [], label: "nothing")
    }
    expectMessage(result, "process source \"nothing\" asks for no event")
  }
}

/// A child (`/bin/sh`) that exits with a chosen status once its standard input closes, so a
/// test decides when it exits without any timing.
final class WaitingChild: Sendable {
  let pid: pid_t
  private let stdinWriteEnd: Int32

  init(exitStatus: Int32) throws {
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { throw SpawnError(code: errno) }
    // Close-on-exec for both ends here; the child gets the read end as fd 0 (dup2 clears it).
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    defer { close(fds[0]) }
    do {
      pid = try spawn(["/bin/sh", "-c", "read line; exit \(exitStatus)"], stdin: fds[0])
    } catch {
      close(fds[1])
      throw error
    }
    stdinWriteEnd = fds[1]
  }

  /// Closes the child's standard input: it exits.
  func letExit() { close(stdinWriteEnd) }

  /// waitpid: the child's exit status, or -1 if it was not there to collect.
  func reap() -> Int32 {
    var status: Int32 = 0
    guard waitpid(pid, &status, 0) == pid else { return -1 }
    return (status >> 8) & 0xff  // WEXITSTATUS
  }
}

struct SpawnError: Error {
  var code: Int32
}

/// posix_spawn of `arguments` (the first is the program's path), optionally with `stdin` as
/// its standard input.
func spawn(_ arguments: [String], stdin: Int32? = nil) throws -> pid_t {
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  if let stdin { posix_spawn_file_actions_adddup2(&actions, stdin, 0) }
  // strdup'd C strings for argv, freed below; posix_spawn copies them into the child.
  let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
  defer { for pointer in argv { free(pointer) } }
  var pid: pid_t = 0
  let code = posix_spawn(&pid, arguments[0], &actions, nil, argv, environ)
  guard code == 0 else { throw SpawnError(code: code) }
  return pid
}

/// How many of this process's descriptors are pidfds of process `pid` (the `Pid:` line of
/// their /proc/self/fdinfo entry).
func countPidfds(of pid: pid_t) -> Int {
  descriptors(linkingTo: "anon_inode:[pidfd]").filter { fd in
    readSmallFile("/proc/self/fdinfo/\(fd)").split(separator: "\n").contains {
      $0.hasPrefix("Pid:") && $0.dropFirst(4).trimmingPrefix(while: \.isWhitespace) == "\(pid)"
    }
  }.count
}

/// How many of this process's descriptors are links to `target` (for example
/// `anon_inode:[pidfd]`), read from /proc/self/fd.
func countDescriptors(linkingTo target: String) -> Int {
  descriptors(linkingTo: target).count
}

/// This process's descriptors that are links to `target`.
func descriptors(linkingTo target: String) -> [Int32] {
  guard let directory = opendir("/proc/self/fd") else { return [] }
  defer { closedir(directory) }
  var found: [Int32] = []
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    guard name != ".", name != ".." else { continue }
    var buffer = [CChar](repeating: 0, count: 256)
    let length = readlink("/proc/self/fd/" + name, &buffer, buffer.count - 1)
    guard length > 0 else { continue }
    let link = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    if link == target, let fd = Int32(name) { found.append(fd) }
  }
  return found
}
