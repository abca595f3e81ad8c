#ifndef LOOPDISPATCH_AUTOINSTALL_H
#define LOOPDISPATCH_AUTOINSTALL_H

// Set to 1 by the object that holds the load-time constructor (see autoinstall.c).
extern const int loopdispatch_auto_install_linked;

#endif
