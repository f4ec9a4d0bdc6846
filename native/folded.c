/* flameprof._folded: read collapsed-stack ("folded") text at C speed.
 *
 * A FoldedParser is fed the raw bytes of a folded file in chunks of any size and builds the same
 * tables as the pure-Python reader in flameprof/collect/importers/folded.py: the stack table as
 * parent pointers in order of first appearance (a line's frames root first, then the next line's),
 * and per line its leaf stack and weight. Python is called back once per distinct frame label
 * (``frame_id(text) -> int``) and for rare inputs whose meaning depends on Python's own rules
 * (non-ASCII whitespace, counts that are not plain digits), so both readers agree on every input.
 *
 * Interning is two hash tables: label bytes -> frame id (a few thousand labels), and
 * (parent stack, frame) -> stack. The second is large and read at random: its work is mostly waiting
 * on memory, so it runs in a thread of its own, which needs no Python. The caller's thread reads the
 * lines' labels into a batch of frame ids and hands full batches over; the interning thread walks
 * them. A stack's slot is addressed by a hash of its whole frame path, which depends only on the frame
 * ids: the next line's slots are prefetched while a line is walked, so their cache misses overlap.
 * Where no thread can be started, the caller's thread walks each batch itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "byte_buffer.h"
#include "byte_hash.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define BATCH_FRAMES (32 << 10)  /* a batch is handed over once it holds this many frames */

#define ITEMS(buffer, type) ((type *)(buffer).data)
#define COUNT(buffer, type) ((Py_ssize_t)((buffer).size / sizeof(type)))

/* The hash of the path ``parent path + frame``: it addresses the stack table. */
static inline uint64_t
path_hash(uint64_t parent, int32_t frame)
{
    return hash_mix(parent ^ ((uint64_t)(uint32_t)frame * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
}

typedef struct {
    uint64_t hash;
    uint32_t offset;     /* of its text in the parser's ``text`` arena */
    uint32_t len;
    int32_t frame;       /* -1 marks an empty slot */
} Label;

typedef struct {
    int32_t parent;      /* -1 for a root frame */
    int32_t frame;
    int32_t stack;       /* -1 marks an empty slot */
} Slot;

/* An empty slot table, or NULL (no exception set: the interning thread grows it). It is large and read
 * at random, so it asks for huge pages where the system grants them on request: a TLB miss less on
 * most lookups. */
static Slot *
new_slots(Py_ssize_t cap)
{
    size_t size = (size_t)cap * sizeof(Slot);
    void *p = NULL;
#if defined(MADV_HUGEPAGE)
    if (size >= HUGE_PAGE) {
        if (posix_memalign(&p, HUGE_PAGE, size) != 0)
            p = NULL;
        else
            madvise(p, size, MADV_HUGEPAGE);
    }
    else
#endif
        p = malloc(size);
    if (p != NULL)
        memset(p, 0xff, size);
    return p;
}

/* Lines read but not yet interned: per line its depth and weight, and its frames' ids. */
typedef struct {
    Buffer depth, weight;            /* int32 and double per line */
    Buffer frame;                    /* int32 per frame, the lines' frames one after another */
} Batch;

enum { FAIL_MEMORY = 1, FAIL_STACKS = 2 };  /* why the interning thread stopped */

typedef struct {
    PyObject_HEAD
    PyObject *frame_id;
    int strict;
    int stopped;                     /* a strict parse met a malformed line */
    Label *labels;                   /* open addressing, power-of-two size */
    Py_ssize_t label_cap, label_count;
    Buffer text;                     /* the labels' bytes, one after another (a few hot cache lines) */
    long long line_no;               /* lines seen, blank and skipped ones included */
    long long skipped, first_bad;
    PyObject *bad;                   /* (line number, bytes) of the malformed line that stopped a strict parse */
    Buffer pending;                  /* a line cut by the end of a chunk */
    Batch batches[2];                /* the caller's thread fills one while the other is interned */
    int filling;                     /* which */
    /* The stack table and the lines' columns: written by the interning thread while it runs. */
    Slot *slots;                     /* (parent, frame) -> stack, power-of-two size */
    Py_ssize_t slot_cap;
    Buffer parent, frame;            /* int32 per stack: the stack table */
    Buffer path;                     /* uint64 per stack: its path hash (to rehash the slots) */
    Buffer leaf, weight;             /* int32 and double per interned line */
    Buffer paths[2];                 /* uint64 per frame: the path hashes of the line walked and the next */
    /* The interning thread and what it shares with the caller's, under ``lock``. */
    pthread_t thread;
    int threaded;                    /* whether ``thread`` runs */
    pid_t owner;                     /* the process that started it (a forked child has no such thread) */
    pthread_mutex_t lock;
    pthread_cond_t changed;          /* ``work`` or ``quit`` changed */
    Batch *work;                     /* handed over and not yet interned; NULL when the thread is idle */
    int quit;
    int fail;                        /* FAIL_* once interning failed: later batches are dropped */
    int ready;                       /* __init__ succeeded */
    int busy;                        /* a feed or finish is running */
} Parser;

static void stop_thread(Parser *self);

static void
Parser_dealloc(Parser *self)
{
    stop_thread(self);
    PyMem_RawFree(self->labels);
    free(self->slots);
    Batch *b = self->batches;
    Buffer *buffers[] = {&self->text, &self->parent, &self->frame, &self->path, &self->leaf, &self->weight,
                         &self->pending, &self->paths[0], &self->paths[1], &b[0].depth, &b[0].weight,
                         &b[0].frame, &b[1].depth, &b[1].weight, &b[1].frame};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        PyMem_RawFree(buffers[i]->data);
    Py_XDECREF(self->frame_id);
    Py_XDECREF(self->bad);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Parser_init(Parser *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"frame_id", "strict", NULL};
    PyObject *frame_id;
    int strict = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p", kwlist, &frame_id, &strict))
        return -1;
    if (self->labels != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FoldedParser is already initialized");
        return -1;
    }
    Py_INCREF(frame_id);
    self->frame_id = frame_id;
    self->strict = strict;
    self->label_cap = 1024;
    self->labels = PyMem_RawMalloc((size_t)self->label_cap * sizeof(Label));
    if (self->labels == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(self->labels, 0xff, (size_t)self->label_cap * sizeof(Label));
    if (pthread_mutex_init(&self->lock, NULL) != 0 || pthread_cond_init(&self->changed, NULL) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot make the interning thread's lock");
        return -1;
    }
    self->slot_cap = 1 << 16;
    self->slots = new_slots(self->slot_cap);
    if (self->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->ready = 1;
    return 0;
}

/* ---- frame labels */

static int
labels_grow(Parser *self)
{
    Py_ssize_t cap = self->label_cap * 2;
    Label *table = PyMem_RawMalloc((size_t)cap * sizeof(Label));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(table, 0xff, (size_t)cap * sizeof(Label));
    for (Py_ssize_t i = 0; i < self->label_cap; i++) {
        Label *l = &self->labels[i];
        if (l->frame < 0)
            continue;
        Py_ssize_t j = (Py_ssize_t)(l->hash & (uint64_t)(cap - 1));
        while (table[j].frame >= 0)
            j = (j + 1) & (cap - 1);
        table[j] = *l;
    }
    PyMem_RawFree(self->labels);
    self->labels = table;
    self->label_cap = cap;
    return 0;
}

/* Whether n bytes at a and b are equal (inline: labels are short, a call would cost more). */
static inline int
same_bytes(const char *a, const char *b, size_t n)
{
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return 0;
    }
    for (; n; a++, b++, n--)
        if (*a != *b)
            return 0;
    return 1;
}

/* The frame id of one label (bytes of a frame between ';', ``h`` their hash_bytes), asking Python
 * for a label seen first. */
static int32_t
label_frame(Parser *self, const char *s, Py_ssize_t n, uint64_t h)
{
    Py_ssize_t mask = self->label_cap - 1, j = (Py_ssize_t)(h & (uint64_t)mask);
    for (;;) {
        Label *l = &self->labels[j];
        if (l->frame < 0)
            break;
        if (l->hash == h && l->len == (uint64_t)n && same_bytes(self->text.data + l->offset, s, (size_t)n))
            return l->frame;
        j = (j + 1) & mask;
    }
    PyObject *text = PyUnicode_DecodeUTF8(s, n, "replace");
    if (text == NULL)
        return -1;
    PyObject *result = PyObject_CallOneArg(self->frame_id, text);
    Py_DECREF(text);
    if (result == NULL)
        return -1;
    long frame = PyLong_AsLong(result);
    Py_DECREF(result);
    if (frame == -1 && PyErr_Occurred())
        return -1;
    if (frame < 0 || frame > INT32_MAX - 1) {
        PyErr_SetString(PyExc_ValueError, "frame_id must return a non-negative int32");
        return -1;
    }
    size_t offset = self->text.size;
    if (offset + (size_t)n > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 4 GiB of distinct frame labels");
        return -1;
    }
    if (append(&self->text, s, (size_t)n) < 0)
        return -1;
    self->labels[j] = (Label){h, (uint32_t)offset, (uint32_t)n, (int32_t)frame};
    if (++self->label_count * 2 > self->label_cap && labels_grow(self) < 0)
        return -1;
    return (int32_t)frame;
}

/* ---- the stack table (no Python: it runs in the interning thread) */

/* Double the slot table: 0, or -1 out of memory. */
static int
slots_grow(Parser *self)
{
    Py_ssize_t cap = self->slot_cap * 2;
    Slot *table = new_slots(cap);
    if (table == NULL)
        return -1;
    const int32_t *parent = ITEMS(self->parent, int32_t), *frame = ITEMS(self->frame, int32_t);
    const uint64_t *path = ITEMS(self->path, uint64_t);
    for (Py_ssize_t s = 0, n = COUNT(self->parent, int32_t); s < n; s++) {
        if (s + 16 < n)  /* the slots are written at random: their misses overlap */
            __builtin_prefetch(&table[path[s + 16] & (uint64_t)(cap - 1)], 1);
        Py_ssize_t j = (Py_ssize_t)(path[s] & (uint64_t)(cap - 1));
        while (table[j].stack >= 0)
            j = (j + 1) & (cap - 1);
        table[j] = (Slot){parent[s], frame[s], (int32_t)s};
    }
    free(self->slots);
    self->slots = table;
    self->slot_cap = cap;
    return 0;
}

/* The path hashes of a line's frames into ``out``, their slots prefetched: 0, or -1 out of memory. */
static int
hash_paths(const Parser *self, const int32_t *frame, Py_ssize_t depth, Buffer *out)
{
    out->size = 0;
    if (out->capacity < (size_t)depth * sizeof(uint64_t) && grow_buffer(out, (size_t)depth * sizeof(uint64_t)) < 0)
        return -1;
    uint64_t *path = ITEMS(*out, uint64_t), h = 0;
    for (Py_ssize_t k = 0; k < depth; k++) {
        h = path[k] = path_hash(h, frame[k]);
        __builtin_prefetch(&self->slots[h & (uint64_t)(self->slot_cap - 1)]);
    }
    out->size = (size_t)depth * sizeof(uint64_t);
    return 0;
}

/* The stack of one line (its frames root first, and their path hashes): found or added. -1 with
 * *fail set. */
static int32_t
intern_line(Parser *self, const int32_t *walk, const uint64_t *path, Py_ssize_t depth, int *fail)
{
    int32_t node = -1;
    for (Py_ssize_t k = 0; k < depth; k++) {
        int32_t frame = walk[k];
        Py_ssize_t mask = self->slot_cap - 1;
        Py_ssize_t j = (Py_ssize_t)(path[k] & (uint64_t)mask);
        for (;;) {
            Slot *slot = &self->slots[j];
            if (slot->stack < 0)
                break;
            if (slot->parent == node && slot->frame == frame)
                goto found;
            j = (j + 1) & mask;
        }
        Py_ssize_t s = COUNT(self->parent, int32_t);
        if (s >= INT32_MAX) {
            *fail = FAIL_STACKS;
            return -1;
        }
        if (append_raw(&self->parent, &node, sizeof(node)) < 0 || append_raw(&self->frame, &frame, sizeof(frame)) < 0
            || append_raw(&self->path, &path[k], sizeof(uint64_t)) < 0) {
            *fail = FAIL_MEMORY;
            return -1;
        }
        self->slots[j] = (Slot){node, frame, (int32_t)s};
        node = (int32_t)s;
        if ((s + 1) * 10 > self->slot_cap * 7 && slots_grow(self) < 0) {
            *fail = FAIL_MEMORY;
            return -1;
        }
        continue;
    found:
        node = self->slots[j].stack;
    }
    return node;
}

/* Intern a batch's lines in order, each line's path hashed (and its slots prefetched) while the line
 * before is walked: 0, or FAIL_*. */
static int
intern_batch(Parser *self, const Batch *b)
{
    const int32_t *depth = ITEMS(b->depth, int32_t), *frame = ITEMS(b->frame, int32_t);
    const double *weight = ITEMS(b->weight, double);
    Py_ssize_t lines = COUNT(b->depth, int32_t);
    if (lines && hash_paths(self, frame, depth[0], &self->paths[0]) < 0)
        return FAIL_MEMORY;
    for (Py_ssize_t i = 0, at = 0; i < lines; at += depth[i], i++) {
        if (i + 1 < lines && hash_paths(self, frame + at + depth[i], depth[i + 1], &self->paths[(i + 1) & 1]) < 0)
            return FAIL_MEMORY;
        int fail = 0;
        int32_t leaf = intern_line(self, frame + at, ITEMS(self->paths[i & 1], uint64_t), depth[i], &fail);
        if (leaf < 0)
            return fail;
        if (append_raw(&self->leaf, &leaf, sizeof(leaf)) < 0
            || append_raw(&self->weight, &weight[i], sizeof(double)) < 0)
            return FAIL_MEMORY;
    }
    return 0;
}

static void *
interning_thread(void *arg)
{
    Parser *self = arg;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (self->work == NULL && !self->quit)
            pthread_cond_wait(&self->changed, &self->lock);
        if (self->work == NULL)
            break;
        const Batch *b = self->work;
        int fail = self->fail;
        pthread_mutex_unlock(&self->lock);
        if (!fail)
            fail = intern_batch(self, b);
        pthread_mutex_lock(&self->lock);
        self->fail = fail;
        self->work = NULL;
        pthread_cond_broadcast(&self->changed);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

/* Wait until the interning thread is idle (the GIL released meanwhile). */
static void
wait_idle(Parser *self)
{
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    while (self->work != NULL)
        pthread_cond_wait(&self->changed, &self->lock);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
}

static void
stop_thread(Parser *self)
{
    if (!self->threaded)
        return;
    if (getpid() != self->owner) {  /* a forked child: the thread is its parent's */
        self->threaded = 0;
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->quit = 1;
    pthread_cond_broadcast(&self->changed);
    pthread_mutex_unlock(&self->lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->threaded = 0;
}

/* An exception for why interning failed: -1 if it did, else 0. Only while the thread is idle. */
static int
raise_failure(const Parser *self)
{
    if (self->fail == FAIL_MEMORY)
        PyErr_NoMemory();
    else if (self->fail == FAIL_STACKS)
        PyErr_SetString(PyExc_OverflowError, "more than 2**31 distinct stacks");
    return self->fail ? -1 : 0;
}

/* Hand the batch being filled over to the interning thread (started by the first one; while it
 * cannot start, each batch is interned here), and start filling the other. 0, or -1 with an
 * exception set. */
static int
hand_over(Parser *self)
{
    Batch *b = &self->batches[self->filling];
    if (b->depth.size == 0)
        return 0;
    if (self->threaded && getpid() != self->owner) {
        PyErr_SetString(PyExc_RuntimeError, "a FoldedParser cannot be fed across a fork");
        return -1;
    }
    if (!self->threaded && !self->fail && pthread_create(&self->thread, NULL, interning_thread, self) == 0) {
        self->threaded = 1;
        self->owner = getpid();
    }
    if (self->threaded) {
        wait_idle(self);  /* done with the other batch: ``fail`` is its to read until it has work */
        if (self->fail) {
            b->depth.size = b->weight.size = b->frame.size = 0;
            return raise_failure(self);
        }
        pthread_mutex_lock(&self->lock);
        self->work = b;
        pthread_cond_broadcast(&self->changed);
        pthread_mutex_unlock(&self->lock);
        self->filling ^= 1;
        b = &self->batches[self->filling];
    }
    else if (!self->fail)
        self->fail = intern_batch(self, b);
    b->depth.size = b->weight.size = b->frame.size = 0;
    return raise_failure(self);
}

/* ---- one line */

static inline int
ascii_space(unsigned char c)
{
    /* str.isspace() of ASCII characters: \t \n \v \f \r, the separators \x1c-\x1f, and space */
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* Whether ``s`` is empty or all whitespace by Python's str.strip(): 1 yes, 0 no, -1 error. */
static int
blank(const char *s, Py_ssize_t n)
{
    int other = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80)
            other = 1;
        else if (!ascii_space(c))
            return 0;
    }
    if (!other)
        return 1;
    PyObject *text = PyUnicode_DecodeUTF8(s, n, "replace");
    if (text == NULL)
        return -1;
    PyObject *result = PyObject_CallMethod(text, "isspace", NULL);
    Py_DECREF(text);
    if (result == NULL)
        return -1;
    int yes = PyObject_IsTrue(result);
    Py_DECREF(result);
    return yes;
}

/* A line's count as Python's float() reads it: 1 parsed, 0 not a number, -1 error. */
static int
parse_count(const char *s, Py_ssize_t n, double *out)
{
    if (n >= 1 && n <= 15) {
        int64_t v = 0;
        Py_ssize_t i = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            v = v * 10 + (s[i] - '0');
        if (i == n) {             /* plain digits: exact in a double */
            *out = (double)v;
            return 1;
        }
    }
    PyObject *text = PyUnicode_DecodeUTF8(s, n, "replace");
    if (text == NULL)
        return -1;
    PyObject *value = PyFloat_FromString(text);
    Py_DECREF(text);
    if (value == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    *out = PyFloat_AS_DOUBLE(value);
    Py_DECREF(value);
    return 1;
}

/* A malformed line: counted, or (strict) recorded and the parse stopped. */
static int
malformed(Parser *self, const char *s, Py_ssize_t n)
{
    if (!self->strict) {
        self->skipped++;
        if (!self->first_bad)
            self->first_bad = self->line_no;
        return 0;
    }
    self->stopped = 1;
    self->bad = Py_BuildValue("Ly#", self->line_no, s, n);
    return self->bad == NULL ? -1 : 0;
}

/* One line without its '\n': 0 done (kept, skipped or stopping), -1 error. */
static int
parse_line(Parser *self, const char *s, Py_ssize_t n)
{
    self->line_no++;
    while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == '\n'))
        n--;
    if (n > 0 && s[0] == '#')
        return 0;
    int is_blank = blank(s, n);
    if (is_blank)
        return is_blank < 0 ? -1 : 0;
    Py_ssize_t sep = n - 1;
    while (sep >= 0 && s[sep] != ' ')
        sep--;
    if (sep < 0)
        return malformed(self, s, n);
    double weight;
    int ok = parse_count(s + sep + 1, n - sep - 1, &weight);
    if (ok < 0)
        return -1;
    if (!ok || !(weight >= 0 && weight < INFINITY))
        return malformed(self, s, n);
    is_blank = blank(s, sep);
    if (is_blank)
        return is_blank < 0 ? -1 : malformed(self, s, n);

    Batch *b = &self->batches[self->filling];
    size_t frames = b->frame.size;
    const char *p = s, *end = s + sep;
    int32_t depth = 0;
    for (;;) {
        const char *q;
        uint64_t h = hash_until(p, end, ';', &q);
        int32_t frame = label_frame(self, p, q - p, h);
        if (frame < 0)
            goto failed;
        depth++;
        if (append(&b->frame, &frame, sizeof(frame)) < 0)
            goto failed;
        if (q == end)
            break;
        p = q + 1;
    }
    if (append(&b->depth, &depth, sizeof(depth)) < 0)
        goto failed;
    if (append(&b->weight, &weight, sizeof(weight)) < 0) {
        b->depth.size -= sizeof(depth);
        goto failed;
    }
    return b->frame.size >= BATCH_FRAMES * sizeof(int32_t) ? hand_over(self) : 0;
failed:  /* the batch holds whole lines only */
    b->frame.size = frames;
    return -1;
}

/* ---- Python methods */

/* Whether a method may run: the parser is initialized and no other call is in it. A call lets the GIL go
 * while it waits for the interning thread, and ``frame_id`` runs Python inside it: another thread, or
 * that callback, could otherwise enter a second call and fill the same batch. */
static int
enter(Parser *self)
{
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "FoldedParser is not initialized");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "FoldedParser is already in a call (another thread, or frame_id)");
        return 0;
    }
    self->busy = 1;
    return 1;
}

static PyObject *
feed(Parser *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *p = view.buf, *end = p + view.len;
    int err = 0;
    if (self->pending.size && !self->stopped) {      /* finish the line the last chunk cut */
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        err = append(&self->pending, p, (size_t)(stop - p));
        p = stop;
        if (!err && nl) {
            err = parse_line(self, self->pending.data, (Py_ssize_t)self->pending.size);
            self->pending.size = 0;
            p = nl + 1;
        }
    }
    while (!err && !self->stopped && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL) {
            err = append(&self->pending, p, (size_t)(end - p));
            break;
        }
        err = parse_line(self, p, nl - p);
        p = nl + 1;
    }
    PyBuffer_Release(&view);
    if (err)
        return NULL;
    return PyBool_FromLong(!self->stopped);
}

static PyObject *
bytearray_of(const Buffer *b)
{
    return PyByteArray_FromStringAndSize(b->size ? b->data : "", (Py_ssize_t)b->size);
}

static PyObject *
finish(Parser *self)
{
    if (self->pending.size && !self->stopped) {       /* a last line without '\n' */
        Py_ssize_t n = (Py_ssize_t)self->pending.size;
        self->pending.size = 0;
        if (parse_line(self, self->pending.data, n) < 0)
            return NULL;
    }
    if (hand_over(self) < 0)
        return NULL;
    if (self->threaded) {  /* the last batch interned (hand_over refused a forked child) */
        wait_idle(self);
        stop_thread(self);
        if (raise_failure(self) < 0)
            return NULL;
    }
    return Py_BuildValue("(NNNNLLO)", bytearray_of(&self->parent), bytearray_of(&self->frame),
                         bytearray_of(&self->leaf), bytearray_of(&self->weight),
                         self->skipped, self->first_bad, self->bad ? self->bad : Py_None);
}

static PyObject *
Parser_feed(Parser *self, PyObject *arg)
{
    if (!enter(self))
        return NULL;
    PyObject *result = feed(self, arg);
    self->busy = 0;
    return result;
}

static PyObject *
Parser_finish(Parser *self, PyObject *Py_UNUSED(ignored))
{
    if (!enter(self))
        return NULL;
    PyObject *result = finish(self);
    self->busy = 0;
    return result;
}

static PyMethodDef Parser_methods[] = {
    {"feed", (PyCFunction)Parser_feed, METH_O,
     "feed(data) -> bool: parse the complete lines of a chunk of bytes (a cut line waits for the next "
     "chunk); False once a strict parse has met a malformed line"},
    {"finish", (PyCFunction)Parser_finish, METH_NOARGS,
     "finish() -> (stack_parent, stack_frame, line_stack, line_weight, skipped, first_bad, bad): the int32 "
     "and float64 columns as bytearrays; bad is (line number, bytes) of the line that stopped a strict parse"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ParserType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flameprof._folded.FoldedParser",
    .tp_basicsize = sizeof(Parser),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "FoldedParser(frame_id, strict=True): collapsed-stack text fed in chunks -> stack table and lines.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Parser_init,
    .tp_dealloc = (destructor)Parser_dealloc,
    .tp_methods = Parser_methods,
};

static struct PyModuleDef folded_module = {
    PyModuleDef_HEAD_INIT, "flameprof._folded", "flameprof's C reader of collapsed-stack text.", -1, NULL,
};

PyMODINIT_FUNC
PyInit__folded(void)
{
    if (PyType_Ready(&ParserType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&folded_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ParserType);
    if (PyModule_AddObject(m, "FoldedParser", (PyObject *)&ParserType) < 0) {
        Py_DECREF(&ParserType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
