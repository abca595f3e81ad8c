// LoopDispatch installed at load time: a constructor, run by the dynamic loader before
// `main` (and before any Swift code of the program), installs LoopDispatch as Swift's main
// and default executors (`ConcurrencyIntegration.install()`, through the Swift function
// below). For programs that cannot call anything first: an `async` `@main` whose first line
// already runs on the main executor, or a library-heavy program whose static initialisers
// start tasks. Depend on the `LoopDispatchAutoInstall` product; nothing to call.
#include "autoinstall.h"

extern void _loopdispatch_install_at_load(void);

__attribute__((constructor)) static void loopdispatch_auto_install(void) {
  _loopdispatch_install_at_load();
}

// Referenced by the Swift module, so that a program linking it keeps this object (and with it
// the constructor) even from an archive.
const int loopdispatch_auto_install_linked = 1;
