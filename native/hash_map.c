/* The sampler's hash map, its inserts and its clearing: see hash_map.h, where its lookup is (inline,
 * for the per-frame path). Kept apart from sampler.c, which only uses it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "growable.h"  /* flameprof_no_thread_state */
#include "hash_map.h"

int
flameprof_map_put(Map *m, uintptr_t a, uintptr_t b, uintptr_t c, int64_t value)
{
    if ((m->len + 1) * 2 > m->cap) {
        Py_ssize_t ncap = m->cap ? m->cap * 2 : 256;
        Entry *slots = calloc((size_t)ncap, sizeof(Entry));
        if (slots == NULL) {
            if (!flameprof_no_thread_state)
                PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t j = 0; j < m->cap; j++) {
            Entry *e = &m->slots[j];
            if (!e->used)
                continue;
            Py_ssize_t k = (Py_ssize_t)(map_hash3(e->a, e->b, e->c) & (uint64_t)(ncap - 1));
            while (slots[k].used)
                k = (k + 1) & (ncap - 1);
            slots[k] = *e;
        }
        free(m->slots);
        m->slots = slots;
        m->cap = ncap;
    }
    Py_ssize_t mask = m->cap - 1, i = (Py_ssize_t)(map_hash3(a, b, c) & (uint64_t)mask);
    while (m->slots[i].used) {
        Entry *e = &m->slots[i];
        if (e->a == a && e->b == b && e->c == c) {
            e->value = value;
            return 0;
        }
        i = (i + 1) & mask;
    }
    m->slots[i] = (Entry){a, b, c, value, 1};
    m->len++;
    return 0;
}

void
flameprof_map_clear(Map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->len = 0;
}
