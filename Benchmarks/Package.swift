// swift-tools-version: 6.0
// LoopDispatch benchmarks: LoopDispatch against raw libevent and Apple's Dispatch, one table;
// and the HTTP servers that scripts/wrk-servers.sh (`make bench-http`) loads with wrk.
// Run from the repository root with `make bench`, or here with
// `swift run -c release Benchmarks [filter...] [--repeat N]`.
import PackageDescription

let package = Package(
  name: "Benchmarks",
  dependencies: [
    // The root package; its directory is not called "LoopDispatch", so name it explicitly.
    .package(name: "LoopDispatch", path: "..")
  ],
  targets: [
    // The baseline: libevent driven directly from C, no Swift in the hot path.
    .target(
      name: "CRawLibevent",
      linkerSettings: [.linkedLibrary("event_core")]
    ),
    .executableTarget(
      name: "Benchmarks",
      dependencies: [
        "CRawLibevent",
        .product(name: "MainLoop", package: "LoopDispatch"),
        .product(name: "LoopDispatch", package: "LoopDispatch"),
      ],
      swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
    ),
    // The `Examples serve` HTTP server written with Apple's Dispatch instead of LoopDispatch:
    // the baseline that scripts/wrk-servers.sh loads with wrk next to `Examples serve`.
    .executableTarget(
      name: "DispatchServe",
      dependencies: [.product(name: "ExampleHTTP", package: "LoopDispatch")],
      swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
    ),
    // The same routes on libevent's own HTTP server (evhttp), in C, on one event_base and one
    // thread: the third server that scripts/wrk-servers.sh loads.
    .executableTarget(
      name: "EvhttpServe",
      cSettings: [.unsafeFlags(["-Wall", "-Wextra", "-Werror"])],
      linkerSettings: [.linkedLibrary("event_extra"), .linkedLibrary("event_core")]
    ),
  ],
  swiftLanguageModes: [.v6]
)
