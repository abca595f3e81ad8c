import CLoopDispatchAutoInstall
import LoopDispatch

/// Called by the load-time constructor in `CLoopDispatchAutoInstall` (autoinstall.c), before
/// `main`: installs LoopDispatch as Swift's main and default executors.
@_cdecl("_loopdispatch_install_at_load")
public func installAtLoad() {
  ConcurrencyIntegration.install()
}

/// Whether the load-time constructor's object is linked (always 1 once this module is: the
/// reference keeps the object in a static link).
public var autoInstallLinked: Bool { loopdispatch_auto_install_linked == 1 }
