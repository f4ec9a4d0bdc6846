/* flameprof._perf: ``perf script`` text collapsed at C speed, as stackcollapse-perf.pl collapses it.
 *
 * ``collapse_blocks`` reads the regular samples of a buffer (a header line, then indented frame lines,
 * then a blank line) and adds each one's period to ``out[stack]``. It stops at the first block it does
 * not read exactly as the Perl script would (a comment or a second header inside, an unrecognised or
 * inline-chain line, blank lines in a row, ...) and hands it back: the Python reader in
 * flameprof/collect/importers/perf_script.py reads that block with its line-by-line state machine, so
 * both paths give the same result on every input. The matchers are those of perf_lines.py, which give
 * the Perl patterns' matches without their backtracking: each line is scanned a bounded number of
 * times (linear time), and nothing is kept between samples but the output dict.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "byte_buffer.h"
#include "byte_hash.h"

typedef struct {
    const char *p;
    Py_ssize_t n;
} Span;

static inline int
is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static inline int
is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static inline int
is_word(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static const char *
find_bytes(const char *s, Py_ssize_t n, const char *needle, Py_ssize_t k)
{
    return k > n ? NULL : memmem(s, (size_t)n, needle, (size_t)k);
}

/* perf_lines.header: comm, pid, tid (n = 0 when absent). 0: not a header line. */
static int
header(const char *s, Py_ssize_t n, Span *comm, Span *pid, Span *tid)
{
    if (n < 2 || is_space((unsigned char)s[0]))
        return 0;
    Py_ssize_t i = 2;
    while (i < n) {
        if (!is_space((unsigned char)s[i])) {
            i++;
            continue;
        }
        Py_ssize_t spaces = i;
        while (spaces < n && is_space((unsigned char)s[spaces]))
            spaces++;
        Py_ssize_t pid_end = spaces;
        while (pid_end < n && is_digit((unsigned char)s[pid_end]))
            pid_end++;
        if (pid_end > spaces) {
            Py_ssize_t slashes = pid_end;
            while (slashes < n && s[slashes] == '/')
                slashes++;
            Py_ssize_t tid_end = slashes;
            while (tid_end < n && is_digit((unsigned char)s[tid_end]))
                tid_end++;
            if (tid_end < n && is_space((unsigned char)s[tid_end])) {
                *comm = (Span){s, i};
                *pid = (Span){s + spaces, pid_end - spaces};
                *tid = (Span){s + slashes, tid_end - slashes};
                return 1;
            }
        }
        i = spaces;
    }
    return 0;
}

/* perf_lines.EVENT searched in a header: ``:(?:\s*(\d+))?\s+(\S+):\s*$``. The event is the last
 * token before a final ':'; a whitespace run precedes it, and before that a ':' or digits after a
 * ':' and optional whitespace. 0: no match. */
static int
event(const char *s, Py_ssize_t n, Span *period, Span *name)
{
    Py_ssize_t e = n;
    while (e > 0 && is_space((unsigned char)s[e - 1]))
        e--;
    if (e < 1 || s[e - 1] != ':')
        return 0;
    Py_ssize_t t = e - 1; /* the token is s[t0:t], then ':' */
    Py_ssize_t t0 = t;
    while (t0 > 0 && !is_space((unsigned char)s[t0 - 1]))
        t0--;
    /* \S+ then ':' : the token may end with ':' characters of its own, but a shorter token would need
     * the rest to be whitespace; the whole run before the final ':' is the only candidate. */
    if (t0 == t)
        return 0;
    Py_ssize_t w = t0;
    while (w > 0 && is_space((unsigned char)s[w - 1]))
        w--;
    if (w == t0)
        return 0; /* no whitespace before the token */
    *name = (Span){s + t0, t - t0};
    if (w > 0 && s[w - 1] == ':') {
        *period = (Span){s, 0};
        return 1;
    }
    Py_ssize_t d = w;
    while (d > 0 && is_digit((unsigned char)s[d - 1]))
        d--;
    if (d == w)
        return 0;
    Py_ssize_t c = d;
    while (c > 0 && is_space((unsigned char)s[c - 1]))
        c--;
    if (c > 0 && s[c - 1] == ':') {
        *period = (Span){s + d, w - d};
        return 1;
    }
    return 0;
}

/* perf_lines.frame: ``\s*(\w+)\s*(.+) \((.*)\)`` -> address, symbol, module. 0: no match. */
static int
frame(const char *s, Py_ssize_t n, Span *pc, Span *sym, Span *mod)
{
    Py_ssize_t i = 0;
    while (i < n && is_space((unsigned char)s[i]))
        i++;
    Py_ssize_t w0 = i;
    while (i < n && is_word((unsigned char)s[i]))
        i++;
    if (i == w0)
        return 0;
    Py_ssize_t w1 = i;
    const char *c = memrchr(s, ')', (size_t)n);
    Py_ssize_t close = c ? c - s : -1, opening = -1;
    for (Py_ssize_t limit = close; limit > 1;) { /* the last " (" that ends before close */
        const char *q = memrchr(s + 1, '(', (size_t)(limit - 1));
        if (q == NULL)
            break;
        if (q[-1] == ' ') {
            opening = q - 1 - s;
            break;
        }
        limit = q - s;
    }
    Py_ssize_t after = w1;
    while (after < n && is_space((unsigned char)s[after]))
        after++;
    Py_ssize_t symbol = after < opening - 1 ? after : opening - 1;
    if (symbol < w0 + 1)
        return 0;
    *pc = (Span){s + w0, (w1 < symbol ? w1 : symbol) - w0};
    *sym = (Span){s + symbol, opening - symbol};
    *mod = (Span){s + opening + 2, close - opening - 2};
    return 1;
}

typedef struct {
    int pid, tid, kernel, jit, addrs;
} Options;

/* ``/tmp/perf-\d+\.map`` found in s. */
static int
jit_map(const char *s, Py_ssize_t n)
{
    const char *p = s, *end = s + n;
    while ((p = find_bytes(p, end - p, "/tmp/perf-", 10)) != NULL) {
        const char *q = p + 10, *d = q;
        while (d < end && is_digit((unsigned char)*d))
            d++;
        if (d > q && end - d >= 4 && memcmp(d, ".map", 4) == 0)
            return 1;
        p += 1;
    }
    return 0;
}

/* A Go method name, ``\.\(.*\)\.``: a ".(" with a ")." after it. */
static int
go_method(const char *s, Py_ssize_t n)
{
    const char *start = find_bytes(s, n, ".(", 2);
    return start != NULL && find_bytes(start + 2, s + n - start - 2, ").", 2) != NULL;
}

/* The tidied, annotated name of one frame (PerfScriptParser._func, not inlined) appended to ``out``
 * after a ';'. */
static int
put_func(Buffer *out, Span func, Span pc, Span mod, int java, const Options *o)
{
    Py_ssize_t start = out->size;
    if (func.n == 9 && memcmp(func.p, "[unknown]", 9) == 0) {
        Span name = {"unknown", 7};
        if (!(mod.n == 9 && memcmp(mod.p, "[unknown]", 9) == 0)) {
            Py_ssize_t k = mod.n;
            while (k > 0 && mod.p[k - 1] != '/')
                k--;
            name = (Span){mod.p + k, mod.n - k};
        }
        if (append(out, ";[", 2) < 0 || append(out, name.p, name.n) < 0)
            return -1;
        if (o->addrs && (append(out, " <", 2) < 0 || append(out, pc.p, pc.n) < 0 || append(out, ">", 1) < 0))
            return -1;
        if (append(out, "]", 1) < 0)
            return -1;
    }
    else if (append(out, ";", 1) < 0 || append(out, func.p, func.n) < 0)
        return -1;
    char *f = out->data + start + 1;
    Py_ssize_t n = out->size - start - 1;
    for (char *semi = memchr(f, ';', (size_t)n); semi != NULL; semi = memchr(semi, ';', (size_t)(f + n - semi)))
        *semi = ':';
    if (memchr(f, '(', (size_t)n) != NULL && !go_method(f, n)) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (f[i] != '(')
                continue;
            if (n - i - 1 >= 20 && memcmp(f + i + 1, "anonymous namespace)", 20) == 0)
                continue;
            n = i;
            break;
        }
    }
    if (n > 0 && (memchr(f, '"', (size_t)n) != NULL || memchr(f, '\'', (size_t)n) != NULL)) {
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (f[i] != '"' && f[i] != '\'')
                f[k++] = f[i];
        n = k;
    }
    if (java && n > 0 && f[0] == 'L' && memchr(f, '/', (size_t)n) != NULL) {
        memmove(f, f + 1, (size_t)(n - 1));
        n--;
    }
    out->size = start + 1 + n;
    if (o->kernel && mod.n > 0 && (mod.p[0] == '[' || (mod.n >= 7 && memcmp(mod.p + mod.n - 7, "vmlinux", 7) == 0))
        && find_bytes(mod.p, mod.n, "unknown", 7) == NULL)
        return append(out, "_[k]", 4);
    if (o->jit && jit_map(mod.p, mod.n) && find_bytes(f, n, "_[j]", 4) == NULL)
        return append(out, "_[j]", 4);
    return 0;
}

/* One frame line appended to ``out`` as ";func" (nothing for a frame the Perl script skips).
 * 0 done, 1 not read here (the Python reader takes the block), -1 error. */
static int
frame_line(Buffer *out, const char *s, Py_ssize_t n, int java, const Options *o)
{
    if (n == 0 || !is_space((unsigned char)s[0]))
        return 1; /* blank, a comment or maybe a header: the line-by-line machine's */
    Span pc, sym, mod;
    if (!frame(s, n, &pc, &sym, &mod))
        return 1;
    /* ``\+0x[\da-f]+$`` removed from the symbol */
    Py_ssize_t k = sym.n;
    while (k > 0 && (is_digit((unsigned char)sym.p[k - 1]) || (sym.p[k - 1] >= 'a' && sym.p[k - 1] <= 'f')))
        k--;
    if (k < sym.n && k >= 3 && memcmp(sym.p + k - 3, "+0x", 3) == 0)
        sym.n = k - 3;
    if (sym.n > 0 && sym.p[0] == '(')
        return 0;
    for (const char *g = sym.p + 1; sym.n > 1 && (g = memchr(g, '>', (size_t)(sym.p + sym.n - g))) != NULL; g++)
        if (g[-1] == '-')
            return 1; /* an inline chain */
    if (sym.n == 0)
        return 0;
    return put_func(out, sym, pc, mod, java, o) < 0 ? -1 : 0;
}

/* ``int(digits)``, saturated at 10**19 past 19 digits (perf_script._number). */
static unsigned long long
number(Span d)
{
    if (d.n > 19)
        return 10000000000000000000ULL;
    unsigned long long v = 0;
    for (Py_ssize_t i = 0; i < d.n; i++)
        v = v * 10 + (unsigned long long)(d.p[i] - '0');
    return v;
}

/* The frames below a sample's leaf line, as stacks repeat them: (java, lines) -> ";root;...;caller"
 * text. Bounded: past CACHE_BYTES of text the table starts again empty. */
#define CACHE_BYTES ((Py_ssize_t)64 << 20)

typedef struct {
    uint64_t hash;
    Py_ssize_t key, value; /* offsets into the arena: key bytes, then value bytes */
    Py_ssize_t key_len, value_len;
} Entry;

/* A distinct output line and its summed period, kept in C until ``flush``: a Python bytes object
 * and a dict lookup (its hash over the whole line) per sample cost more than the rest of the sample. */
typedef struct {
    uint64_t hash;
    Py_ssize_t at, len;           /* the line's bytes in ``stacks`` */
    unsigned long long sum;
} Total;

typedef struct {
    PyObject_HEAD
    Options o;
    PyObject *out, *other_events; /* dict, set */
    PyObject *event_filter;       /* bytes, borrowed for one call */
    Buffer key;                      /* the frames of the current sample, leaf first, as ";func" pieces */
    Buffer order;                    /* Py_ssize_t offsets into key of each piece */
    Entry *entries;               /* open addressing, power-of-two size; key_len < 0: empty */
    Py_ssize_t cap, count;
    Buffer arena;
    Buffer line;                     /* the current sample's output line: pname, then its frames */
    Total *totals;                /* open addressing, power-of-two size; len < 0: empty */
    Py_ssize_t totals_cap, totals_count;
    Buffer stacks;                   /* the distinct lines' bytes, one after another */
} Collapser;

static void
cache_clear(Collapser *c)
{
    for (Py_ssize_t i = 0; i < c->cap; i++)
        c->entries[i].key_len = -1;
    c->count = 0;
    c->arena.size = 0;
}

static Entry *
cache_find(Collapser *c, const char *k, Py_ssize_t n, uint64_t h)
{
    Py_ssize_t mask = c->cap - 1, j = (Py_ssize_t)(h & (uint64_t)mask);
    for (;; j = (j + 1) & mask) {
        Entry *e = &c->entries[j];
        if (e->key_len < 0 || (e->hash == h && e->key_len == n && memcmp(c->arena.data + e->key, k, (size_t)n) == 0))
            return e;
    }
}

/* Adds (k -> the pieces in c->key from ``from``, root first); 0 or -1. */
static int
cache_add(Collapser *c, const char *k, Py_ssize_t n, uint64_t h, Py_ssize_t from, Py_ssize_t first, Entry **out)
{
    if (c->arena.size + n + (c->key.size - from) > CACHE_BYTES || (c->count + 1) * 2 > c->cap) {
        if (c->count * 2 + 2 > c->cap && c->arena.size + n + (c->key.size - from) <= CACHE_BYTES) {
            Py_ssize_t cap = c->cap * 2;
            Entry *table = PyMem_Malloc((size_t)cap * sizeof(Entry));
            if (table == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            for (Py_ssize_t i = 0; i < cap; i++)
                table[i].key_len = -1;
            for (Py_ssize_t i = 0; i < c->cap; i++) {
                Entry *e = &c->entries[i];
                if (e->key_len < 0)
                    continue;
                Py_ssize_t j = (Py_ssize_t)(e->hash & (uint64_t)(cap - 1));
                while (table[j].key_len >= 0)
                    j = (j + 1) & (cap - 1);
                table[j] = *e;
            }
            PyMem_Free(c->entries);
            c->entries = table;
            c->cap = cap;
        }
        else
            cache_clear(c);
    }
    Entry *e = cache_find(c, k, n, h);
    Py_ssize_t key_at = c->arena.size;
    if (append(&c->arena, k, n) < 0)
        return -1;
    Py_ssize_t value_at = c->arena.size;
    const Py_ssize_t *at = (const Py_ssize_t *)c->order.data;
    Py_ssize_t pieces = c->order.size / (Py_ssize_t)sizeof(Py_ssize_t);
    for (Py_ssize_t i = pieces - 1; i >= first; i--) {
        Py_ssize_t a = at[i], b = i + 1 < pieces ? at[i + 1] : (Py_ssize_t)c->key.size;
        if (append(&c->arena, c->key.data + a, b - a) < 0)
            return -1;
    }
    *e = (Entry){h, key_at, value_at, n, c->arena.size - value_at};
    c->count++;
    *out = e;
    return 0;
}

/* The frame lines of s[0:n] (each ending in '\n') parsed into c->key; 0, 1 (not read here) or -1. */
static int
frame_lines(Collapser *c, const char *s, Py_ssize_t n, int java)
{
    const char *p = s, *end = s + n;
    while (p < end) {
        const char *q = memchr(p, '\n', (size_t)(end - p));
        Py_ssize_t at = c->key.size;
        int r = frame_line(&c->key, p, q - p, java, &c->o);
        if (r)
            return r;
        if ((Py_ssize_t)c->key.size > at && append(&c->order, (const char *)&at, sizeof(at)) < 0)
            return -1;
        p = q + 1;
    }
    return 0;
}

/* out[line] += sum, in Python (the dict holds the lines the Python reader added too). */
static int
add_to_out(Collapser *c, const char *line, Py_ssize_t n, unsigned long long sum)
{
    PyObject *key = PyBytes_FromStringAndSize(line, n), *value = PyLong_FromUnsignedLongLong(sum);
    int r = -1;
    if (key != NULL && value != NULL) {
        PyObject *old = PyDict_GetItemWithError(c->out, key);
        if (old != NULL) {
            PyObject *total = PyNumber_Add(old, value);
            if (total != NULL) {
                r = PyDict_SetItem(c->out, key, total);
                Py_DECREF(total);
            }
        }
        else if (!PyErr_Occurred())
            r = PyDict_SetItem(c->out, key, value);
    }
    Py_XDECREF(key);
    Py_XDECREF(value);
    return r;
}

static int
totals_grow(Collapser *c)
{
    Py_ssize_t cap = c->totals_cap ? c->totals_cap * 2 : 1024;
    Total *table = PyMem_Malloc((size_t)cap * sizeof(Total));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < cap; i++)
        table[i].len = -1;
    for (Py_ssize_t i = 0; i < c->totals_cap; i++) {
        Total *t = &c->totals[i];
        if (t->len < 0)
            continue;
        Py_ssize_t j = (Py_ssize_t)(t->hash & (uint64_t)(cap - 1));
        while (table[j].len >= 0)
            j = (j + 1) & (cap - 1);
        table[j] = *t;
    }
    PyMem_Free(c->totals);
    c->totals = table;
    c->totals_cap = cap;
    return 0;
}

/* A sample's period added to its line's total (a sum past 64 bits goes to ``out`` first). */
static int
add_total(Collapser *c, const char *line, Py_ssize_t n, unsigned long long weight)
{
    if ((c->totals_count + 1) * 2 > c->totals_cap && totals_grow(c) < 0)
        return -1;
    uint64_t h = hash_lanes(line, n, 0);
    Py_ssize_t mask = c->totals_cap - 1, j = (Py_ssize_t)(h & (uint64_t)mask);
    for (;; j = (j + 1) & mask) {
        Total *t = &c->totals[j];
        if (t->len < 0)
            break;
        if (t->hash == h && t->len == n && memcmp(c->stacks.data + t->at, line, (size_t)n) == 0) {
            if (t->sum + weight < t->sum) {
                if (add_to_out(c, line, n, t->sum) < 0)
                    return -1;
                t->sum = 0;
            }
            t->sum += weight;
            return 0;
        }
    }
    Py_ssize_t at = c->stacks.size;
    if (append(&c->stacks, line, n) < 0)
        return -1;
    c->totals[j] = (Total){h, at, n, weight};
    c->totals_count++;
    return 0;
}

/* One block from ``s``: a header line, frame lines, then a blank line; ``*next`` is set after that.
 * 0 read, 1 not read here (the Python reader takes it), 2 no blank line before ``end``, -1 error. */
static int
block(Collapser *st, const char *s, const char *end, const char **next, Py_ssize_t *lines)
{
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    if (nl == NULL)
        return 2;
    Py_ssize_t hn = nl - s;
    /* the blank line that ends the block (the first "\n\n" from s) */
    Py_ssize_t count = 1;
    const char *leaf = nl + 1, *rest = leaf, *stop = leaf;
    for (;;) {
        const char *q = memchr(stop, '\n', (size_t)(end - stop));
        if (q == NULL)
            return 2;
        count++;
        if (q == stop)
            break;
        if (rest == leaf)
            rest = q + 1;
        stop = q + 1;
    }
    if (hn == 0 || s[0] == '#' || is_space((unsigned char)s[0]))
        return 1;
    Span comm, pid, tid, period = {s, 0}, name = {s, 0};
    if (!header(s, hn, &comm, &pid, &tid))
        return 1;
    int kept = 1;
    if (event(s, hn, &period, &name)) {
        Py_ssize_t fn = PyBytes_GET_SIZE(st->event_filter);
        if (fn == 0)
            return 1; /* the first event decides the filter: the Python reader notes it */
        if (fn != name.n || memcmp(PyBytes_AS_STRING(st->event_filter), name.p, (size_t)fn) != 0)
            kept = 0;
    }
    int java = hn >= 4 && memcmp(s, "java", 4) == 0;
    /* the leaf line's frames, then those below it (cached per distinct text) */
    st->key.size = 0;
    st->order.size = 0;
    int r = frame_lines(st, leaf, rest - leaf, java);
    if (r)
        return r;
    Py_ssize_t leaf_end = st->key.size, leaf_pieces = st->order.size / (Py_ssize_t)sizeof(Py_ssize_t);
    uint64_t h = hash_lanes(rest, stop - rest, (uint64_t)java);
    Entry *e = cache_find(st, rest, stop - rest, h);
    if (e->key_len < 0) {
        r = frame_lines(st, rest, stop - rest, java);
        if (r)
            return r;
        if (cache_add(st, rest, stop - rest, h, leaf_end, leaf_pieces, &e) < 0)
            return -1;
    }
    *next = stop + 1;
    *lines += count;
    if (!kept) {
        PyObject *ev = PyBytes_FromStringAndSize(name.p, name.n);
        if (ev == NULL)
            return -1;
        r = PySet_Add(st->other_events, ev);
        Py_DECREF(ev);
        return r;
    }
    /* pname, the frames below the leaf line root first, then the leaf line's own */
    Span p1 = pid, t1 = tid;
    if (tid.n == 0 || (tid.n == 1 && tid.p[0] == '0')) {
        t1 = pid;
        p1 = (Span){"?", 1};
    }
    Py_ssize_t pn = comm.n + (st->o.tid ? 2 + p1.n + t1.n : st->o.pid ? 1 + p1.n : 0);
    st->line.size = 0;
    if (reserve(&st->line, pn + e->value_len + leaf_end) < 0)
        return -1;
    char *k = st->line.data;
    memcpy(k, comm.p, (size_t)comm.n);
    Py_ssize_t o = comm.n;
    if (st->o.tid || st->o.pid) {
        k[o++] = '-';
        memcpy(k + o, p1.p, (size_t)p1.n);
        o += p1.n;
        if (st->o.tid) {
            k[o++] = '/';
            memcpy(k + o, t1.p, (size_t)t1.n);
            o += t1.n;
        }
    }
    for (Py_ssize_t i = 0; i < o; i++)
        if (k[i] == ' ')
            k[i] = '_';
    memcpy(k + o, st->arena.data + e->value, (size_t)e->value_len);
    o += e->value_len;
    const Py_ssize_t *at = (const Py_ssize_t *)st->order.data;
    for (Py_ssize_t i = leaf_pieces - 1; i >= 0; i--) { /* an inline chain is split elsewhere: one piece */
        Py_ssize_t from = at[i], to = i + 1 < leaf_pieces ? at[i + 1] : leaf_end;
        memcpy(k + o, st->key.data + from, (size_t)(to - from));
        o += to - from;
    }
    unsigned long long weight = period.n && !(period.n == 1 && period.p[0] == '0') ? number(period) : 1;
    return add_total(st, k, o, weight);
}

static PyObject *
Collapser_feed(Collapser *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start;
    PyObject *event_filter;
    if (self->entries == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Collapser is not initialized");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*nS", &view, &start, &event_filter))
        return NULL;
    self->event_filter = event_filter;
    const char *data = view.buf, *end = data + view.len;
    const char *p = data + (start < 0 ? 0 : start > view.len ? view.len : start);
    Py_ssize_t lines = 0;
    int r = 0;
    while (p < end) {
        const char *next = p;
        r = block(self, p, end, &next, &lines);
        if (r)
            break;
        p = next;
    }
    self->event_filter = NULL;
    PyObject *result = r < 0 ? NULL : Py_BuildValue("(nnO)", p - data, lines, r == 1 ? Py_True : Py_False);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
Collapser_flush(Collapser *self, PyObject *Py_UNUSED(ignored))
{
    for (Py_ssize_t i = 0; i < self->totals_cap; i++) {
        Total *t = &self->totals[i];
        if (t->len >= 0 && add_to_out(self, self->stacks.data + t->at, t->len, t->sum) < 0)
            return NULL;
        t->len = -1;
    }
    self->totals_count = 0;
    self->stacks.size = 0;
    Py_RETURN_NONE;
}

static int
Collapser_init(Collapser *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"out", "other_events", "pid", "tid", "kernel", "jit", "addrs", NULL};
    PyObject *out, *other;
    Options o = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!ppppp", kwlist, &PyDict_Type, &out, &PySet_Type, &other,
                                     &o.pid, &o.tid, &o.kernel, &o.jit, &o.addrs))
        return -1;
    if (self->entries != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Collapser is already initialized");
        return -1;
    }
    self->o = o;
    Py_INCREF(out);
    self->out = out;
    Py_INCREF(other);
    self->other_events = other;
    self->cap = 1024;
    self->entries = PyMem_Malloc((size_t)self->cap * sizeof(Entry));
    if (self->entries == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    cache_clear(self);
    return 0;
}

static void
Collapser_dealloc(Collapser *self)
{
    PyMem_Free(self->key.data);
    PyMem_Free(self->order.data);
    PyMem_Free(self->arena.data);
    PyMem_Free(self->entries);
    PyMem_Free(self->line.data);
    PyMem_Free(self->totals);
    PyMem_Free(self->stacks.data);
    Py_XDECREF(self->out);
    Py_XDECREF(self->other_events);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Collapser_methods[] = {
    {"feed", (PyCFunction)Collapser_feed, METH_VARARGS,
     "feed(data, start, event_filter) -> (end, lines, declined): add the period of each regular sample from "
     "data[start:] to out[stack], up to the first block left to the Python reader (declined) or the end of "
     "the last complete block"},
    {"flush", (PyCFunction)Collapser_flush, METH_NOARGS,
     "flush(): add the periods summed so far to out (out[stack] += sum) and start again from none"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CollapserType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flameprof._perf.Collapser",
    .tp_basicsize = sizeof(Collapser),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Collapser(out, other_events, pid, tid, kernel, jit, addrs): perf script samples -> out[stack] += period",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Collapser_init,
    .tp_dealloc = (destructor)Collapser_dealloc,
    .tp_methods = Collapser_methods,
};

static struct PyModuleDef perf_module = {
    PyModuleDef_HEAD_INIT, "flameprof._perf", "flameprof's C reader of perf script text.", -1, NULL,
};

PyMODINIT_FUNC
PyInit__perf(void)
{
    if (PyType_Ready(&CollapserType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&perf_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&CollapserType);
    if (PyModule_AddObject(m, "Collapser", (PyObject *)&CollapserType) < 0) {
        Py_DECREF(&CollapserType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
