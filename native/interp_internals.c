/* Two fields inside the interpreter that the sampler's clock thread touches before 3.13, from
 * the internal headers (this file alone is compiled as part of the core):
 *
 * - the eval-breaker flag (3.10-3.12): a pending call added from another thread than the main one
 *   does not set it there (the flag is computed for the calling thread, which cannot run pending
 *   calls), so the main thread would notice the call only at its next GIL switch. While the main
 *   thread holds the GIL (the GIL state's holder), the clock sets the flag, as a thread waiting
 *   for the GIL sets it to ask for a switch: the main thread then runs the sample itself at its
 *   next bytecode boundary without handing the GIL over. 3.13 sets it for the main thread itself.
 * - the GIL switch interval (3.12), which the clock lowers for its own wait (see acquire_gil()
 *   in sampler.c): 3.12's _PyEval_SetSwitchInterval() finds the interpreter through the calling
 *   thread's current thread state, which a thread waiting for the GIL does not have.
 */
#include <patchlevel.h>
#if PY_VERSION_HEX < 0x030D0000
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>  /* _PyRuntime: the main thread, the GIL before 3.12 */

/* The main thread's state (call with the GIL). */
PyThreadState *
flameprof_main_thread_state(PyInterpreterState *interp)
{
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL; ts = PyThreadState_Next(ts))
        if (ts->thread_id == _PyRuntime.main_thread)
            return ts;
    return NULL;
}

/* Raise the eval-breaker flag if ``main`` holds the GIL (the holder is read without a lock: a
 * hint). Only then: a thread that cannot run the pending call leaves the flag raised (before 3.13
 * on Linux nothing lowers it until its next GIL switch), and would check its pending work at every
 * bytecode boundary meanwhile. */
void
flameprof_wake_main_thread(PyInterpreterState *interp, PyThreadState *main)
{
#if PY_VERSION_HEX >= 0x030C0000
    struct _gil_runtime_state *gil = interp->ceval.gil;
#else
    struct _gil_runtime_state *gil = &_PyRuntime.ceval.gil;
#endif
    if (_Py_atomic_load_relaxed(&gil->locked) && (PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder) == main)
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
