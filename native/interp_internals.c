/* Fields inside the interpreter that the sampler reads or sets, from the internal headers (this
 * file alone is compiled as part of the core):
 *
 * - the eval-breaker flag (3.10-3.12): a pending call added from another thread than the main one
 *   does not set it there (the flag is computed for the calling thread, which cannot run pending
 *   calls), so the main thread would notice the call only at its next GIL switch. While the main
 *   thread holds the GIL (the GIL state's holder), the clock sets the flag, as a thread waiting
 *   for the GIL sets it to ask for a switch: the main thread then runs the sample itself at its
 *   next bytecode boundary without handing the GIL over. 3.13 sets it for the main thread itself.
 * - the GIL's holder and the number of threads waiting for it, read at each tick for the samples'
 *   GIL states (flameprof_gil_waiters() reads glibc's condition variables).
 * - the GIL's holder, its drop request and its mutex: at a tick when a thread other than the main
 *   one holds the GIL, the clock asks it to let the GIL go at its next bytecode boundary and
 *   samples while holding the GIL's mutex with the GIL free, so that the sample shows every thread
 *   where it was at the tick (flameprof_gil_freeze(); clock.c, sample_frozen()).
 * - the GIL switch interval (3.12+), which the clock lowers for its own wait (see acquire_gil()
 *   in clock.c): 3.12's _PyEval_SetSwitchInterval() finds the interpreter through the calling
 *   thread's current thread state, which a thread waiting for the GIL does not have, and 3.13
 *   keeps it internal.
 * - a thread's interpreter frames (3.11+), walked in place: PyThreadState_GetFrame() and
 *   PyFrame_GetBack() make a frame object for every frame that has none, which in a training loop
 *   (new frames every step) was a few allocations per sample, and a deallocation the program paid
 *   for when each frame returned.
 */
#include <patchlevel.h>
#define Py_BUILD_CORE 1
#include <Python.h>
#include <pthread.h>
#include <time.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>  /* _PyRuntime: the main thread, the GIL before 3.12 */
#if PY_VERSION_HEX >= 0x030D0000
#include <internal/pycore_ceval.h>    /* the eval-breaker bits */
#endif
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>              /* 3.10: the frame object's fields */
#endif

#include "interp_internals.h"

/* The GIL's state (3.10 and 3.11 keep one for the process, 3.12+ one per interpreter). */
static struct _gil_runtime_state *
gil_of(PyInterpreterState *interp)
{
#if PY_VERSION_HEX >= 0x030C0000
    return interp->ceval.gil;
#else
    (void)interp;
    return &_PyRuntime.ceval.gil;
#endif
}

/* The main thread's state (call with the GIL). */
PyThreadState *
flameprof_main_thread_state(PyInterpreterState *interp)
{
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL; ts = PyThreadState_Next(ts))
        if (ts->thread_id == _PyRuntime.main_thread)
            return ts;
    return NULL;
}

/* The last thread state to take the GIL (or, after a freeze, the clock's). */
static PyThreadState *
last_holder(struct _gil_runtime_state *gil)
{
#if PY_VERSION_HEX >= 0x030D0000
    return _Py_atomic_load_ptr_relaxed(&gil->last_holder);
#else
    return (PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder);
#endif
}

/* The thread state holding the GIL, or NULL while it is free (exact with the GIL's mutex held,
 * else a hint). */
static PyThreadState *
holding(struct _gil_runtime_state *gil)
{
#if PY_VERSION_HEX >= 0x030D0000
    return _Py_atomic_load_int_relaxed(&gil->locked) ? last_holder(gil) : NULL;
#else
    return _Py_atomic_load_relaxed(&gil->locked) ? last_holder(gil) : NULL;
#endif
}

/* The thread state holding the GIL, or NULL: a hint, never dereferenced. */
PyThreadState *
flameprof_gil_holder(PyInterpreterState *interp)
{
    return holding(gil_of(interp));
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 25))
#define COUNTED_WAITERS 1  /* glibc counts a condition's waiters */
#else
#define COUNTED_WAITERS 0
#endif

#if COUNTED_WAITERS
/* The threads waiting on a condition: since glibc 2.25 each adds 8 to ``__wrefs`` while it waits. */
static int
cond_waiters(PyCOND_T *cond)
{
    return (int)(__atomic_load_n(&((pthread_cond_t *)cond)->__data.__wrefs, __ATOMIC_RELAXED) >> 3);
}
#endif

/* The number of threads waiting for the GIL, or -1 where it cannot be read (not glibc): those
 * waiting on its condition for it to be let go, and those that let it go at a switch request
 * and wait on the switch condition for another thread to take it (FORCE_SWITCHING), read from
 * glibc's condition variables. A hint, read without a lock: a waiter that was woken counts until
 * it has run and left the wait (under load, while it waits for a CPU), and one whose timed wait
 * ran out (every switch interval) does not while it looks at the GIL. The clock's own wait on the
 * condition (flameprof_gil_freeze) is over before the next tick reads it. */
int
flameprof_gil_waiters(PyInterpreterState *interp)
{
#if COUNTED_WAITERS
    struct _gil_runtime_state *gil = gil_of(interp);
    return cond_waiters(&gil->cond) + cond_waiters(&gil->switch_cond);
#else
    (void)interp;
    return -1;
#endif
}

/* Seconds on CLOCK_MONOTONIC (the sampler's clock for ticks and samples too). */
double
flameprof_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Ask ``holder`` to let the GIL go at its next bytecode boundary, as a thread that has waited a
 * switch interval for it does (with the GIL's mutex held, as it does: the holder cannot release
 * the GIL, let alone end, meanwhile). Whoever takes the GIL next clears the request. */
static void
request_drop(PyInterpreterState *interp, PyThreadState *holder)
{
#if PY_VERSION_HEX >= 0x030D0000
    (void)interp;
    _Py_set_eval_breaker_bit(holder, _PY_GIL_DROP_REQUEST_BIT);
#else
    (void)holder;
    _Py_atomic_store_relaxed(&interp->ceval.gil_drop_request, 1);
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
#endif
}

/* Freeze the interpreter: return 1 holding the GIL's mutex with the GIL free, so that no thread
 * can take the GIL, run Python or change a frame until flameprof_gil_thaw(); 0 (nothing held)
 * when the GIL is still held at ``until`` (monotonic seconds).
 *
 * The thread holding the GIL at the call is asked to let it go at its next bytecode boundary
 * (``*asked``), and the clock watches for that for up to ``watch`` seconds, taking the GIL's
 * mutex the moment it is let go (before a thread waiting for the GIL, which must first be woken,
 * does). If a
 * waiting thread takes the GIL first, it is not asked: it runs its turn (asked at once each time,
 * a thread that had waited for the GIL would get none), and the clock waits on the GIL's
 * condition, as a waiting thread does but without taking the GIL, until it is free. */
int
flameprof_gil_freeze(PyInterpreterState *interp, double until, double watch, PyThreadState **asked)
{
    struct _gil_runtime_state *gil = gil_of(interp);
    pthread_mutex_lock(&gil->mutex);
    *asked = holding(gil);
    if (*asked == NULL)
        return 1;
    request_drop(interp, *asked);
    pthread_mutex_unlock(&gil->mutex);
    double watch_until = flameprof_monotonic() + watch;
    PyThreadState *holder;
    while ((holder = holding(gil)) == *asked || holder == NULL) {
        /* the GIL let go: its mutex may still be held by the thread letting go, which then wakes
         * a waiting thread; trying (not waiting: that would sleep) takes it first */
        if (holder == NULL && pthread_mutex_trylock(&gil->mutex) == 0) {
            if (holding(gil) == NULL)
                return 1;
            pthread_mutex_unlock(&gil->mutex);
        }
        if (flameprof_monotonic() >= watch_until)
            break;
    }
    pthread_mutex_lock(&gil->mutex);
    while (holding(gil) != NULL) {
        double now = flameprof_monotonic();
        if (now >= until) {
            pthread_mutex_unlock(&gil->mutex);
            return 0;
        }
        double wake = now + 50e-6 < until ? now + 50e-6 : until;
        struct timespec ts = {(time_t)wake, (long)((wake - (double)(time_t)wake) * 1e9)};
        pthread_cond_clockwait(&gil->cond, &gil->mutex, CLOCK_MONOTONIC, &ts);
    }
    return 1;
}

/* Whether ``asked``, which let the GIL go at the clock's request, still waits for another thread to
 * take it (FORCE_SWITCHING in ceval_gil.c: a thread that lets the GIL go while a drop request is
 * pending waits for the switch) and none has (read without a lock: a hint). */
int
flameprof_switch_pending(PyInterpreterState *interp, PyThreadState *asked)
{
    struct _gil_runtime_state *gil = gil_of(interp);
    return asked != NULL && holding(gil) == NULL && last_holder(gil) == asked;
}

/* End a freeze. The clock may have been woken in place of a thread waiting for the GIL: wake one
 * (a waiting thread that finds the GIL taken waits again). When none waits for the GIL, ``asked``
 * (which let it go at the clock's request and now waits for another thread to take it,
 * FORCE_SWITCHING) would wait until the clock took the GIL and gave it back: it is woken here
 * instead, as a thread taking the GIL wakes it (its switch condition, under the switch mutex,
 * which CPython takes after the GIL's mutex too), so it takes the GIL back at once. Only when it
 * is seen waiting there: one that has yet to look at the switch would miss the signal (it then
 * waits as before). Returns 1 when it was woken. Without glibc's counts, 0. */
int
flameprof_gil_thaw(PyInterpreterState *interp, PyThreadState *asked)
{
    struct _gil_runtime_state *gil = gil_of(interp);
    int woken = 0;
#if COUNTED_WAITERS
    if (asked != NULL && cond_waiters(&gil->cond) == 0) {
        pthread_mutex_lock(&gil->switch_mutex);
        if (last_holder(gil) == asked && cond_waiters(&gil->switch_cond) > 0) {
            pthread_cond_signal(&gil->switch_cond);
            woken = 1;
        }
        pthread_mutex_unlock(&gil->switch_mutex);
    }
#else
    (void)asked;
#endif
    pthread_cond_signal(&gil->cond);
    pthread_mutex_unlock(&gil->mutex);
    return woken;
}

#if PY_VERSION_HEX < 0x030D0000
/* Raise the eval-breaker flag if ``main`` holds the GIL (the holder is read without a lock: a
 * hint). Only then: a thread that cannot run the pending call leaves the flag raised (before 3.13
 * on Linux nothing lowers it until its next GIL switch), and would check its pending work at every
 * bytecode boundary meanwhile. */
void
flameprof_wake_main_thread(PyInterpreterState *interp, PyThreadState *main)
{
    if (flameprof_gil_holder(interp) == main)
        _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
}

#endif

#if PY_VERSION_HEX >= 0x030C0000
unsigned long *
flameprof_switch_interval_slot(PyInterpreterState *interp)
{
    return &gil_of(interp)->interval;
}
#endif

int
flameprof_thread_made(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    /* 3.11's new_threadstate() puts a copy of its blank thread state at the head of the list, then
     * fills it in (init_threadstate()); a thread that takes the GIL from C (PyGILState_Ensure(),
     * pybind11's gil_scoped_acquire on a torch thread) makes its state without the GIL, so a walk
     * of the list can meet one half made: its cframe, set near the end, still NULL */
    return __atomic_load_n(&ts->cframe, __ATOMIC_ACQUIRE) != NULL;
#else
    (void)ts;  /* 3.10 fills a state in before it links it, 3.12+ too (init, then add) */
    return 1;
#endif
}

#if PY_VERSION_HEX < 0x030B0000
/* 3.10: the frame objects are the frames (a thread's innermost, with the GIL or frozen). */
void *
flameprof_frame_first(PyThreadState *ts)
{
    return ts->frame;
}

void *
flameprof_frame_next(void *frame)
{
    return ((PyFrameObject *)frame)->f_back;
}

PyCodeObject *
flameprof_frame_code(void *frame)
{
    return ((PyFrameObject *)frame)->f_code;
}

PyObject *
flameprof_frame_object(void *frame)
{
    return (PyObject *)frame;
}
#else
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
