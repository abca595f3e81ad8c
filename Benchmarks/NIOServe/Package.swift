// swift-tools-version: 6.1
// NIOServe: the routes of `Examples serve` on SwiftNIO (NIOPosix + NIOHTTP1), the fourth server
// that ../scripts/wrk-servers.sh (`make bench-http`) loads with wrk when NIO_PATH is set. A
// package of its own, so that the root and Benchmarks packages stay free of SwiftNIO.
//
// SwiftNIO comes from a local checkout, never from the network: NIO_PATH names it (an absolute
// path, or relative to this directory), and its own dependencies are its siblings
// ../swift-atomics, ../swift-collections and ../swift-system, which swift-nio's manifest uses
// when SWIFTCI_USE_LOCAL_DEPS is set. So build with both:
//   NIO_PATH=/path/to/swift-nio SWIFTCI_USE_LOCAL_DEPS=1 swift build -c release
import PackageDescription

guard let nioPath = Context.environment["NIO_PATH"], !nioPath.isEmpty else {
  fatalError(
    "NIOServe: set NIO_PATH to a swift-nio checkout whose siblings are swift-atomics, "
      + "swift-collections and swift-system, and SWIFTCI_USE_LOCAL_DEPS=1")
}
// A path dependency's identity is the last component of its path ("swift-nio" as usual).
let nioPackage = String(nioPath.split(separator: "/").last ?? "swift-nio")

let package = Package(
  name: "NIOServe",
  dependencies: [
    .package(path: nioPath),
    // The root package, for ExampleHTTP (fnv1a, Log), as DispatchServe uses it.
    .package(name: "LoopDispatch", path: "../.."),
  ],
  targets: [
    .executableTarget(
      name: "NIOServe",
      dependencies: [
        .product(name: "NIOCore", package: nioPackage),
        .product(name: "NIOPosix", package: nioPackage),
        .product(name: "NIOHTTP1", package: nioPackage),
        .product(name: "ExampleHTTP", package: "LoopDispatch"),
      ],
      // Warnings as errors for this target only (swift-nio, a local path dependency, is built
      // with its own settings and warnings).
      swiftSettings: [
        .enableUpcomingFeature("ExistentialAny"), .unsafeFlags(["-warnings-as-errors"]),
      ]
    )
  ],
  swiftLanguageModes: [.v6]
)
