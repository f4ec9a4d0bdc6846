/* The C readers' hash of a byte string (a word at a time, then a murmur-style finaliser): the
 * folded-text parser's frame labels and stack paths (folded.c) and the perf collapser's cached
 * frame blocks (perf_collapse.c). Include after Python.h. */
#ifndef FLAMEPROF_BYTE_HASH_H
#define FLAMEPROF_BYTE_HASH_H

#include <stdint.h>
#include <string.h>

static inline uint64_t
hash_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static inline uint64_t
hash_bytes(const char *s, Py_ssize_t n, uint64_t seed)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n ^ seed;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xc2b2ae3d27d4eb4fULL;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, s, (size_t)n);
        h = (h ^ w) * 0xc2b2ae3d27d4eb4fULL;
    }
    return hash_mix(h);
}

#endif
