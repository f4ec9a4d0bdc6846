/* What sampler.c offers the clock thread (clock.c): the sampler, opaque, and a sample of it taken
 * with the GIL or with the interpreter frozen. Include after <Python.h>. */
#ifndef FLAMEPROF_SAMPLER_H
#define FLAMEPROF_SAMPLER_H

/* flameprof._native.Sampler's object. */
typedef struct Sampler Sampler;

/* The GIL at a tick, read by the clock before the sample is taken: the thread state holding it
 * (NULL: free; never dereferenced) and the number of threads waiting for it (-1: unknown). */
typedef struct {
    PyThreadState *holder;
    int waiters;
} GilAtTick;

/* One sample of every thread but ``exclude``, with the GIL, stamped ``tick`` (0: now), with the GIL
 * at the tick (NULL: unknown): 0, or -1 with an exception set when out of memory. */
int flameprof_take_sample(Sampler *s, unsigned long exclude, double tick, const GilAtTick *gil);
/* The same while ``interp`` is frozen (no thread holds the GIL or can take it), called without a
 * thread state: 1 when taken; 0 when only a sample with the GIL can take it (nothing recorded). */
int flameprof_take_frozen_sample(Sampler *s, PyInterpreterState *interp, unsigned long exclude, double tick,
                                 const GilAtTick *gil);
/* The previous-tick time is now (Sampler.mark_start). */
void flameprof_sampler_mark_start(Sampler *s);
/* The clock watched nothing for ``seconds`` since the previous tick: the next ticks carry them (call with the GIL). */
void flameprof_sampler_unwatched(Sampler *s, double seconds);

#endif
