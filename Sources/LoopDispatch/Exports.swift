// LoopDispatch builds GCD's model on the MainLoop reactor; its types (`EventLoop`,
// `Deadline`, `WallDeadline`) are part of LoopDispatch's public vocabulary.
@_exported public import MainLoop
