/* What interp_internals.c (the one file compiled against CPython's internal headers) offers the
 * sampler: the GIL's state, the main thread, the switch interval and a thread's frames, read in
 * place, plus the clock every C source shares. Include after <Python.h>. */
#ifndef FLAMEPROF_INTERP_INTERNALS_H
#define FLAMEPROF_INTERP_INTERNALS_H

/* Seconds on CLOCK_MONOTONIC: time.perf_counter()'s clock on Linux. */
double flameprof_monotonic(void);

/* The main thread's state (call with the GIL). */
PyThreadState *flameprof_main_thread_state(PyInterpreterState *interp);
/* The thread state holding the GIL, or NULL when it is free (read without a lock: a hint). */
PyThreadState *flameprof_gil_holder(PyInterpreterState *interp);
/* The number of threads waiting for the GIL (a hint), or -1 where it cannot be read. */
int flameprof_gil_waiters(PyInterpreterState *interp);
/* Ask the holder to let the GIL go and hold the GIL's mutex with the GIL free, before ``until``:
 * 1 when frozen (end it with flameprof_gil_thaw), 0 otherwise. ``*asked``: the thread asked. */
int flameprof_gil_freeze(PyInterpreterState *interp, double until, double watch, PyThreadState **asked);
/* End the freeze; 1 when it woke ``asked`` to take the GIL back (nobody else waited for it). */
int flameprof_gil_thaw(PyInterpreterState *interp, PyThreadState *asked);
/* Whether ``asked`` still waits for another thread to take the GIL it let go (a hint). */
int flameprof_switch_pending(PyInterpreterState *interp, PyThreadState *asked);
#if PY_VERSION_HEX < 0x030D0000
/* Raise the eval-breaker flag while ``main`` holds the GIL, so it runs a pending call at once. */
void flameprof_wake_main_thread(PyInterpreterState *interp, PyThreadState *main);
#endif
#if PY_VERSION_HEX >= 0x030C0000
/* The per-interpreter switch interval (microseconds), reachable without a thread state. */
unsigned long *flameprof_switch_interval_slot(PyInterpreterState *interp);
#endif

/* Whether CPython has finished making ``ts`` (a walk of the thread list can meet one it is making). */
int flameprof_thread_made(PyThreadState *ts);
/* A thread's frames, innermost first: 3.11+ interpreter frames, 3.10 frame objects. */
void *flameprof_frame_first(PyThreadState *ts);
void *flameprof_frame_next(void *frame);
PyCodeObject *flameprof_frame_code(void *frame);
PyObject *flameprof_frame_object(void *frame);
#if PY_VERSION_HEX >= 0x030B0000
PyObject *flameprof_frame_first_local(void *frame);
void *flameprof_frame_of(PyFrameObject *frame);
#endif

#endif
