/* The C readers' growable byte buffer (folded.c, kineto.c, perf_collapse.c): columns of fixed-size
 * items, the text of interned strings, a line cut by a chunk's end, an output line. ``append`` is
 * inline: the readers call it for every frame or field they keep. Include after Python.h. */
#ifndef FLAMEPROF_BYTE_BUFFER_H
#define FLAMEPROF_BYTE_BUFFER_H

#include <string.h>

typedef struct {
    char *data;
    size_t size, capacity;
} Buffer;

/* A larger buffer, with room for n more bytes (the caller found too little): 0, or -1 without an
 * exception set (callable without the GIL). */
static inline int
grow_buffer(Buffer *b, size_t n)
{
    size_t capacity = b->capacity ? b->capacity * 2 : 4096;
    while (capacity < b->size + n)
        capacity *= 2;
    char *data = PyMem_RawRealloc(b->data, capacity);
    if (data == NULL)
        return -1;
    b->data = data;
    b->capacity = capacity;
    return 0;
}

/* Room for n more bytes: 0, or -1 with MemoryError set. */
static inline int
reserve(Buffer *b, size_t n)
{
    if (b->size + n <= b->capacity)
        return 0;
    if (grow_buffer(b, n) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* n bytes at the end: 0, or -1 without an exception set (callable without the GIL). */
static inline int
append_raw(Buffer *b, const void *item, size_t n)
{
    if (b->size + n > b->capacity && grow_buffer(b, n) < 0)
        return -1;
    memcpy(b->data + b->size, item, n);
    b->size += n;
    return 0;
}

/* n bytes at the end: 0, or -1 with MemoryError set. */
static inline int
append(Buffer *b, const void *item, size_t n)
{
    if (append_raw(b, item, n) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

#endif
