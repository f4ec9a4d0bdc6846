/* The sampler's hash map: open addressing, a key of three machine words -> an int64 value, no
 * deletion, only clear. sampler.c keeps its caches in it (code objects, layer hook results, Frame
 * objects, truncation markers) and finds its stacks through it. A lookup runs for every frame of
 * every sample, so it is inline here; an insert, made only for something new, is in hash_map.c.
 * Include after <Python.h>. */
#ifndef FLAMEPROF_HASH_MAP_H
#define FLAMEPROF_HASH_MAP_H

#include <stdint.h>

typedef struct {
    uintptr_t a, b, c;
    int64_t value;
    int used;
} Entry;

typedef struct {
    Entry *slots;
    Py_ssize_t cap, len;
} Map;

static inline uint64_t
map_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static inline uint64_t
map_hash3(uintptr_t a, uintptr_t b, uintptr_t c)
{
    return map_mix((uint64_t)a * 31u + map_mix((uint64_t)b * 17u + (uint64_t)c));
}

/* The entry of key (a, b, c), or NULL. */
static inline Entry *
map_find(Map *m, uintptr_t a, uintptr_t b, uintptr_t c)
{
    if (m->cap == 0)
        return NULL;
    Py_ssize_t mask = m->cap - 1, i = (Py_ssize_t)(map_hash3(a, b, c) & (uint64_t)mask);
    for (;;) {
        Entry *e = &m->slots[i];
        if (!e->used)
            return NULL;
        if (e->a == a && e->b == b && e->c == c)
            return e;
        i = (i + 1) & mask;
    }
}

/* Set key (a, b, c) to ``value``: 0, or -1 out of memory (with an exception set, but on the clock
 * thread sampling a frozen interpreter: see growable.h). */
int flameprof_map_put(Map *m, uintptr_t a, uintptr_t b, uintptr_t c, int64_t value);
/* Free every entry: the map is empty, as new. */
void flameprof_map_clear(Map *m);

#endif
