import Glibc
import LoopDispatch

/// `Examples <subcommand>`: small programs that show the runtime. `make run` runs the default.
let subcommands: [(name: String, summary: String, run: ([String]) -> Int32)] =
  [
    ("serve", "HTTP/1.1 keep-alive server on 127.0.0.1 (--port N, --idle-timeout-ms N)", runServe),
    (
      "loop", "the main event loop: timers, an fd watch, cross-thread posts, a signal",
      { _ in runLoopDemo() }
    ),
  ] + seedPrograms + [
    ("tour", "every seed program above in order (deadlock in a child process)", runTour),
    ("actors", "an actor on a serial queue, pool tasks, main-actor updates", runActors),
    ("tee", "copy INPUT (- for stdin) to stdout and a file, through I/O channels", runTee),
  ]

_ = programStart  // seed programs print times since now
let arguments = CommandLine.arguments.dropFirst()
let requested = arguments.first ?? "loop"
if requested == "help" || requested == "--help" {
  print("usage: Examples [subcommand]\n")
  for command in subcommands { print("  \(command.name.padding(12))\(command.summary)") }
  exit(0)
}
guard let command = subcommands.first(where: { $0.name == requested }) else {
  writeError("Examples: unknown subcommand '\(requested)'; try 'Examples help'\n")
  exit(2)
}
exit(command.run(Array(arguments.dropFirst())))

func writeError(_ text: String) {
  _ = text.withCString { write(2, $0, strlen($0)) }
}

extension String {
  func padding(_ width: Int) -> String {
    count >= width ? self + " " : self + String(repeating: " ", count: width - count)
  }
}
