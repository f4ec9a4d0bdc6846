/* What sampler.c offers the clock thread (clock.c): the sampler, opaque, and a sample of it taken
 * with the GIL or with the interpreter frozen. Include after <Python.h>. */
#ifndef FLAMEPROF_SAMPLER_H
#define FLAMEPROF_SAMPLER_H

/* flameprof._native.Sampler's object. */
typedef struct Sampler Sampler;

/* One sample of every thread but ``exclude``, with the GIL, stamped ``tick`` (0: now): 0, or -1
 * with an exception set when out of memory. */
int flameprof_take_sample(Sampler *s, unsigned long exclude, double tick);
/* The same while ``interp`` is frozen (no thread holds the GIL or can take it), called without a
 * thread state: 1 when taken; 0 when only a sample with the GIL can take it (nothing recorded). */
int flameprof_take_frozen_sample(Sampler *s, PyInterpreterState *interp, unsigned long exclude, double tick);
/* The previous-tick time is now (Sampler.mark_start). */
void flameprof_sampler_mark_start(Sampler *s);

#endif
