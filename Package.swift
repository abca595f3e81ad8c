// swift-tools-version: 6.3
// LoopDispatch: Grand Central Dispatch's programming model on a libevent loop.
// Tools version 6.3: `ConcurrencyIntegration`
// (Sources/LoopDispatch/Concurrency/Executors+Experimental.swift) uses the custom main and
// default executor interface that Swift 6.3 introduced; an older toolchain stops here with
// "package requires minimum Swift tools version 6.3".
import PackageDescription

let strict: [SwiftSetting] = [
  .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
  name: "LoopDispatch",
  products: [
    .library(name: "MainLoop", targets: ["MainLoop"]),
    .library(name: "LoopDispatch", targets: ["LoopDispatch"]),
    // LoopDispatch installed as Swift's executors at load time (a C constructor): depend on it
    // and call nothing.
    .library(name: "LoopDispatchAutoInstall", targets: ["LoopDispatchAutoInstall"]),
    .executable(name: "Examples", targets: ["Examples"]),
    // HTTP parsing and sockets for the example servers (ours and the Dispatch rival in
    // Benchmarks); not part of the runtime.
    .library(name: "ExampleHTTP", targets: ["ExampleHTTP"]),
    // The GCD C API (`#include <dispatch/dispatch.h>`): libloopdispatch.so and a static form.
    .library(name: "loopdispatch", type: .dynamic, targets: ["CDispatch", "LoopDispatchC"]),
    .library(
      name: "loopdispatch-static", type: .static, targets: ["CDispatch", "LoopDispatchC"]),
  ],
  targets: [
    // libevent_core through pkg-config; libevent_pthreads is linked by name because its .pc
    // file drags in the full libevent and loads duplicate symbols.
    .systemLibrary(
      name: "CLibevent",
      pkgConfig: "libevent_core",
      providers: [.apt(["libevent-dev"])]
    ),
    // Header-only wrappers for Linux calls that Glibc does not expose to Swift.
    .systemLibrary(name: "CLoopShims"),
    // LoopDispatch's thread-local slots: defined once, initial-exec TLS (see its header).
    .target(name: "CLoopThreadSlots", cSettings: [.unsafeFlags(["-Wall", "-Werror"])]),
    .target(
      name: "MainLoop",
      dependencies: ["CLibevent", "CLoopShims"],
      swiftSettings: strict
    ),
    .target(
      name: "LoopDispatch",
      dependencies: ["MainLoop", "CLoopShims", "CLoopThreadSlots"],
      swiftSettings: strict
    ),
    .target(
      name: "CLoopDispatchAutoInstall", cSettings: [.unsafeFlags(["-Wall", "-Werror"])]),
    .target(
      name: "LoopDispatchAutoInstall", dependencies: ["LoopDispatch", "CLoopDispatchAutoInstall"],
      swiftSettings: strict),
    .target(name: "ExampleHTTP", swiftSettings: strict),
    // The GCD C API: the header tree and the parts that need C (block forms, queue
    // attributes, dispatch_once, dispatch_debug)...
    .target(
      name: "CDispatch",
      cSettings: [.unsafeFlags(["-fblocks", "-Wall", "-Werror"])],
      linkerSettings: [.linkedLibrary("BlocksRuntime")]
    ),
    // ...and the rest, in Swift (`@_cdecl` entry points over LoopDispatch).
    .target(
      name: "LoopDispatchC",
      dependencies: ["LoopDispatch", "MainLoop", "CLoopShims"],
      swiftSettings: strict
    ),
    .executableTarget(
      name: "Examples",
      dependencies: ["LoopDispatch", "MainLoop", "ExampleHTTP"],
      swiftSettings: strict
    ),
    // Latches and shared cells for the test suites (no Dispatch needed to synchronise).
    .target(name: "TestSupport", path: "Tests/TestSupport"),
    .testTarget(
      name: "MainLoopTests", dependencies: ["MainLoop", "CLibevent", "CLoopShims", "TestSupport"]),
    // Scenarios that must run on the process main thread (the main queue, runMain): the
    // LoopDispatch tests launch this program and check its output.
    .executableTarget(
      name: "LoopDispatchTestHost", dependencies: ["LoopDispatch", "TestSupport"],
      path: "Tests/LoopDispatchTestHost", swiftSettings: strict),
    // Entry shapes of a Swift program (an async @main, top-level await), each its own
    // program, launched by MainActorIntegrationTests; the checks they share.
    .target(
      name: "EntryShapeChecks", dependencies: ["LoopDispatch", "MainLoop"],
      path: "Tests/EntryShapeChecks", swiftSettings: strict),
    .executableTarget(
      name: "AsyncMainHost", dependencies: ["LoopDispatch", "EntryShapeChecks"],
      path: "Tests/AsyncMainHost", swiftSettings: strict),
    .executableTarget(
      name: "TopLevelAwaitHost", dependencies: ["LoopDispatch", "EntryShapeChecks"],
      path: "Tests/TopLevelAwaitHost", swiftSettings: strict),
    // Not a dependency of any test target, on purpose: SwiftPM links the executables a test
    // target depends on into its one test binary, which would bring the load-time
    // constructor into the test runner. `swift build --build-tests` builds it all the same,
    // and MainQueueTests runs the built program.
    .executableTarget(
      name: "AutoInstallHost", dependencies: ["LoopDispatchAutoInstall", "EntryShapeChecks"],
      path: "Tests/AutoInstallHost", swiftSettings: strict),
    .testTarget(
      name: "LoopDispatchTests",
      dependencies: [
        "LoopDispatch", "TestSupport", "LoopDispatchTestHost", "AsyncMainHost",
        "TopLevelAwaitHost", "CLoopShims",
      ]),
    .testTarget(name: "ExamplesTests", dependencies: ["Examples", "TestSupport"]),
    // The request parser alone: its rules, one test each (the fuzz target is Fuzz/).
    .testTarget(name: "ExampleHTTPTests", dependencies: ["ExampleHTTP"]),
    // Large-volume runs: a small size in `make test`, the full size with
    // LOOPDISPATCH_STRESS=full (see README).
    .testTarget(name: "StressTests", dependencies: ["LoopDispatch", "TestSupport"]),
    // The pool's wake-up protocol as a model, explored over every interleaving (pure Swift,
    // no dependencies). Optimised even in debug builds: the search visits six million states,
    // about 12 s optimised and several minutes without.
    .testTarget(name: "PoolModelTests", swiftSettings: [.unsafeFlags(["-O"])]),
  ],
  swiftLanguageModes: [.v6]
)
