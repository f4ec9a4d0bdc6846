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
 * (parent stack, frame) -> stack. The second is large and read at random; it is addressed by a hash
 * of the whole frame path, which depends only on the labels. So a line's slots are prefetched as its
 * labels are read, and the line is walked only after the next line's labels have been read: the
 * slots' cache misses are served meanwhile instead of one after another.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "byte_buffer.h"
#include "byte_hash.h"

#define HUGE_PAGE ((size_t)2 << 20)

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

/* An empty slot table. It is large and read at random, so it asks for huge pages where the
 * system grants them on request: a TLB miss less on most lookups. */
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
    if (p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memset(p, 0xff, size);
    return p;
}

typedef struct {
    PyObject_HEAD
    PyObject *frame_id;
    int strict;
    int stopped;                     /* a strict parse met a malformed line */
    Label *labels;                   /* open addressing, power-of-two size */
    Py_ssize_t label_cap, label_count;
    Buffer text;                     /* the labels' bytes, one after another (a few hot cache lines) */
    Slot *slots;                     /* (parent, frame) -> stack, power-of-two size */
    Py_ssize_t slot_cap;
    Buffer parent, frame;            /* int32 per stack: the stack table */
    Buffer path;                     /* uint64 per stack: its path hash (to rehash the slots) */
    Buffer leaf, weight;             /* int32 and double per accepted line */
    long long line_no;               /* lines seen, blank and skipped ones included */
    long long skipped, first_bad;
    PyObject *bad;                   /* (line number, bytes) of the malformed line that stopped a strict parse */
    Buffer pending;                  /* a line cut by the end of a chunk */
    Buffer walk, walk_hash;          /* per depth of the line being read: frame id (int32), path hash (uint64) */
    Buffer held, held_hash;          /* the same for the line read before it, not yet walked */
    int holding;                     /* whether ``held`` is such a line */
    double held_weight;
} Parser;

static void
Parser_dealloc(Parser *self)
{
    PyMem_RawFree(self->labels);
    free(self->slots);
    Buffer *buffers[] = {&self->text, &self->parent, &self->frame, &self->path, &self->leaf, &self->weight,
                         &self->pending, &self->walk, &self->walk_hash, &self->held, &self->held_hash};
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
    self->slot_cap = 1 << 16;
    self->slots = new_slots(self->slot_cap);
    return self->slots == NULL ? -1 : 0;
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

/* ---- the stack table */

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

/* The stack of the line in self->held (its frames root first, and their path hashes): found or added.
 * -1 with an exception set on error. */
static int32_t
intern_held(Parser *self)
{
    const int32_t *walk = ITEMS(self->held, int32_t);
    const uint64_t *hashes = ITEMS(self->held_hash, uint64_t);
    Py_ssize_t depth = COUNT(self->held, int32_t);
    int32_t node = -1;
    for (Py_ssize_t k = 0; k < depth; k++) {
        int32_t frame = walk[k];
        Py_ssize_t mask = self->slot_cap - 1;
        Py_ssize_t j = (Py_ssize_t)(hashes[k] & (uint64_t)mask);
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
            PyErr_SetString(PyExc_OverflowError, "more than 2**31 distinct stacks");
            return -1;
        }
        if (append(&self->parent, &node, sizeof(node)) < 0 || append(&self->frame, &frame, sizeof(frame)) < 0
            || append(&self->path, &hashes[k], sizeof(uint64_t)) < 0)
            return -1;
        self->slots[j] = (Slot){node, frame, (int32_t)s};
        node = (int32_t)s;
        if ((s + 1) * 10 > self->slot_cap * 7 && slots_grow(self) < 0)
            return -1;
        continue;
    found:
        node = self->slots[j].stack;
    }
    return node;
}

/* Walk the held line, if any: its stack and weight join the lines'. 0, or -1 with an exception set. */
static int
walk_held(Parser *self)
{
    if (!self->holding)
        return 0;
    self->holding = 0;
    int32_t leaf = intern_held(self);
    if (leaf < 0)
        return -1;
    if (append(&self->leaf, &leaf, sizeof(leaf)) < 0
        || append(&self->weight, &self->held_weight, sizeof(self->held_weight)) < 0)
        return -1;
    return 0;
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

    self->walk.size = self->walk_hash.size = 0;
    const char *p = s, *end = s + sep;
    uint64_t path = 0;
    for (;;) {
        const char *q;
        uint64_t h = hash_until(p, end, ';', &q);
        int32_t frame = label_frame(self, p, q - p, h);
        if (frame < 0)
            return -1;
        path = path_hash(path, frame);
        if (append(&self->walk, &frame, sizeof(frame)) < 0 || append(&self->walk_hash, &path, sizeof(path)) < 0)
            return -1;
        __builtin_prefetch(&self->slots[path & (uint64_t)(self->slot_cap - 1)]);
        if (q == end)
            break;
        p = q + 1;
    }
    if (walk_held(self) < 0)  /* the line before: its slots were prefetched a line ago */
        return -1;
    Buffer walk = self->held, walk_hash = self->held_hash;
    self->held = self->walk;
    self->held_hash = self->walk_hash;
    self->walk = walk;
    self->walk_hash = walk_hash;
    self->held_weight = weight;
    self->holding = 1;
    return 0;
}

/* ---- Python methods */

static PyObject *
Parser_feed(Parser *self, PyObject *arg)
{
    if (self->slots == NULL) {      /* allocated last by __init__ */
        PyErr_SetString(PyExc_RuntimeError, "FoldedParser is not initialized");
        return NULL;
    }
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
Parser_finish(Parser *self, PyObject *Py_UNUSED(ignored))
{
    if (self->slots == NULL) {      /* allocated last by __init__ */
        PyErr_SetString(PyExc_RuntimeError, "FoldedParser is not initialized");
        return NULL;
    }
    if (self->pending.size && !self->stopped) {       /* a last line without '\n' */
        Py_ssize_t n = (Py_ssize_t)self->pending.size;
        self->pending.size = 0;
        if (parse_line(self, self->pending.data, n) < 0)
            return NULL;
    }
    if (walk_held(self) < 0)
        return NULL;
    return Py_BuildValue("(NNNNLLO)", bytearray_of(&self->parent), bytearray_of(&self->frame),
                         bytearray_of(&self->leaf), bytearray_of(&self->weight),
                         self->skipped, self->first_bad, self->bad ? self->bad : Py_None);
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
