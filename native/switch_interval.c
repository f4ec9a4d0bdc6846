/* Where CPython 3.12 keeps the GIL switch interval, for the sampler's clock thread.
 *
 * The clock thread lowers the interval while it waits for the GIL (see acquire_gil() in
 * sampler.c). 3.12's _PyEval_SetSwitchInterval() finds the interpreter through the calling
 * thread's current thread state, which a thread waiting for the GIL does not have, and making one
 * current takes the GIL. The interval is one field of the interpreter's GIL state; this file reads
 * its address from the internal headers, so it alone is compiled as part of the core. Other
 * versions do not need it (3.10 and 3.11 keep the interval process-wide, 3.13 samples in a pending
 * call). */
#include <patchlevel.h>
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_interp.h>

unsigned long *
flameprof_switch_interval_slot(PyInterpreterState *interp)
{
    return &interp->ceval.gil->interval;
}
#endif
