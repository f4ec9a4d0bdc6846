/* Two fields inside the interpreter that the sampler's clock thread touches before 3.13, from
 * the internal headers (this file alone is compiled as part of the core):
 *
 * - the eval-breaker flag (3.10-3.12): a pending call added from another thread than the main one
 *   does not set it there (the flag is computed for the calling thread, which cannot run pending
 *   calls), so the main thread would notice the call only at its next GIL switch. The clock sets
 *   the flag, as a thread waiting for the GIL sets it to ask for a switch: the thread running
 *   Python then checks its pending work at its next bytecode boundary, and the main thread runs
 *   the sample itself without handing the GIL over. 3.13 sets it for the main thread itself.
 * - the GIL switch interval (3.12), which the clock lowers for its own wait (see acquire_gil()
 *   in sampler.c): 3.12's _PyEval_SetSwitchInterval() finds the interpreter through the calling
 *   thread's current thread state, which a thread waiting for the GIL does not have.
 */
#include <patchlevel.h>
#if PY_VERSION_HEX < 0x030D0000
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_interp.h>

void
flameprof_wake_eval_loop(PyInterpreterState *interp)
{
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
}

#if PY_VERSION_HEX >= 0x030C0000
unsigned long *
flameprof_switch_interval_slot(PyInterpreterState *interp)
{
    return &interp->ceval.gil->interval;
}
#endif
#endif
