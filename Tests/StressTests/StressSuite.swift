import Testing

/// The stress suites, run one test at a time: each measures its own throughput, peak memory
/// and peak thread count, and the descriptor test compares the process's open descriptors
/// with a baseline, so they must not share the process with each other.
///
/// Every test checks that nothing is lost, nothing runs twice and the final counts are exact;
/// completion is awaited on latches and groups with generous timeouts, never on sleeps.
@Suite(.serialized) enum Stress {}
