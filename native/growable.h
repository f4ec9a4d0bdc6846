/* The sampler's growable arrays (sampler.c: its rows, ticks, threads, stack arena and per-tick
 * scratch). Plain malloc: large ones are mmap-backed, untouched pages cost no RSS; not PyMem_Raw*,
 * whose tracemalloc hook takes the GIL, which a frozen sample must not ask for. Inline: GROW runs
 * for every frame of every sample. Include after <Python.h>. */
#ifndef FLAMEPROF_GROWABLE_H
#define FLAMEPROF_GROWABLE_H

#include <stdlib.h>

/* Set on the clock thread while it samples a frozen interpreter: no Python exception can be set
 * there (the thread holds no thread state), so a failed allocation only fails. Defined in
 * sampler.c; read here and by the hash map (hash_map.c). */
extern _Thread_local int flameprof_no_thread_state;

static inline int
grow(void **buf, Py_ssize_t *cap, Py_ssize_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    Py_ssize_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*buf, (size_t)n * item);
    if (p == NULL) {
        if (!flameprof_no_thread_state)
            PyErr_NoMemory();
        return -1;
    }
    *buf = p;
    *cap = n;
    return 0;
}

/* Make ``arr`` (its capacity in ``cap``) hold at least ``need`` items: 0, or -1 out of memory. */
#define GROW(arr, cap, need) grow((void **)&(arr), &(cap), (need), sizeof(*(arr)))

#endif
