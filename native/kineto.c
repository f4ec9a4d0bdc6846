/* flameprof._kineto: a torch.profiler (Kineto) trace's events read at C speed, and the three
 * passes over them that are one loop each (nesting, attribution, stacks).
 *
 * A Scanner is fed the bytes of the ``traceEvents`` array a buffer at a time. It reads as many
 * whole elements as the buffer holds, validating them as JSON (strings with their escapes and
 * UTF-8, numbers, literals, nesting), and keeps of each op, kernel, copy, fill, runtime call and
 * memory event one row of columns: no Python object per event. Names and the ``Input Dims``,
 * ``Concrete Inputs`` and ``Input type`` values are interned as the bytes the file spells them with;
 * Python decodes each distinct one once.
 *
 * The Scanner takes only what it reads exactly as the Python reader does: an element that is not
 * an object, a field of an event it keeps with an unusual type (a string pid, a float correlation,
 * NaN, an integer of 19 digits or more, a duplicate key), an escape in a key or in ``ph``/``cat``, a
 * lone surrogate, nesting past MAX_DEPTH, or any defect, stops it at that element with SLOW: Python
 * decodes that one element with the standard library (which gives the precise error) and reads it
 * with its own rules, then hands the rest back to the Scanner. Every byte is read at most twice by
 * the Scanner (an element cut by the buffer's end is read again whole), so time stays linear.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "byte_buffer.h"
#include "byte_hash.h"

#define MAX_DEPTH 64

enum { OK = 0, MORE = 1, SLOW = 2, END = 3 };
enum { KIND_OP = 0, KIND_ANNOTATION = 1, KIND_KERNEL = 2, KIND_MEMCPY = 3, KIND_MEMSET = 4,
       KIND_RUNTIME = 5, KIND_MEMORY = 6, KIND_PYTHON = 7 };

typedef const unsigned char uc;

/* ---- interning byte strings ------------------------------------------------------------------ */

typedef struct {
    Buffer text;          /* the strings' bytes, one after another */
    Buffer offsets;       /* int64 per string: where it starts in text (and one past the last) */
    Buffer hashes;        /* uint64 per string */
    int32_t *slots;       /* open addressing: string id, -1 when empty */
    size_t cap, count;
    uint64_t seed;
} Table;

static int
table_grow(Table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    int32_t *slots = PyMem_RawMalloc(cap * sizeof(int32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(slots, 0xff, cap * sizeof(int32_t));
    const uint64_t *hashes = (const uint64_t *)t->hashes.data;
    for (size_t i = 0; i < t->count; i++) {
        size_t j = (size_t)hashes[i] & (cap - 1);
        while (slots[j] >= 0)
            j = (j + 1) & (cap - 1);
        slots[j] = (int32_t)i;
    }
    PyMem_RawFree(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* The id of the string s[0:n], added when new; -1 with an exception set when out of memory. */
static int32_t
table_id(Table *t, const char *s, size_t n)
{
    if (t->offsets.size == 0) {
        int64_t zero = 0;
        if (append(&t->offsets, &zero, sizeof zero) < 0)
            return -1;
    }
    if (2 * (t->count + 1) > t->cap && table_grow(t) < 0)
        return -1;
    if (t->count >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many distinct names in the trace");
        return -1;
    }
    uint64_t h = hash_bytes(s, (Py_ssize_t)n, t->seed);
    const int64_t *offsets = (const int64_t *)t->offsets.data;
    const uint64_t *hashes = (const uint64_t *)t->hashes.data;
    size_t j = (size_t)h & (t->cap - 1);
    for (int32_t id; (id = t->slots[j]) >= 0; j = (j + 1) & (t->cap - 1)) {
        if (hashes[id] == h && (size_t)(offsets[id + 1] - offsets[id]) == n
            && memcmp(t->text.data + offsets[id], s, n) == 0)
            return id;
    }
    int64_t next = (int64_t)(t->text.size + n);
    if (append(&t->text, s, n) < 0 || append(&t->offsets, &next, sizeof next) < 0
        || append(&t->hashes, &h, sizeof h) < 0)
        return -1;
    t->slots[j] = (int32_t)t->count;
    return (int32_t)t->count++;
}

static PyObject *
table_list(const Table *t)
{
    PyObject *list = PyList_New((Py_ssize_t)t->count);
    if (list == NULL)
        return NULL;
    const int64_t *offsets = (const int64_t *)t->offsets.data;
    for (size_t i = 0; i < t->count; i++) {
        PyObject *item = PyBytes_FromStringAndSize(t->text.data + offsets[i], offsets[i + 1] - offsets[i]);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

static void
table_free(Table *t)
{
    PyMem_RawFree(t->text.data);
    PyMem_RawFree(t->offsets.data);
    PyMem_RawFree(t->hashes.data);
    PyMem_RawFree(t->slots);
    memset(t, 0, sizeof *t);
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static inline uc *
ws(uc *p, uc *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static inline int
hex(unsigned c)
{
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10) : -1;
}

/* The string whose opening quote is at p: *out is past its closing quote, *esc whether it holds an
 * escape, *wide whether it holds a byte past ASCII. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Whether any of the 8 bytes of w is a quote, a backslash, a control character or past ASCII. */
static inline uint64_t
special(uint64_t w)
{
    uint64_t quote = w ^ (ONES * '"'), backslash = w ^ (ONES * '\\');
    return (w | ((w - ONES * 0x20) & ~w) | ((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash)) & HIGHS;
}

static int
string_at(uc *p, uc *end, uc **out, int *esc, int *wide)
{
    p++;
    for (;;) {
        uint64_t w;
        while (end - p >= 8 && (memcpy(&w, p, 8), !special(w)))
            p += 8;
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p >= end)
            return MORE;
        unsigned c = *p;
        if (c == '"') {
            *out = p + 1;
            return OK;
        }
        if (c < 0x20)
            return SLOW;
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= end)
                return MORE;
            unsigned e = p[1];
            if (e == 'u') {
                if (end - p < 6)
                    return MORE;
                int v = 0;
                for (int i = 2; i < 6; i++) {
                    int h = hex(p[i]);
                    if (h < 0)
                        return SLOW;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF)
                    return SLOW; /* a surrogate: pairs and lone ones, the standard library's reading */
                p += 6;
            }
            else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r'
                     || e == 't')
                p += 2;
            else
                return SLOW;
            continue;
        }
        *wide = 1;
        int n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF)
            n = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 3, cp = c & 0x07;
        else
            return SLOW;
        if (end - p <= n)
            return MORE;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return SLOW;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return SLOW;
        p += n + 1;
    }
}

#define DIGIT(c) ((c) >= '0' && (c) <= '9')

/* The number at p (JSON's grammar): *out is past it, *integer whether it has no fraction or exponent. */
static int
number_at(uc *p, uc *end, uc **out, int *integer)
{
    if (*p == '-' && ++p >= end)
        return MORE;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (p < end && DIGIT(*p))
            p++;
    else
        return SLOW; /* -Infinity and other words: the standard library's */
    *integer = 1;
    if (p < end && *p == '.') {
        uc *d = ++p;
        while (p < end && DIGIT(*p))
            p++;
        if (p < end && p == d)
            return SLOW;
        *integer = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        uc *d = p;
        while (p < end && DIGIT(*p))
            p++;
        if (p < end && p == d)
            return SLOW;
        *integer = 0;
    }
    if (p >= end)
        return MORE; /* the next buffer may hold more digits */
    *out = p;
    return OK;
}

static int
literal_at(uc *p, uc *end, uc **out, const char *word, size_t n)
{
    if ((size_t)(end - p) < n)
        return memcmp(p, word, (size_t)(end - p)) == 0 ? MORE : SLOW;
    if (memcmp(p, word, n) != 0)
        return SLOW;
    *out = p + n;
    return OK;
}

/* After a member or an element, before ',' or ``close``: *out past the ',' and the space after it
 * (*more 1), or past ``close`` (*more 0). */
static int
separator_at(uc *p, uc *end, unsigned close, uc **out, int *more)
{
    p = ws(p, end);
    if (p >= end)
        return MORE;
    if (*p == close) {
        *more = 0;
        *out = p + 1;
        return OK;
    }
    if (*p != ',')
        return SLOW;
    p = ws(p + 1, end);
    if (p >= end)
        return MORE;
    *more = 1;
    *out = p;
    return OK;
}

/* After a member's name: *out past the ':' and the space after it. */
static int
colon_at(uc *p, uc *end, uc **out)
{
    p = ws(p, end);
    if (p >= end)
        return MORE;
    if (*p != ':')
        return SLOW;
    p = ws(p + 1, end);
    if (p >= end)
        return MORE;
    *out = p;
    return OK;
}

static int
skip_value(uc *p, uc *end, uc **out, int depth)
{
    int rc, esc = 0, wide = 0, integer;
    if (p >= end)
        return MORE;
    switch (*p) {
    case '"':
        return string_at(p, end, out, &esc, &wide);
    case 't':
        return literal_at(p, end, out, "true", 4);
    case 'f':
        return literal_at(p, end, out, "false", 5);
    case 'n':
        return literal_at(p, end, out, "null", 4);
    case '{':
    case '[': {
        if (depth >= MAX_DEPTH)
            return SLOW;
        int object = *p == '{';
        unsigned close = object ? '}' : ']';
        p = ws(p + 1, end);
        if (p >= end)
            return MORE;
        if (*p == close) {
            *out = p + 1;
            return OK;
        }
        for (;;) {
            if (object) {
                if (*p != '"')
                    return SLOW;
                if ((rc = string_at(p, end, &p, &esc, &wide)) != OK || (rc = colon_at(p, end, &p)) != OK)
                    return rc;
            }
            int more;
            if ((rc = skip_value(p, end, &p, depth + 1)) != OK || (rc = separator_at(p, end, close, &p, &more)) != OK)
                return rc;
            if (!more) {
                *out = p;
                return OK;
            }
        }
    }
    default:
        if (*p == '-' || DIGIT(*p))
            return number_at(p, end, out, &integer);
        return SLOW;
    }
}

/* ---- an event's fields ----------------------------------------------------------------------- */

enum { T_ABSENT = 0, T_STRING, T_INT, T_FLOAT, T_OBJECT, T_OTHER };
enum { F_PH, F_CAT, F_NAME, F_TS, F_DUR, F_PID, F_TID, F_ARGS, A_CORRELATION, A_EXTERNAL, A_SEQUENCE,
       A_DEVICE, A_STREAM, A_BYTES, A_DIMS, A_CONCRETE, A_TYPES, A_MEM_BYTES, A_TOTAL, A_DEVICE_TYPE, A_DEVICE_ID,
       N_FIELDS };
static const char *const FIELD_NAMES[N_FIELDS] = {
    "ph", "cat", "name", "ts", "dur", "pid", "tid", "args", "correlation", "External id", "Sequence number",
    "device", "stream", "bytes", "Input Dims", "Concrete Inputs", "Input type", "Bytes", "Total Allocated", "Device Type",
    "Device Id",
};

static size_t FIELD_LENGTHS[N_FIELDS];

typedef struct {
    uc *start, *end;
    int type, esc, wide;
} Field;

static int
field_at(uc *p, uc *end, uc **out, Field *f, int depth)
{
    int rc, integer = 0;
    f->start = p;
    if (*p == '"') {
        f->type = T_STRING;
        rc = string_at(p, end, out, &f->esc, &f->wide);
    }
    else if (*p == '-' || DIGIT(*p)) {
        rc = number_at(p, end, out, &integer);
        f->type = integer ? T_INT : T_FLOAT;
    }
    else {
        f->type = *p == '{' ? T_OBJECT : T_OTHER;
        rc = skip_value(p, end, out, depth);
    }
    f->end = *out;
    return rc;
}

/* The object at p, its members first..last-1 of FIELD_NAMES kept in fields. */
static int
object_at(uc *p, uc *end, uc **out, Field *fields, int first, int last, int depth)
{
    int rc, esc, wide;
    p = ws(p + 1, end);
    if (p >= end)
        return MORE;
    if (*p == '}') {
        *out = p + 1;
        return OK;
    }
    for (;;) {
        if (*p != '"')
            return SLOW;
        uc *key = p + 1;
        esc = wide = 0;
        if ((rc = string_at(p, end, &p, &esc, &wide)) != OK)
            return rc;
        if (esc)
            return SLOW; /* it may spell a field's name */
        size_t n = (size_t)(p - 1 - key);
        int which = -1;
        for (int i = first; i < last; i++) {
            if (FIELD_LENGTHS[i] == n && FIELD_NAMES[i][0] == key[0] && memcmp(FIELD_NAMES[i], key, n) == 0) {
                which = i;
                break;
            }
        }
        if ((rc = colon_at(p, end, &p)) != OK)
            return rc;
        if (which < 0)
            rc = skip_value(p, end, &p, depth + 1);
        else if (fields[which].type != T_ABSENT)
            return SLOW; /* a duplicate key: the last one counts, as the Python reader reads it */
        else if (which == F_ARGS && *p == '{') {
            fields[which].type = T_OBJECT;
            if (depth + 1 >= MAX_DEPTH)
                return SLOW;
            rc = object_at(p, end, &p, fields, A_CORRELATION, N_FIELDS, depth + 1);
        }
        else
            rc = field_at(p, end, &p, &fields[which], depth + 1);
        int more;
        if (rc != OK || (rc = separator_at(p, end, '}', &p, &more)) != OK)
            return rc;
        if (!more) {
            *out = p;
            return OK;
        }
    }
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* An integer field as Python's ``int`` of it: 0 when it has 19 digits or more (SLOW: Python's). */
static int
int_of(const Field *f, int64_t *value)
{
    uc *p = f->start;
    int negative = *p == '-';
    p += negative;
    if (f->end - p > 18)
        return 0;
    int64_t v = 0;
    for (; p < f->end; p++)
        v = v * 10 + (*p - '0');
    *value = negative ? -v : v;
    return 1;
}

/* A number field as Python's ``float`` of the value JSON gives (an int's, or the text's). NaN when
 * it is out of what this reads. */
static double
float_of(const Field *f)
{
    if (f->type == T_INT) {
        int64_t v;
        return int_of(f, &v) ? (double)v : NAN;
    }
    /* Clinger's fast path: at most 15 significant digits and a power of ten up to 22, both exact,
     * so one correctly rounded operation; anything else goes to Python's own conversion. */
    uc *p = f->start;
    int negative = *p == '-';
    p += negative;
    uint64_t m = 0;
    int digits = 0, exp10 = 0;
    for (; p < f->end && DIGIT(*p); p++) {
        if (m || *p != '0')
            digits++;
        m = m * 10 + (*p - '0');
    }
    if (p < f->end && *p == '.')
        for (p++; p < f->end && DIGIT(*p); p++) {
            if (m || *p != '0')
                digits++;
            m = m * 10 + (*p - '0');
            exp10--;
        }
    if (p < f->end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = *p == '-';
        p += *p == '-' || *p == '+';
        int e = 0;
        for (; p < f->end && DIGIT(*p); p++)
            if (e < 10000)
                e = e * 10 + (*p - '0');
        exp10 += eneg ? -e : e;
    }
    if (digits <= 15 && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        d = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
        return negative ? -d : d;
    }
    char text[64];
    size_t n = (size_t)(f->end - f->start);
    if (n >= sizeof text)
        return NAN;
    memcpy(text, f->start, n);
    text[n] = 0;
    double d = PyOS_string_to_double(text, NULL, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NAN;
    }
    return d;
}

typedef struct {
    int8_t kind;
    int32_t name, dims, concrete, types;
    double ts, dur, x;
    int64_t a, b, c, d;
} Row;

#define N_CATEGORIES 32

typedef struct {
    PyObject_HEAD
    Buffer kind, name, ts, dur, a, b, c, d, x, dims, concrete, types;
    Table names, values;
    Py_ssize_t elements, rows;
    int n_categories;
    char categories[N_CATEGORIES][24];
    int8_t category_kind[N_CATEGORIES];
} Scanner;

#define N_COLUMNS 12

static Buffer *
column(Scanner *s, int i)
{
    Buffer *columns[N_COLUMNS] = {&s->kind, &s->name, &s->ts, &s->dur, &s->a, &s->b,
                                  &s->c, &s->d, &s->x, &s->dims, &s->concrete, &s->types};
    return columns[i];
}

/* An optional integer field: its value, the default when absent, 0 (SLOW) for any other type. */
static int
int_field(const Field *f, int64_t fallback, int64_t *value)
{
    if (f->type == T_ABSENT) {
        *value = fallback;
        return 1;
    }
    return f->type == T_INT && int_of(f, value);
}

/* An optional number field, as Python's ``_number`` reads it: 0 (SLOW) for another type or out of
 * range. */
static int
number_field(const Field *f, double fallback, double *value)
{
    if (f->type == T_ABSENT) {
        *value = fallback;
        return 1;
    }
    if (f->type != T_INT && f->type != T_FLOAT)
        return 0;
    double d = float_of(f);
    *value = d;
    return isfinite(d) && fabs(d) <= 1e18;
}

static inline int
spelled(const Field *f, const char *word)
{
    size_t n = strlen(word);
    return f->type == T_STRING && (size_t)(f->end - f->start) == n + 2 && memcmp(f->start + 1, word, n) == 0;
}

/* The row of an event read in ``fields``: *keep 0 when the reader keeps nothing of it. */
static int
resolve(Scanner *s, Field *fields, Row *row, int *keep)
{
    const Field *ph = &fields[F_PH], *cat = &fields[F_CAT], *name = &fields[F_NAME];
    *keep = 0;
    if (ph->type != T_STRING)
        return OK;
    if (ph->esc)
        return SLOW;
    int complete = spelled(ph, "X");
    if (!complete && !spelled(ph, "i"))
        return OK;
    if (!complete) { /* an instant event: the allocator's "[memory]" */
        if (name->type == T_STRING && name->esc)
            return SLOW;
        if (!spelled(name, "[memory]"))
            return OK;
        int64_t device_type, device_id;
        double total;
        if (fields[F_TS].type == T_ABSENT || !number_field(&fields[F_TS], 0, &row->ts)
            || !int_field(&fields[F_PID], -1, &row->a) || !int_field(&fields[F_TID], -1, &row->b)
            || !number_field(&fields[A_MEM_BYTES], 0, &row->x) || !number_field(&fields[A_TOTAL], 0, &total)
            || !int_field(&fields[A_DEVICE_TYPE], 0, &device_type) || !int_field(&fields[A_DEVICE_ID], 0, &device_id))
            return SLOW;
        row->kind = KIND_MEMORY;
        row->dur = total;
        row->c = device_type == 0 ? -1 : device_id;
        row->d = 0;
        row->name = row->dims = row->concrete = row->types = -1;
        *keep = 1;
        return OK;
    }
    if (cat->type == T_ABSENT)
        return OK; /* "" is no category */
    if (cat->type != T_STRING || cat->esc || cat->wide)
        return SLOW;
    size_t n = (size_t)(cat->end - cat->start) - 2;
    int kind = -1;
    for (int i = 0; i < s->n_categories && kind < 0; i++) {
        const char *known = s->categories[i];
        if (strlen(known) != n)
            continue;
        size_t j = 0;
        for (; j < n; j++) {
            unsigned c = cat->start[1 + j];
            if ((c >= 'A' && c <= 'Z' ? c | 0x20 : c) != (unsigned char)known[j])
                break;
        }
        if (j == n)
            kind = s->category_kind[i];
    }
    if (kind < 0)
        return OK;
    if (name->type != T_STRING)
        return SLOW; /* str() of it: Python's */
    const Field *ts = &fields[F_TS], *dur = &fields[F_DUR];
    if (ts->type != T_INT && ts->type != T_FLOAT)
        return SLOW;
    row->ts = float_of(ts);
    row->dur = 0.0;
    if (!isfinite(row->ts) || fabs(row->ts) > 1e18 || !number_field(dur, 0.0, &row->dur) || !(row->dur >= 0))
        return SLOW;
    row->kind = (int8_t)kind;
    row->name = table_id(&s->names, (const char *)name->start + 1, (size_t)(name->end - name->start) - 2);
    if (row->name < 0)
        return -1;
    row->dims = row->concrete = row->types = -1;
    row->x = 0.0;
    if (kind == KIND_KERNEL || kind == KIND_MEMCPY || kind == KIND_MEMSET) {
        int64_t pid, tid;
        if (!int_field(&fields[F_PID], 0, &pid) || !int_field(&fields[F_TID], 0, &tid)
            || !int_field(&fields[A_DEVICE], pid, &row->a) || !int_field(&fields[A_STREAM], tid, &row->b)
            || !int_field(&fields[A_CORRELATION], -1, &row->d) || !number_field(&fields[A_BYTES], 0.0, &row->x))
            return SLOW;
        row->c = -1;
    }
    else {
        if (!int_field(&fields[F_PID], 0, &row->a) || !int_field(&fields[F_TID], 0, &row->b)
            || !int_field(&fields[A_SEQUENCE], -1, &row->c))
            return SLOW;
        const Field *correlation = &fields[A_CORRELATION];
        if (kind == KIND_RUNTIME && correlation->type == T_ABSENT)
            correlation = &fields[A_EXTERNAL];
        if (!int_field(correlation, -1, &row->d))
            return SLOW;
        static const int INPUTS[3] = {A_DIMS, A_CONCRETE, A_TYPES};
        int32_t *ids[3] = {&row->dims, &row->concrete, &row->types};
        for (int i = 0; i < 3; i++) {
            const Field *f = &fields[INPUTS[i]];
            int32_t id = -1;
            if (f->type != T_ABSENT) {
                id = table_id(&s->values, (const char *)f->start, (size_t)(f->end - f->start));
                if (id < 0)
                    return -1;
            }
            *ids[i] = id;
        }
    }
    *keep = 1;
    return OK;
}

/* The element at p: OK (with *out past it, and *keep and row set), MORE, SLOW, or -1 on an error. */
static int
element_at(Scanner *s, uc *p, uc *end, uc **out, Row *row, int *keep)
{
    Field fields[N_FIELDS];
    if (*p != '{')
        return SLOW;
    memset(fields, 0, sizeof fields);
    int rc = object_at(p, end, out, fields, F_PH, A_CORRELATION, 0);
    if (rc != OK)
        return rc;
    return resolve(s, fields, row, keep);
}

/* Pids and tids, devices and streams (a, b) are kept as the trace model keeps them, in 32 bits
 * (a wider value wraps, as numpy's cast wraps it): the rows of a big trace are its import's most. */
static int
commit(Scanner *s, const Row *row)
{
    int32_t a = (int32_t)(uint32_t)(uint64_t)row->a, b = (int32_t)(uint32_t)(uint64_t)row->b;
    if (append(&s->kind, &row->kind, 1) < 0 || append(&s->name, &row->name, 4) < 0
        || append(&s->ts, &row->ts, 8) < 0 || append(&s->dur, &row->dur, 8) < 0 || append(&s->a, &a, 4) < 0
        || append(&s->b, &b, 4) < 0 || append(&s->c, &row->c, 8) < 0 || append(&s->d, &row->d, 8) < 0
        || append(&s->x, &row->x, 8) < 0 || append(&s->dims, &row->dims, 4) < 0
        || append(&s->concrete, &row->concrete, 4) < 0 || append(&s->types, &row->types, 4) < 0)
        return -1;
    s->rows++;
    return 0;
}

static PyObject *
Scanner_feed(Scanner *s, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*n", &view, &pos))
        return NULL;
    if (pos < 0 || pos > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        return NULL;
    }
    uc *base = view.buf, *end = base + view.len, *p = base + pos;
    int status;
    for (;;) {
        p = ws(p, end);
        if (p >= end) {
            status = MORE;
            break;
        }
        uc *start = p;
        Row row;
        int keep = 0;
        int rc = element_at(s, p, end, &p, &row, &keep);
        if (rc < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (rc == OK) {
            p = ws(p, end);
            rc = p >= end ? MORE : (*p == ',' || *p == ']') ? OK : SLOW;
        }
        if (rc != OK) {
            p = start;
            status = rc;
            break;
        }
        if (keep && commit(s, &row) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        s->elements++;
        if (*p++ == ']') {
            status = END;
            break;
        }
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(ni)", (Py_ssize_t)(p - base), status);
}

/* A column handed to Python without a copy: it owns the buffer and exports it (numpy's
 * frombuffer keeps it alive). */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
} Column;

static int
Column_getbuffer(Column *c, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)c, c->data ? c->data : (char *)"", c->size, 0, flags);
}

static void
Column_dealloc(Column *c)
{
    PyMem_RawFree(c->data);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyBufferProcs Column_buffer = {(getbufferproc)Column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flameprof._kineto.Column",
    .tp_basicsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column of the Scanner's, as a buffer.",
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_buffer = &Column_buffer,
};

static PyObject *
Scanner_take(Scanner *s, PyObject *arg)
{
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= N_COLUMNS) {
        PyErr_SetString(PyExc_IndexError, "no such column");
        return NULL;
    }
    Buffer *b = column(s, (int)i);
    Column *out = PyObject_New(Column, &ColumnType);
    if (out == NULL)
        return NULL;
    out->data = b->data; /* handed over, shrunk to its size */
    out->size = (Py_ssize_t)b->size;
    if (b->data && b->size < b->capacity) {
        char *data = PyMem_RawRealloc(b->data, b->size ? b->size : 1);
        if (data != NULL)
            out->data = data;
    }
    memset(b, 0, sizeof *b);
    return (PyObject *)out;
}

static PyObject *
Scanner_counts(Scanner *s, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(nn)", s->elements, s->rows);
}

static PyObject *
Scanner_strings(Scanner *s, PyObject *Py_UNUSED(ignored))
{
    PyObject *names = table_list(&s->names);
    PyObject *values = names ? table_list(&s->values) : NULL;
    if (values == NULL) {
        Py_XDECREF(names);
        return NULL;
    }
    table_free(&s->names);
    table_free(&s->values);
    return Py_BuildValue("(NN)", names, values);
}

static void
Scanner_dealloc(Scanner *s)
{
    for (int i = 0; i < N_COLUMNS; i++)
        PyMem_RawFree(column(s, i)->data);
    table_free(&s->names);
    table_free(&s->values);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int
Scanner_init(Scanner *s, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"categories", NULL};
    PyObject *categories;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &PyDict_Type, &categories))
        return -1;
    if (s->n_categories || s->rows) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner already initialized");
        return -1;
    }
    PyObject *key, *value;
    Py_ssize_t at = 0;
    while (PyDict_Next(categories, &at, &key, &value)) {
        const char *text = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        long kind = PyLong_AsLong(value);
        if (text == NULL || strlen(text) >= sizeof s->categories[0] || kind < 0 || kind > KIND_PYTHON
            || s->n_categories >= N_CATEGORIES) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "categories: short lower-case names to kinds");
            return -1;
        }
        strcpy(s->categories[s->n_categories], text);
        s->category_kind[s->n_categories++] = (int8_t)kind;
    }
    uint64_t seed = (uint64_t)(uintptr_t)s ^ ((uint64_t)time(NULL) << 20); /* inputs cannot aim at collisions */
    s->names.seed = hash_mix(seed);
    s->values.seed = hash_mix(seed + 1);
    return 0;
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_VARARGS,
     "feed(buffer, pos) -> (pos, status): read the whole elements of the array from pos on; status 1: the "
     "buffer ends inside an element (pos at its start), 2: Python must read the element at pos, 3: pos is "
     "past the array's ']'"},
    {"take", (PyCFunction)Scanner_take, METH_O,
     "take(i) -> buffer: column i (kind, name, ts, dur, a, b, c, d, x, dims, concrete, types), handed over"},
    {"counts", (PyCFunction)Scanner_counts, METH_NOARGS, "counts() -> (elements read, rows kept)"},
    {"strings", (PyCFunction)Scanner_strings, METH_NOARGS,
     "strings() -> (names, values): the interned bytes, as spelled in the file, dropped here"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flameprof._kineto.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(categories): the events of a traceEvents array, fed a buffer at a time, as columns.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

/* ---- the passes ------------------------------------------------------------------------------ */

/* A map of (int64, int64) to int32, open addressing. */
typedef struct {
    int64_t *keys; /* two per slot */
    int32_t *values; /* -1 when empty */
    size_t cap, count;
} Map;

static int
map_grow(Map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    int64_t *keys = PyMem_RawMalloc(cap * 2 * sizeof(int64_t));
    int32_t *values = PyMem_RawMalloc(cap * sizeof(int32_t));
    if (keys == NULL || values == NULL) {
        PyMem_RawFree(keys);
        PyMem_RawFree(values);
        PyErr_NoMemory();
        return -1;
    }
    memset(values, 0xff, cap * sizeof(int32_t));
    for (size_t i = 0; i < m->cap; i++) {
        if (m->values[i] < 0)
            continue;
        uint64_t h = hash_mix((uint64_t)m->keys[2 * i] * 0x9e3779b97f4a7c15ULL ^ (uint64_t)m->keys[2 * i + 1]);
        size_t j = (size_t)h & (cap - 1);
        while (values[j] >= 0)
            j = (j + 1) & (cap - 1);
        keys[2 * j] = m->keys[2 * i];
        keys[2 * j + 1] = m->keys[2 * i + 1];
        values[j] = m->values[i];
    }
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->values);
    m->keys = keys;
    m->values = values;
    m->cap = cap;
    return 0;
}

/* The slot of key (a, b): its value is -1 when the key is not there. NULL on an error. */
static int32_t *
map_slot(Map *m, int64_t a, int64_t b)
{
    if (2 * (m->count + 1) > m->cap && map_grow(m) < 0)
        return NULL;
    uint64_t h = hash_mix((uint64_t)a * 0x9e3779b97f4a7c15ULL ^ (uint64_t)b);
    size_t j = (size_t)h & (m->cap - 1);
    while (m->values[j] >= 0 && (m->keys[2 * j] != a || m->keys[2 * j + 1] != b))
        j = (j + 1) & (m->cap - 1);
    m->keys[2 * j] = a;
    m->keys[2 * j + 1] = b;
    return &m->values[j];
}

static void
map_free(Map *m)
{
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->values);
}

typedef struct {
    Py_buffer view;
    Py_ssize_t n;
} Array;

static void
release(Array *a, int count)
{
    for (int i = 0; i < count; i++)
        PyBuffer_Release(&a[i].view);
}

/* The buffers of ``args`` (each a contiguous array of items of the size in ``sizes``), all of length n. */
static int
arrays(PyObject *args, Array *out, const int *sizes, int count, Py_ssize_t *n)
{
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != count) {
        PyErr_Format(PyExc_TypeError, "expected %d arrays", count);
        return -1;
    }
    for (int i = 0; i < count; i++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, i), &out[i].view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            release(out, i);
            return -1;
        }
        if (out[i].view.itemsize != sizes[i]) {
            release(out, i + 1);
            PyErr_Format(PyExc_TypeError, "array %d: items of %d bytes expected", i, sizes[i]);
            return -1;
        }
        out[i].n = out[i].view.len / sizes[i];
    }
    *n = out[0].n;
    return 0;
}

#define ARR(i, type) ((type *)a[i].view.buf)

/* nest(order, new_thread, time, end, parent, memory_event): the sorted walk of kineto.py's _nest. */
static PyObject *
k_nest(PyObject *Py_UNUSED(module), PyObject *args)
{
    static const int sizes[] = {8, 1, 8, 8, 4, 4};
    Array a[6];
    memset(a, 0, sizeof a);
    Py_ssize_t total;
    if (arrays(args, a, sizes, 6, &total) < 0)
        return NULL;
    const int64_t *order = ARR(0, int64_t);
    const int8_t *new_thread = ARR(1, int8_t);
    const double *time = ARR(2, double), *end = ARR(3, double);
    int32_t *parent = ARR(4, int32_t), *memory = ARR(5, int32_t);
    Py_ssize_t n = a[4].n, m = a[5].n;
    int32_t *stack = PyMem_RawMalloc((size_t)(n + 1) * sizeof(int32_t));
    if (stack == NULL || a[1].n != total || a[2].n != n + m || a[3].n != n || total != n + m) {
        PyMem_RawFree(stack);
        release(a, 6);
        return stack ? PyErr_Format(PyExc_ValueError, "nest: lengths differ") : PyErr_NoMemory();
    }
    Py_ssize_t sp = 0;
    for (Py_ssize_t k = 0; k < total; k++) {
        int64_t i = order[k];
        if (i < 0 || i >= total)
            continue;
        if (new_thread[k])
            sp = 0;
        if (i >= n) {
            double at = time[i];
            while (sp && end[stack[sp - 1]] < at)
                sp--;
            memory[i - n] = sp ? stack[sp - 1] : -1;
            continue;
        }
        double e = end[i];
        while (sp && end[stack[sp - 1]] + 1e-3 < e)
            sp--;
        parent[i] = sp ? stack[sp - 1] : -1;
        stack[sp++] = (int32_t)i;
    }
    PyMem_RawFree(stack);
    release(a, 6);
    Py_RETURN_NONE;
}

/* attribute(order, parent, kind, declared, layer_mode, layer_name, pid, seq, engine, layer, phase,
 * phases) -> composed: the time-ordered walk of kineto.py's _attribute on integers. layer_mode: 1 a
 * layer annotation (layer_name its path), 2 a module (layer_name its name); ids of composed layers
 * count on from ``phases``'s last item, and ``composed`` lists (parent layer, name) for each. */
static PyObject *
k_attribute(PyObject *Py_UNUSED(module), PyObject *args)
{
    static const int sizes[] = {8, 4, 1, 1, 1, 4, 8, 8, 1, 4, 1, 4};
    Array a[12];
    memset(a, 0, sizeof a);
    Py_ssize_t n;
    if (arrays(args, a, sizes, 12, &n) < 0)
        return NULL;
    const int64_t *order = ARR(0, int64_t);
    const int32_t *parent = ARR(1, int32_t), *layer_name = ARR(5, int32_t);
    const int8_t *kind = ARR(2, int8_t), *declared = ARR(3, int8_t), *mode = ARR(4, int8_t), *engine = ARR(8, int8_t);
    const int64_t *pid = ARR(6, int64_t), *seq = ARR(7, int64_t);
    int32_t *layer = ARR(9, int32_t);
    int8_t *phase = ARR(10, int8_t);
    const int32_t *codes = ARR(11, int32_t); /* other, backward, forward, sync, next composed id */
    int same = a[11].n == 5;
    for (int i = 1; i < 11; i++)
        same &= a[i].n == n;
    if (!same) {
        release(a, 12);
        return PyErr_Format(PyExc_ValueError, "attribute: lengths differ");
    }
    int8_t OTHER = (int8_t)codes[0], BACKWARD = (int8_t)codes[1], FORWARD = (int8_t)codes[2], SYNC = (int8_t)codes[3];
    int32_t next = codes[4];
    Map forward = {0}, composed = {0};
    PyObject *pairs = PyList_New(0);
    if (pairs == NULL)
        goto fail;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t i = order[k];
        if (i < 0 || i >= n)
            continue;
        int32_t p = parent[i];
        int has_parent = p >= 0 && p < n;
        int32_t lay = has_parent ? layer[p] : -1;
        int8_t ph = has_parent ? phase[p] : engine[i] ? BACKWARD : OTHER;
        int8_t decl = declared[i];
        if (decl >= 0 && !(decl == SYNC && ph == BACKWARD))
            ph = decl;
        if (kind[i] == KIND_ANNOTATION && mode[i]) {
            if (mode[i] == 1)
                lay = layer_name[i];
            else if (lay < 0)
                lay = layer_name[i];
            else {
                int32_t *slot = map_slot(&composed, lay, layer_name[i]);
                if (slot == NULL)
                    goto fail;
                if (*slot < 0) {
                    PyObject *pair = Py_BuildValue("(ii)", lay, layer_name[i]);
                    if (pair == NULL || PyList_Append(pairs, pair) < 0) {
                        Py_XDECREF(pair);
                        goto fail;
                    }
                    Py_DECREF(pair);
                    *slot = next++;
                    composed.count++;
                }
                lay = *slot;
            }
            ph = ph == BACKWARD ? BACKWARD : FORWARD;
        }
        if (seq[i] >= 0 && kind[i] == KIND_OP) {
            if (ph == BACKWARD && decl == BACKWARD) {
                int32_t *slot = map_slot(&forward, pid[i], seq[i]);
                if (slot == NULL)
                    goto fail;
                if (*slot >= 0)
                    lay = *slot;
            }
            else if (ph != BACKWARD && lay >= 0) {
                int32_t *slot = map_slot(&forward, pid[i], seq[i]);
                if (slot == NULL)
                    goto fail;
                if (*slot < 0) {
                    *slot = lay;
                    forward.count++;
                }
            }
        }
        layer[i] = lay;
        phase[i] = ph;
    }
    map_free(&forward);
    map_free(&composed);
    release(a, 12);
    return pairs;
fail:
    Py_XDECREF(pairs);
    map_free(&forward);
    map_free(&composed);
    release(a, 12);
    return NULL;
}

/* stacks(order, parent, frames, waited, sid, wait_sid) -> (stack_parent, stack_frame): the builder's
 * interning of kineto_profile.py's walk. frames: 3 frame ids per event (-1: none), the last always
 * set; waited: 1 where the event also gets a stack of ``engine`` under its own (frames[3n] holds it). */
static PyObject *
k_stacks(PyObject *Py_UNUSED(module), PyObject *args)
{
    static const int sizes[] = {8, 4, 4, 1, 4, 4, 4};
    Array a[7];
    memset(a, 0, sizeof a);
    Py_ssize_t n;
    if (arrays(args, a, sizes, 7, &n) < 0)
        return NULL;
    const int64_t *order = ARR(0, int64_t);
    const int32_t *parent = ARR(1, int32_t), *frames = ARR(2, int32_t), *engine = ARR(6, int32_t);
    const int8_t *waited = ARR(3, int8_t);
    int32_t *sid = ARR(4, int32_t), *wait_sid = ARR(5, int32_t);
    Py_ssize_t events = a[1].n;
    if (n > events || a[2].n != 3 * events || a[3].n != events || a[4].n != events || a[5].n != events
        || a[6].n != 1) {
        release(a, 7);
        return PyErr_Format(PyExc_ValueError, "stacks: lengths differ");
    }
    Map map = {0};
    Buffer stack_parent = {0}, stack_frame = {0};
    int32_t count = 0;
    PyObject *result = NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t i = order[k];
        if (i < 0 || i >= events)
            continue;
        int32_t p = parent[i];
        int32_t s = p >= 0 && p < events && sid[p] >= 0 ? sid[p] : -1; /* -1 too before the parent's turn */
        for (int j = 0; j < 4; j++) {
            int32_t f = j < 3 ? frames[3 * i + j] : waited[i] ? engine[0] : -1;
            if (f < 0)
                continue;
            int32_t *slot = map_slot(&map, s, f);
            if (slot == NULL)
                goto done;
            if (*slot < 0) {
                if (append(&stack_parent, &s, 4) < 0 || append(&stack_frame, &f, 4) < 0)
                    goto done;
                *slot = count++;
                map.count++;
            }
            if (j < 3)
                s = *slot;
            else
                wait_sid[i] = *slot;
        }
        sid[i] = s;
    }
    result = Py_BuildValue("(NN)", PyByteArray_FromStringAndSize(stack_parent.data ? stack_parent.data : "", (Py_ssize_t)stack_parent.size),
                           PyByteArray_FromStringAndSize(stack_frame.data ? stack_frame.data : "", (Py_ssize_t)stack_frame.size));
done:
    map_free(&map);
    PyMem_RawFree(stack_parent.data);
    PyMem_RawFree(stack_frame.data);
    release(a, 7);
    return result;
}

static PyMethodDef module_methods[] = {
    {"nest", k_nest, METH_VARARGS, "nest(order, new_thread, time, end, parent, memory_event): see kineto.py"},
    {"attribute", k_attribute, METH_VARARGS, "attribute(...) -> composed layers: see kineto.py"},
    {"stacks", k_stacks, METH_VARARGS, "stacks(...) -> (stack_parent, stack_frame): see kineto_profile.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kineto_module = {
    PyModuleDef_HEAD_INIT, "flameprof._kineto", "flameprof's C reader of torch.profiler (Kineto) traces.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__kineto(void)
{
    for (int i = 0; i < N_FIELDS; i++)
        FIELD_LENGTHS[i] = strlen(FIELD_NAMES[i]);
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&ColumnType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&kineto_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
