/* The C readers' hash of a byte string (a word at a time, then a murmur-style finaliser): the
 * folded-text parser's frame labels and stack paths (folded.c), the perf collapser's cached frame
 * blocks (perf_collapse.c) and the Kineto reader's strings (kineto.c). Include after Python.h. */
#ifndef FLAMEPROF_BYTE_HASH_H
#define FLAMEPROF_BYTE_HASH_H

#include <stdint.h>
#include <string.h>

#define HASH_START 0x9e3779b97f4a7c15ULL

static inline uint64_t
hash_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static inline uint64_t
hash_word(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0xc2b2ae3d27d4eb4fULL;
    return h ^ (h >> 31);
}

/* The 1-7 bytes at s as the low bytes of a word (a byte at a time: a short copy through memory
 * would stall the load that follows it). */
static inline uint64_t
tail_word(const char *s, Py_ssize_t n)
{
    uint64_t w = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        w |= (uint64_t)(unsigned char)s[i] << (8 * i);
    return w;
}

static inline uint64_t
hash_bytes(const char *s, Py_ssize_t n, uint64_t seed)
{
    uint64_t h = HASH_START ^ seed;
    Py_ssize_t left = n;
    for (; left >= 8; s += 8, left -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = hash_word(h, w);
    }
    if (left)
        h = hash_word(h, tail_word(s, left));
    return hash_mix(h ^ (uint64_t)n);
}

/* A hash of a long byte string (a sample's kilobytes of frame lines), not hash_bytes' value: four
 * lanes of hash_word over 32 bytes at a time, whose multiplies overlap (hash_bytes' one chain waits
 * on each multiply: a sixth of collapsing perf text), then the tail by hash_bytes. */
static inline uint64_t
hash_lanes(const char *s, Py_ssize_t n, uint64_t seed)
{
    uint64_t a = HASH_START ^ seed, b = a ^ 0x243f6a8885a308d3ULL, c = a ^ 0x13198a2e03707344ULL,
             d = a ^ 0xa4093822299f31d0ULL;
    Py_ssize_t i = 0;
    for (; n - i >= 32; i += 32) {
        uint64_t w[4];
        memcpy(w, s + i, 32);
        a = hash_word(a, w[0]);
        b = hash_word(b, w[1]);
        c = hash_word(c, w[2]);
        d = hash_word(d, w[3]);
    }
    uint64_t h = hash_bytes(s + i, n - i, seed);
    h = hash_word(hash_word(hash_word(hash_word(h, a), b), c), d);
    return hash_mix(h ^ (uint64_t)n);
}

/* hash_bytes(s, n, 0) of the bytes from s up to the first ``stop`` byte before ``end`` (or up to
 * ``end``), with *found set to where they end: one pass, the search reading the words the hash
 * reads (a word holds a ``stop`` byte when one of its bytes XOR ``stop`` is zero). */
static inline uint64_t
hash_until(const char *s, const char *end, char stop, const char **found)
{
    uint64_t h = HASH_START;
    const char *p = s;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ULL, highs = ones << 7, stops = ones * (unsigned char)stop;
    for (; end - p >= 8; p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t x = w ^ stops, hit = (x - ones) & ~x & highs;  /* its lowest set bit is exact */
        if (hit) {
            int k = __builtin_ctzll(hit) >> 3;
            if (k)
                h = hash_word(h, w & (~0ULL >> (64 - 8 * k)));
            *found = p + k;
            return hash_mix(h ^ (uint64_t)(p + k - s));
        }
        h = hash_word(h, w);
    }
#endif
    const char *q = memchr(p, stop, (size_t)(end - p));
    if (q == NULL)
        q = end;
    for (; q - p >= 8; p += 8) {  /* big-endian: the words before the stop */
        uint64_t w;
        memcpy(&w, p, 8);
        h = hash_word(h, w);
    }
    if (q > p)
        h = hash_word(h, tail_word(p, q - p));
    *found = q;
    return hash_mix(h ^ (uint64_t)(q - s));
}

#endif
