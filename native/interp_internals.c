/* Fields inside the interpreter that the sampler reads or sets, from the internal headers (this
 * file alone is compiled as part of the core):
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
 * - a thread's interpreter frames (3.11+), walked in place: PyThreadState_GetFrame() and
 *   PyFrame_GetBack() make a frame object for every frame that has none, which in a training loop
 *   (new frames every step) was a few allocations per sample, and a deallocation the program paid
 *   for when each frame returned.
 */
#include <patchlevel.h>
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX < 0x030D0000
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>  /* _PyRuntime: the main thread, the GIL before 3.12 */
#endif
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#endif

#if PY_VERSION_HEX < 0x030D0000
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

#if PY_VERSION_HEX >= 0x030B0000
/* The first frame from ``frame`` outward that has started running its code (the one
 * PyThreadState_GetFrame() and PyFrame_GetBack() would return), or NULL. */
static _PyInterpreterFrame *
first_complete(_PyInterpreterFrame *frame)
{
    while (frame != NULL && _PyFrame_IsIncomplete(frame))
        frame = frame->previous;
    return frame;
}

/* The innermost frame of ``ts`` (call with the GIL; valid until Python code runs). */
void *
flameprof_frame_first(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030D0000
    return first_complete(ts->current_frame);
#else
    return first_complete(ts->cframe->current_frame);
#endif
}

void *
flameprof_frame_next(void *frame)
{
    return first_complete(((_PyInterpreterFrame *)frame)->previous);
}

/* Borrowed. */
PyCodeObject *
flameprof_frame_code(void *frame)
{
#if PY_VERSION_HEX >= 0x030D0000
    return _PyFrame_GetCode((_PyInterpreterFrame *)frame);
#else
    return ((_PyInterpreterFrame *)frame)->f_code;
#endif
}

/* The frame's frame object (borrowed), or NULL while nothing asked for one. */
PyObject *
flameprof_frame_object(void *frame)
{
    return (PyObject *)((_PyInterpreterFrame *)frame)->frame_obj;
}

/* The value of the frame's first local slot (borrowed; NULL when unset). */
PyObject *
flameprof_frame_first_local(void *frame)
{
    return ((_PyInterpreterFrame *)frame)->localsplus[0];
}

/* The interpreter frame behind a frame object (the object's own copy once the frame has returned). */
void *
flameprof_frame_of(PyFrameObject *frame)
{
    return frame->f_frame;
}
#endif
