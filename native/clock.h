/* What clock.c (the clock thread, one per process) offers the module in sampler.c: starting and
 * stopping it, its counts, and its state across a fork. Include after <Python.h>. */
#ifndef FLAMEPROF_CLOCK_H
#define FLAMEPROF_CLOCK_H

#include "sampler.h"

/* Once per process, at the module's first import: the clock's condition and its fork handlers. */
void flameprof_clock_init(void);
/* Sampler.start_clock(interval, on_slow, slow_interval): sample ``s`` every interval from a C thread. */
PyObject *flameprof_start_clock(Sampler *s, PyObject *args);
/* The module's stop_clock(), clock_running() and clock_stats(). */
PyObject *flameprof_stop_clock(PyObject *unused1, PyObject *unused2);
PyObject *flameprof_clock_running(PyObject *unused1, PyObject *unused2);
PyObject *flameprof_clock_stats(PyObject *unused1, PyObject *unused2);
/* In a forked child (Sampler.reset_threads, with the GIL): give back the switch interval the
 * parent's clock had lowered for a wait the fork cut short. */
void flameprof_clock_after_fork(void);

#endif
