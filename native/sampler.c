/* flameprof._native: the per-tick hot path of the in-process sampler.
 *
 * One call of Sampler.sample() takes one sample of every Python thread of the interpreter.
 * Phase 1 walks the thread states and frames with the GIL held and never runs Python code (not
 * even a garbage collection's finalizers), so no thread state or frame can disappear under it; a
 * frame whose code it has met before is read in place (walk_in_place), others through frame
 * objects it keeps until the end of the tick. Phase 2 turns the collected frames into a stack id
 * using C hash tables (code object -> frame id, frame-id sequence -> stack id) and appends one
 * compact row per thread. Python is called back only for things seen for the first time (a new code
 * object, stack, thread, layer hook result or truncation marker), so the steady state allocates
 * no Python object per sample.
 *
 * Rows: per tick its monotonic time, the previous tick's and its row count; per row the thread
 * index (uint16), stack id (int32), CPU seconds (float32) and GIL state (uint8): 11 bytes a sample
 * plus 20 a tick (wall times follow from the tick times, see append_row; GIL states: gil_states).
 *
 * This file is the Sampler object and the module. The clock thread that asks for a sample at each
 * tick is in clock.c; the hash map its tables use in hash_map.c/.h, its arrays in growable.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "interp_internals.h"
#include "growable.h"
#include "hash_map.h"
#include "sampler.h"
#include "clock.h"
#include "steps.h"

#define SKIP_FRAME (-1)
#define BOUNDARY_FRAME (-2)
#define FLAG_HOOK 1
#define FLAG_PER_FRAME 2  /* the hook's result depends on the frame (its line): never cached */
#define NO_CPU (-1.0)
#define MAX_THREAD_INDEX 32767

/* A row's GIL state at its tick (model/records.py has the same values) */
#define GIL_NOT_HELD 0      /* neither held it nor waited for it */
#define GIL_HELD 1
#define GIL_UNKNOWN 2       /* not recorded (flameprof_take_sample without the GIL's state) */
#define GIL_WAITING 3       /* waited for it while another thread held it */
#define GIL_CANDIDATE 4     /* within a sample: did not hold it while another thread did, or some waited */

/* A thread's CPU clock is a system call to read (about 3 us, cold, in a sample of a PyTorch loop:
 * most of a sample's cost). It is read at most every CPU_READ_PERIOD seconds, or every MAX_UNREAD
 * rows, and the CPU time since the last read is shared out over the thread's rows since then, by
 * their wall time: at 100 Hz every row has its own read, at 1 kHz a 5 ms stretch is shared. */
#define CPU_READ_PERIOD 0.005
#define MAX_UNREAD 32

/* Set while the clock thread samples a frozen interpreter (growable.h). */
_Thread_local int flameprof_no_thread_state;

/* ---- the sampler object */

typedef struct {
    unsigned long ident;
    int32_t index;      /* the builder's thread index */
    clockid_t clock;
    int has_clock;
    double last_cpu;    /* NO_CPU when unreadable */
    double last_read;   /* when last_cpu was read */
    uint64_t seen;      /* tick number it was last seen in */
    uint64_t held_at;   /* tick number it was last seen holding the GIL in (0: never) */
    uint8_t last_gil;   /* its GIL state in its last row (GIL_*) */
    int unread;                          /* its rows since then, waiting for their CPU time */
    Py_ssize_t unread_row[MAX_UNREAD];
    float unread_wall[MAX_UNREAD];
} ThreadRec;

/* A frame met in phase 1. Walked through frame objects (``frame`` is a new reference, the rest is
 * worked out in phase 2), or in place (``frame`` NULL: its code's entry and its layer hook's
 * frame id were already known, and ``owner`` is its frame object if it had one, for identity only). */
typedef struct {
    PyObject *frame;
    PyCodeObject *code;     /* borrowed */
    PyObject *owner;
    int64_t entry;
    int32_t hook;
} FrameRef;

typedef struct {
    unsigned long ident;
    Py_ssize_t first, count;      /* its frames in the scratch array, leaf first */
    Py_ssize_t scope_first, scope_count;
    int32_t sid;                  /* its stack id, once resolved (frozen samples) */
    Py_ssize_t thread;            /* its ThreadRec's index, once resolved */
    Py_ssize_t row;               /* its row in this tick, once appended (-1: none) */
    int held;                     /* it held the GIL at the tick */
} Walk;

struct Sampler {
    PyObject_HEAD
    /* Python callbacks, each called only for something new */
    PyObject *resolve_code;    /* code -> frame id, -1 skip, -2 boundary */
    PyObject *resolve_stack;   /* tuple of frame ids, root first -> stack id */
    PyObject *resolve_thread;  /* ident -> (thread index, native id or 0), or None: not yet */
    PyObject *resolve_frame;   /* Frame -> frame id (hook results and scope frames) */
    PyObject *resolve_marker;  /* number of dropped frames -> frame id of the marker */
    PyObject *hooks;           /* dict code -> hook(frame) */
    PyObject *scopes;          /* dict ident -> [(frame entered in, Frame), ...] */
    PyObject *held;            /* list keeping interned code and scope Frame objects alive */
    int max_depth;

    Map codes;                 /* code -> (flags << 32) | frame id */
    Map hook_cache;            /* (code, self, type(self)) -> frame id or -1 */
    Map object_frames;         /* Frame object -> frame id */
    Map markers;               /* dropped count -> frame id */

    /* stacks: open addressing over sequences stored in an arena */
    int32_t *arena;
    Py_ssize_t arena_len, arena_cap;
    Map stacks;                /* (hash, arena offset, length) -> stack id; verified against the arena */

    ThreadRec *threads;
    Py_ssize_t nthreads, threads_cap, thread_hint;

    /* scratch for one tick */
    FrameRef *frames;
    Py_ssize_t nframes, frames_cap;
    Walk *walks;
    Py_ssize_t nwalks, walks_cap;
    PyObject **scope_items;    /* pairs (entered frame, Frame), new references */
    Py_ssize_t nscope, scope_cap;
    int32_t *ids;
    PyObject **owners;
    Py_ssize_t nids, ids_cap, owners_cap;

    /* the recorded rows */
    double *tick_time;
    double *tick_wall;         /* the wall time each of the tick's rows stands for */
    uint32_t *tick_rows;
    Py_ssize_t nticks, ttime_cap, twall_cap, trows_cap;
    uint16_t *row_thread;
    int32_t *row_stack;
    float *row_cpu;
    uint8_t *row_gil;
    Py_ssize_t nrows, rthread_cap, rstack_cap, rcpu_cap, rgil_cap;
    Py_ssize_t done_rows;      /* rows of completed ticks: what readers see */

    double last_tick;
    double unwatched;          /* seconds the clock did not watch, still to be given to ticks */
    uint64_t tick_count;       /* samples taken (including ones that were empty) */
    double busy;
    uint64_t dropped;          /* rows lost: thread index beyond uint16 */
    int sampling;              /* a sample is in progress (reentrancy guard) */
    int stale;                 /* the code and hook caches must be rebuilt */
};

static double
read_cpu(ThreadRec *t)
{
    struct timespec ts;
    if (!t->has_clock || clock_gettime(t->clock, &ts) != 0)
        return NO_CPU;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Read the thread's CPU clock and share the CPU time since the last read over its unread rows.
 * A share never exceeds its row's wall time (a read long after the rows, e.g. when a profile is
 * built after the session, would otherwise give them CPU time the thread spent afterwards). */
static void
settle_cpu(Sampler *s, ThreadRec *t, double now)
{
    double cpu_now = read_cpu(t);
    double cpu = (cpu_now != NO_CPU && t->last_cpu != NO_CPU) ? cpu_now - t->last_cpu : 0.0;
    t->last_cpu = cpu_now;
    t->last_read = now;
    double wall = 0.0;
    for (int i = 0; i < t->unread; i++)
        wall += t->unread_wall[i];
    double share = wall > 0.0 && cpu > 0.0 ? (cpu < wall ? cpu / wall : 1.0) : 0.0;
    for (int i = 0; i < t->unread; i++)
        s->row_cpu[t->unread_row[i]] = (float)(share * t->unread_wall[i]);
    t->unread = 0;
}

static void
release_scratch(Sampler *s)
{
    for (Py_ssize_t i = 0; i < s->nframes; i++)
        Py_XDECREF(s->frames[i].frame);
    for (Py_ssize_t i = 0; i < s->nscope * 2; i++)
        Py_DECREF(s->scope_items[i]);
    s->nframes = s->nwalks = s->nscope = 0;
}

/* An int returned by a callback; -3 (and a cleared error) when it failed. */
static long
call_for_int(PyObject *fn, PyObject *arg)
{
    PyObject *r = PyObject_CallOneArg(fn, arg);
    if (r == NULL) {
        PyErr_Clear();
        return -3;
    }
    long v = PyLong_AsLong(r);
    Py_DECREF(r);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -3;
    }
    return v;
}

static int64_t
code_entry(Sampler *s, PyCodeObject *code)
{
    Entry *e = map_find(&s->codes, (uintptr_t)code, 0, 0);
    if (e != NULL)
        return e->value;
    long fid = call_for_int(s->resolve_code, (PyObject *)code);
    if (fid == -3)
        fid = SKIP_FRAME;
    int64_t flags = 0;
    if (fid >= 0 && s->hooks != Py_None) {
        int has = PyDict_Contains(s->hooks, (PyObject *)code);
        if (has < 0)
            PyErr_Clear();
        else if (has) {
            flags |= FLAG_HOOK;
            PyObject *hook = PyDict_GetItemWithError(s->hooks, (PyObject *)code);  /* borrowed */
            int per_frame = hook != NULL ? PyObject_HasAttrString(hook, "per_frame") : 0;
            if (per_frame > 0)
                flags |= FLAG_PER_FRAME;
            PyErr_Clear();
        }
    }
    int64_t value = (flags << 32) | (uint32_t)(int32_t)fid;
    if (PyList_Append(s->held, (PyObject *)code) < 0 || flameprof_map_put(&s->codes, (uintptr_t)code, 0, 0, value) < 0)
        PyErr_Clear();
    return value;
}

/* The frame id a Frame object interns to (hook results and user scopes). */
static int32_t
object_frame(Sampler *s, PyObject *frame_obj)
{
    Entry *e = map_find(&s->object_frames, (uintptr_t)frame_obj, 0, 0);
    if (e != NULL)
        return (int32_t)e->value;
    long fid = call_for_int(s->resolve_frame, frame_obj);
    if (fid < 0)
        return -1;
    if (s->object_frames.len > 4096) {  /* scopes that build a new Frame per entry: stay bounded */
        flameprof_map_clear(&s->object_frames);
        if (PyList_SetSlice(s->held, 0, PyList_GET_SIZE(s->held), NULL) < 0)
            PyErr_Clear();
        flameprof_map_clear(&s->codes);   /* codes were held by the same list */
    }
    if (PyList_Append(s->held, frame_obj) < 0 || flameprof_map_put(&s->object_frames, (uintptr_t)frame_obj, 0, 0, fid) < 0)
        PyErr_Clear();
    return (int32_t)fid;
}

/* ``self`` of a method's frame, the value of its first argument (borrowed) or NULL, read from the
 * frame's slots without building ``frame.f_locals``: on 3.10 and 3.11 that fills a dict, and when
 * its allocation runs the garbage collector another thread may finish the frame meanwhile (CPython
 * 3.11 then crashes). From the interpreter frame ``iframe`` when not NULL (3.11+), else from the
 * frame object. */
static PyObject *
first_argument(PyObject *frame, void *iframe, PyCodeObject *code)
{
    if (code->co_argcount < 1)
        return NULL;
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *value = flameprof_frame_first_local(iframe != NULL ? iframe : flameprof_frame_of((PyFrameObject *)frame));
#else
    PyObject **slots = ((PyFrameObject *)frame)->f_localsplus;
    PyObject *value = slots[0];
    if (value == NULL && code->co_cell2arg != NULL) {  /* 3.10 moves a captured argument to a cell */
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(code->co_cellvars); i++)
            if (code->co_cell2arg[i] == 0)
                value = slots[code->co_nlocals + i];
    }
#endif
    if (value != NULL && PyCell_Check(value))  /* an argument a closure captured */
        value = PyCell_GET(value);
    return value;
}

/* The layer hook's result for a frame of ``code`` with ``self_obj``, once it was asked. */
static Entry *
cached_hook(Sampler *s, PyCodeObject *code, PyObject *self_obj)
{
    return map_find(&s->hook_cache, (uintptr_t)code, (uintptr_t)self_obj, self_obj ? (uintptr_t)Py_TYPE(self_obj) : 0);
}

/* The frame a layer hook inserts for ``frame``, cached by (code, self, type(self)) unless the
 * hook's result depends on more of the frame (``per_frame``). */
static int32_t
hook_frame(Sampler *s, PyObject *frame, PyCodeObject *code, int per_frame)
{
    PyObject *self_obj = per_frame ? NULL : first_argument(frame, NULL, code);
    uintptr_t self_key = (uintptr_t)self_obj, type_key = self_obj ? (uintptr_t)Py_TYPE(self_obj) : 0;
    Entry *e = self_obj ? cached_hook(s, code, self_obj) : NULL;
    if (e != NULL)
        return (int32_t)e->value;
    int32_t fid = -1;
    PyObject *hook = PyDict_GetItemWithError(s->hooks, (PyObject *)code);  /* borrowed */
    if (hook != NULL) {
        Py_INCREF(hook);
        PyObject *extra = PyObject_CallOneArg(hook, frame);  /* no collection: see flameprof_take_sample() */
        Py_DECREF(hook);
        if (extra == NULL)
            PyErr_Clear();
        else {
            if (extra != Py_None)
                fid = object_frame(s, extra);
            Py_DECREF(extra);
        }
    }
    else
        PyErr_Clear();
    if (self_key && flameprof_map_put(&s->hook_cache, (uintptr_t)code, self_key, type_key, fid) < 0)
        PyErr_Clear();
    return fid;
}

static int32_t
marker_frame(Sampler *s, Py_ssize_t dropped)
{
    Entry *e = map_find(&s->markers, (uintptr_t)dropped, 0, 0);
    if (e != NULL)
        return (int32_t)e->value;
    PyObject *n = PyLong_FromSsize_t(dropped);
    long fid = n ? call_for_int(s->resolve_marker, n) : -3;
    Py_XDECREF(n);
    if (fid < 0) {
        PyErr_Clear();
        return -1;
    }
    if (flameprof_map_put(&s->markers, (uintptr_t)dropped, 0, 0, fid) < 0)
        PyErr_Clear();
    return (int32_t)fid;
}

static uint64_t
hash_ids(const int32_t *ids, Py_ssize_t n)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)ids[i]) * 1099511628211ULL;
    return map_mix(h);
}

#define UNKNOWN_STACK (-2)

/* The stack id of a root-first id sequence met before, or UNKNOWN_STACK; stacks are keyed by
 * (hash, probe) and checked against the arena. */
static int32_t
known_stack(Sampler *s, const int32_t *ids, Py_ssize_t n, uint64_t h)
{
    for (uintptr_t probe = 0;; probe++) {
        Entry *e = map_find(&s->stacks, (uintptr_t)h, probe, 0);
        if (e == NULL)
            return UNKNOWN_STACK;
        Py_ssize_t off = (Py_ssize_t)(e->value >> 32);
        Py_ssize_t len = s->arena[off];
        if (len == n && memcmp(s->arena + off + 1, ids, (size_t)n * sizeof(int32_t)) == 0)
            return (int32_t)(e->value & 0xffffffff);
    }
}

/* The stack id of a root-first id sequence, asking Python for a new one. */
static int32_t
stack_id(Sampler *s, const int32_t *ids, Py_ssize_t n)
{
    if (n == 0)
        return -1;
    uint64_t h = hash_ids(ids, n);
    int32_t known = known_stack(s, ids, n, h);
    if (known != UNKNOWN_STACK)
        return known;
    PyObject *tuple = PyTuple_New(n);
    if (tuple == NULL) {
        PyErr_Clear();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(ids[i]);
        if (v == NULL) {
            Py_DECREF(tuple);
            PyErr_Clear();
            return -1;
        }
        PyTuple_SET_ITEM(tuple, i, v);
    }
    long sid = call_for_int(s->resolve_stack, tuple);
    Py_DECREF(tuple);
    if (sid < 0)
        return -1;
    if (s->arena_len + n + 1 > INT32_MAX || GROW(s->arena, s->arena_cap, s->arena_len + n + 1) < 0) {
        PyErr_Clear();
        return (int32_t)sid;
    }
    Py_ssize_t off = s->arena_len;
    s->arena[off] = (int32_t)n;
    memcpy(s->arena + off + 1, ids, (size_t)n * sizeof(int32_t));
    s->arena_len += n + 1;
    uintptr_t probe = 0;
    while (map_find(&s->stacks, (uintptr_t)h, probe, 0) != NULL)
        probe++;
    if (flameprof_map_put(&s->stacks, (uintptr_t)h, probe, 0, ((int64_t)off << 32) | (uint32_t)sid) < 0)
        PyErr_Clear();
    return (int32_t)sid;
}

static ThreadRec *
find_thread(Sampler *s, unsigned long ident)
{
    Py_ssize_t n = s->nthreads;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = (s->thread_hint + k) % n;
        if (s->threads[i].ident == ident) {
            s->thread_hint = i + 1;
            return &s->threads[i];
        }
    }
    return NULL;
}

/* A thread seen for the first time, in the tick at ``now``. */
static ThreadRec *
new_thread(Sampler *s, unsigned long ident, double now)
{
    PyObject *key = PyLong_FromUnsignedLong(ident);
    if (key == NULL)
        return NULL;
    PyObject *r = PyObject_CallOneArg(s->resolve_thread, key);
    Py_DECREF(key);
    if (r == Py_None) {  /* not to be sampled yet */
        Py_DECREF(r);
        return NULL;
    }
    long index, native_id;
    if (r == NULL || !PyArg_ParseTuple(r, "ll", &index, &native_id)) {
        Py_XDECREF(r);
        return NULL;
    }
    Py_DECREF(r);
    if (GROW(s->threads, s->threads_cap, s->nthreads + 1) < 0)
        return NULL;
    ThreadRec *t = &s->threads[s->nthreads++];
    t->ident = ident;
    t->index = (int32_t)index;
    t->has_clock = native_id > 0;
    /* glibc's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): a dead thread's clock fails with EINVAL */
    t->clock = (clockid_t)(((~(long)native_id) << 3) | 6);
    /* as first_cpu_baseline in collect/engine/python_sampler.py: a thread whose whole CPU time
     * fits in the interval may have started within it, and all of it is its first row's */
    t->last_cpu = read_cpu(t);
    if (t->last_cpu != NO_CPU && t->last_cpu <= now - s->last_tick)
        t->last_cpu = 0.0;
    t->last_read = now;
    t->unread = 0;
    t->seen = 0;
    t->held_at = 0;
    t->last_gil = GIL_UNKNOWN;
    return t;
}

/* Phase 1 for one thread without making frame objects or calling Python: 1 when every frame's code
 * is known and every layer hook's result cached, which in the steady state they are; else 0 and
 * nothing kept (the thread is walked through its frame objects, and phase 2 asks Python); -1 out
 * of memory. */
static int
walk_in_place(Sampler *s, PyThreadState *ts)
{
    Py_ssize_t first = s->nframes;
    for (void *f = flameprof_frame_first(ts); f != NULL; f = flameprof_frame_next(f)) {
        PyCodeObject *code = flameprof_frame_code(f);
        Entry *e = map_find(&s->codes, (uintptr_t)code, 0, 0);
        int32_t hook = -1;
        if (e != NULL && (e->value >> 32) & FLAG_PER_FRAME)
            e = NULL;  /* its hook must see the frame object */
        else if (e != NULL && (e->value >> 32) & FLAG_HOOK) {
#if PY_VERSION_HEX >= 0x030B0000
            PyObject *self_obj = first_argument(NULL, f, code);
#else
            PyObject *self_obj = first_argument((PyObject *)f, NULL, code);
#endif
            Entry *h = self_obj != NULL ? cached_hook(s, code, self_obj) : NULL;
            if (h == NULL)
                e = NULL;
            else
                hook = (int32_t)h->value;
        }
        if (e == NULL) {
            s->nframes = first;
            return 0;
        }
        if (GROW(s->frames, s->frames_cap, s->nframes + 1) < 0)
            return -1;
        s->frames[s->nframes++] = (FrameRef){.code = code, .owner = flameprof_frame_object(f), .entry = e->value, .hook = hook};
        /* the stack begins above it (build_ids): the frames below, which run the target, are never
         * learned, and walking on to them made every frozen sample under ``flameprof run`` fail */
        if ((int32_t)(e->value & 0xffffffff) == BOUNDARY_FRAME)
            break;
    }
    return 1;
}

/* Phase 1: collect frames and scope entries of every thread but ``exclude``. */
static int
walk_threads(Sampler *s, unsigned long exclude, PyThreadState *holder)
{
    PyThreadState *self_ts = PyThreadState_Get();
    PyInterpreterState *interp = PyThreadState_GetInterpreter(self_ts);
    int have_scopes = s->scopes != Py_None && PyDict_GET_SIZE(s->scopes) > 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        unsigned long ident = ts->thread_id;
        if (ident == exclude || !flameprof_thread_made(ts))
            continue;
        if (GROW(s->walks, s->walks_cap, s->nwalks + 1) < 0)
            return -1;
        Walk *w = &s->walks[s->nwalks];
        w->ident = ident;
        w->first = s->nframes;
        w->scope_first = s->nscope;
        w->scope_count = 0;
        w->held = ts == holder;
        int in_place = walk_in_place(s, ts);
        if (in_place < 0)
            return -1;
        for (PyFrameObject *f = in_place ? NULL : PyThreadState_GetFrame(ts); f != NULL; f = PyFrame_GetBack(f)) {
            if (GROW(s->frames, s->frames_cap, s->nframes + 1) < 0) {
                Py_DECREF(f);
                return -1;
            }
            PyCodeObject *code = PyFrame_GetCode(f);
            Py_DECREF(code);  /* the frame keeps it alive */
            s->frames[s->nframes++] = (FrameRef){.frame = (PyObject *)f, .code = code, .owner = (PyObject *)f};
        }
        w->count = s->nframes - w->first;
        if (w->count == 0)  /* no Python frame */
            continue;
        s->nwalks++;
        if (!have_scopes)
            continue;
        PyObject *key, *list;
        Py_ssize_t pos = 0;
        while (PyDict_Next(s->scopes, &pos, &key, &list)) {
            if (!PyLong_Check(key) || PyLong_AsUnsignedLong(key) != ident || !PyList_Check(list)) {
                PyErr_Clear();
                continue;
            }
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
                PyObject *item = PyList_GET_ITEM(list, i);
                if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
                    continue;
                if (GROW(s->scope_items, s->scope_cap, (s->nscope + 1) * 2) < 0)
                    return -1;
                PyObject *entered = PyTuple_GET_ITEM(item, 0), *frame_obj = PyTuple_GET_ITEM(item, 1);
                Py_INCREF(entered);
                Py_INCREF(frame_obj);
                s->scope_items[s->nscope * 2] = entered;
                s->scope_items[s->nscope * 2 + 1] = frame_obj;
                s->nscope++;
                w->scope_count++;
            }
            break;
        }
    }
    return 0;
}

static int
push_id(Sampler *s, int32_t fid, PyObject *owner)
{
    if (GROW(s->ids, s->ids_cap, s->nids + 1) < 0 || GROW(s->owners, s->owners_cap, s->nids + 1) < 0)
        return -1;
    s->ids[s->nids] = fid;
    s->owners[s->nids] = owner;
    s->nids++;
    return 0;
}

/* Phase 2 for one thread: frame ids root first in s->ids, with scopes inserted and truncation
 * applied. Without ``python`` (a frozen sample: frames walked in place, no scopes) a truncation
 * marker not met before makes it return UNKNOWN_STACK. */
static int
build_ids(Sampler *s, Walk *w, int python)
{
    s->nids = 0;
    for (Py_ssize_t i = w->first; i < w->first + w->count; i++) {
        FrameRef *r = &s->frames[i];
        int64_t entry = r->frame != NULL ? code_entry(s, r->code) : r->entry;
        int32_t fid = (int32_t)(entry & 0xffffffff);
        if (fid == BOUNDARY_FRAME)
            break;
        if (fid < 0)
            continue;
        if ((entry >> 32) & FLAG_HOOK) {
            int per_frame = (entry >> 32) & FLAG_PER_FRAME;
            int32_t extra = r->frame != NULL ? hook_frame(s, r->frame, r->code, per_frame) : r->hook;
            if (extra >= 0 && push_id(s, extra, NULL) < 0)
                return -1;
        }
        if (push_id(s, fid, r->owner) < 0)
            return -1;
    }
    /* leaf first -> root first */
    for (Py_ssize_t i = 0, j = s->nids - 1; i < j; i++, j--) {
        int32_t t = s->ids[i];
        s->ids[i] = s->ids[j];
        s->ids[j] = t;
        PyObject *o = s->owners[i];
        s->owners[i] = s->owners[j];
        s->owners[j] = o;
    }
    if (w->scope_count) {
        /* insert each scope just leafward of the frame it was entered in, in scope order */
        Py_ssize_t n = s->nids;
        for (Py_ssize_t pos = n - 1; pos >= 0; pos--) {
            PyObject *owner = s->owners[pos];
            if (owner == NULL)
                continue;
            for (Py_ssize_t k = w->scope_first + w->scope_count - 1; k >= w->scope_first; k--) {
                if (s->scope_items[k * 2] != owner)
                    continue;
                int32_t fid = object_frame(s, s->scope_items[k * 2 + 1]);
                if (fid < 0 || push_id(s, 0, NULL) < 0)
                    continue;
                memmove(s->ids + pos + 2, s->ids + pos + 1, (size_t)(s->nids - pos - 2) * sizeof(int32_t));
                memmove(s->owners + pos + 2, s->owners + pos + 1, (size_t)(s->nids - pos - 2) * sizeof(PyObject *));
                s->ids[pos + 1] = fid;
                s->owners[pos + 1] = NULL;
            }
        }
    }
    if (s->nids > s->max_depth) {
        Py_ssize_t dropped = s->nids - s->max_depth + 1;
        Entry *known = python ? NULL : map_find(&s->markers, (uintptr_t)dropped, 0, 0);
        if (!python && known == NULL)
            return UNKNOWN_STACK;
        int32_t marker = python ? marker_frame(s, dropped) : (int32_t)known->value;
        s->nids = s->max_depth - 1;
        if (marker >= 0)
            s->ids[s->nids++] = marker;
    }
    return 0;
}

/* A row of the tick at ``tick``: the thread, the stack and the CPU time since its last row (filled
 * in by settle_cpu(), now or within CPU_READ_PERIOD). Its wall time is not stored: a thread alive
 * in this tick was sampled in the previous one (else it was forgotten and is new now), so the
 * wall time is always the time its tick stands for (tick_wall). */
static int
append_row(Sampler *s, ThreadRec *t, int32_t sid, double tick, double now, uint8_t gil)
{
    if (gil == GIL_HELD)
        t->held_at = s->tick_count;
    if (t->index < 0 || t->index > MAX_THREAD_INDEX) {
        s->dropped++;
        return 0;
    }
    Py_ssize_t n = s->nrows + 1;
    if (GROW(s->row_thread, s->rthread_cap, n) < 0 || GROW(s->row_stack, s->rstack_cap, n) < 0 ||
        GROW(s->row_cpu, s->rcpu_cap, n) < 0 || GROW(s->row_gil, s->rgil_cap, n) < 0)
        return -1;
    s->row_thread[s->nrows] = (uint16_t)t->index;
    s->row_stack[s->nrows] = sid;
    s->row_cpu[s->nrows] = 0.0f;
    s->row_gil[s->nrows] = gil;
    t->unread_row[t->unread] = s->nrows;
    t->unread_wall[t->unread++] = (float)(tick - s->last_tick);
    s->nrows = n;
    if (t->unread == MAX_UNREAD || now - t->last_read >= CPU_READ_PERIOD)
        settle_cpu(s, t, now);
    return 0;
}

/* A walked thread's GIL state at the tick, before gil_states() settles who waited. */
static uint8_t
gil_state(const GilAtTick *gil, const Walk *w)
{
    if (gil == NULL)
        return GIL_UNKNOWN;
    if (w->held)
        return GIL_HELD;
    return gil->holder != NULL || gil->waiters > 0 ? GIL_CANDIDATE : GIL_NOT_HELD;
}

/* How likely a candidate (a thread that did not hold the GIL while another did, or while some
 * thread waited for it) is to be one of the waiters: one that held the GIL at its previous tick
 * most (the clock asked it to let the GIL go then; unless nobody else wanted it, it waits to take
 * it back, and it can go on to I/O or C code only once it has), then one that waited then (a wait
 * lasts a few switch intervals), then the one that held it last (a thread blocked in I/O or idle
 * may not have held it for seconds). Held above waited: a thread blocked elsewhere, once taken for
 * a waiter (the count includes a woken waiter until it runs), would otherwise stay one at every
 * tick, ahead of the thread that had just let the GIL go (a thread blocked in join() was seen
 * waiting 3-4 % of its time, taken from the two threads that competed for the GIL). */
static int
waiter_rank(const ThreadRec *t)
{
    return t->last_gil == GIL_HELD ? 2 : t->last_gil == GIL_WAITING;
}

static int
likelier_waiter(const ThreadRec *a, const ThreadRec *b)
{
    int ka = waiter_rank(a), kb = waiter_rank(b);
    return ka != kb ? ka > kb : a->held_at > b->held_at;
}

/* Which of the tick's rows waited for the GIL. A thread that waits for it sleeps on its condition
 * until the holder lets it go, as a thread blocked in I/O or on a lock sleeps elsewhere: the
 * thread states of CPython 3.10-3.13 cannot tell them apart (3.15's say which threads asked for
 * the GIL), but its conditions count their waiters (``gil->waiters``, interp_internals.c). When the
 * candidates are no more than the waiters, each waited; else the waiters are taken to be the
 * likeliest candidates (likelier_waiter), and the others neither held nor waited. Without a count
 * of waiters (not glibc), every candidate waited while another thread held the GIL. Each thread's
 * state is kept for its next tick's. */
static void
gil_states(Sampler *s, const GilAtTick *gil)
{
    int candidates = 0;
    for (Py_ssize_t i = 0; i < s->nwalks; i++)
        if (s->walks[i].row >= 0 && s->row_gil[s->walks[i].row] == GIL_CANDIDATE)
            candidates++;
    int waiters = gil == NULL || gil->waiters < 0 || gil->waiters > candidates ? candidates : gil->waiters;
    for (int k = 0; k < waiters; k++) {
        Walk *best = NULL;
        for (Py_ssize_t i = 0; i < s->nwalks; i++) {
            Walk *w = &s->walks[i];
            if (w->row >= 0 && s->row_gil[w->row] == GIL_CANDIDATE &&
                (best == NULL || likelier_waiter(&s->threads[w->thread], &s->threads[best->thread])))
                best = w;
        }
        s->row_gil[best->row] = GIL_WAITING;
    }
    for (Py_ssize_t i = 0; i < s->nwalks; i++) {
        Walk *w = &s->walks[i];
        if (w->row < 0)
            continue;
        if (s->row_gil[w->row] == GIL_CANDIDATE)
            s->row_gil[w->row] = GIL_NOT_HELD;
        s->threads[w->thread].last_gil = s->row_gil[w->row];
    }
}

/* Append the row of the walked thread ``w`` (its ThreadRec at ``w->thread``), noting it in ``w->row``. */
static int
append_walk(Sampler *s, Walk *w, int32_t sid, double tick, double now, const GilAtTick *gil)
{
    Py_ssize_t before = s->nrows;
    int r = append_row(s, &s->threads[w->thread], sid, tick, now, gil_state(gil, w));
    w->row = s->nrows > before ? before : -1;
    return r;
}

/* The time a sample is recorded at: the tick's (when the clock asked for it), within the time
 * since the previous sample and now. */
static double
tick_time(Sampler *s, double tick, double now)
{
    if (tick <= 0.0 || tick > now)
        tick = now;
    return tick < s->last_tick ? s->last_tick : tick;
}

/* Close the tick whose rows start at ``first_row``: forget threads not seen in it (so a reused
 * ident starts afresh), and record it, or drop its rows when it ``failed`` (the time it stood for
 * is then in no sample). 0 or -1 (failed). */
static int
end_tick(Sampler *s, Py_ssize_t first_row, double tick, double now, int failed)
{
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < s->nthreads; i++) {
        ThreadRec *t = &s->threads[i];
        if (t->seen != s->tick_count) {
            if (t->unread)
                settle_cpu(s, t, now);
            continue;
        }
        if (kept != i)
            s->threads[kept] = *t;
        kept++;
    }
    s->nthreads = kept;
    if (!failed && GROW(s->tick_time, s->ttime_cap, s->nticks + 1) == 0 &&
        GROW(s->tick_wall, s->twall_cap, s->nticks + 1) == 0 &&
        GROW(s->tick_rows, s->trows_cap, s->nticks + 1) == 0) {
        s->tick_time[s->nticks] = tick;
        /* the time since the previous tick, and as much again at most of what the clock did not
         * watch (flameprof_sampler_unwatched) */
        double since = tick - s->last_tick, owed = s->unwatched < since ? s->unwatched : since;
        s->tick_wall[s->nticks] = since + owed;
        s->unwatched -= owed;
        s->tick_rows[s->nticks] = (uint32_t)(s->nrows - first_row);
        s->nticks++;
        s->done_rows = s->nrows;
    }
    else {  /* drop the tick's rows */
        s->nrows = first_row;
        for (Py_ssize_t i = 0; i < s->nthreads; i++)
            while (s->threads[i].unread > 0 && s->threads[i].unread_row[s->threads[i].unread - 1] >= first_row)
                s->threads[i].unread--;
        failed = 1;
    }
    s->last_tick = tick;
    return failed ? -1 : 0;
}

/* One sample of every thread but ``exclude``, with the GIL, stamped ``tick`` (0: now); -1 with an
 * exception set when out of memory. */
int
flameprof_take_sample(Sampler *s, unsigned long exclude, double tick, const GilAtTick *gil)
{
    if (s->sampling)  /* a callback of this sample let another thread in: skip, do not corrupt it */
        return 0;
    s->sampling = 1;
    if (s->stale) {
        s->stale = 0;
        flameprof_map_clear(&s->codes);
        flameprof_map_clear(&s->hook_cache);
        flameprof_map_clear(&s->object_frames);
        if (PyList_SetSlice(s->held, 0, PyList_GET_SIZE(s->held), NULL) < 0)
            PyErr_Clear();
    }
    double start = flameprof_monotonic();
    /* No garbage collection during a sample: the walk makes frame objects, and the callbacks run
     * Python code; a collection started by either would run the program's finalizers inside the
     * sample (in the clock thread, when it samples), which may switch threads and pop the frames
     * being walked, and on 3.13 kept the clock thread in a collection that never ended while the
     * program went on allocating. The count of allocations carries over: the program's next
     * allocation starts the collection in its own thread. */
    int gc_was_enabled = PyGC_Disable();
    int failed = walk_threads(s, exclude, gil != NULL ? gil->holder : NULL) < 0;
    double now = flameprof_monotonic();
    tick = tick_time(s, tick, now);
    s->tick_count++;
    Py_ssize_t first_row = s->nrows;
    for (Py_ssize_t i = 0; i < s->nwalks; i++)
        s->walks[i].row = -1;
    for (Py_ssize_t i = 0; i < s->nwalks && !failed; i++) {
        Walk *w = &s->walks[i];
        ThreadRec *t = find_thread(s, w->ident);
        if (t == NULL && (t = new_thread(s, w->ident, now)) == NULL) {
            PyErr_Clear();
            continue;
        }
        t->seen = s->tick_count;
        w->thread = t - s->threads;  /* an index: a later walk's new thread may move them */
        if (build_ids(s, w, 1) < 0 || append_walk(s, w, stack_id(s, s->ids, s->nids), tick, now, gil) < 0)
            failed = 1;
    }
    if (!failed)
        gil_states(s, gil);
    release_scratch(s);
    if (gc_was_enabled)
        PyGC_Enable();
    failed = end_tick(s, first_row, tick, now, failed) < 0;
    s->busy += flameprof_monotonic() - start;
    s->sampling = 0;
    if (failed) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Whether any thread has a user scope open (a read of the scopes dict, which the frozen
 * interpreter cannot change; a thread's list stays in it, empty, once its scopes are closed). */
static int
scope_open(Sampler *s)
{
    if (s->scopes == Py_None)
        return 0;
    PyObject *key, *list;
    Py_ssize_t pos = 0;
    while (PyDict_Next(s->scopes, &pos, &key, &list))
        if (!PyList_Check(list) || PyList_GET_SIZE(list) > 0)
            return 1;
    return 0;
}

/* One sample of every thread but ``exclude``, taken by the clock thread while the interpreter is
 * frozen: no thread holds the GIL and none can take it (interp_internals.c, flameprof_gil_freeze),
 * so no frame can change, and the clock calls nothing that needs a thread state (thread states
 * come and go with the GIL held, but for PyGILState_Ensure's, linked before they have a frame).
 * 1: taken; 0: something in it is new (a code object, stack, thread, layer hook result or
 * truncation marker), or user scopes are open, or the caches are stale: only a sample with the
 * GIL can resolve that, and nothing was recorded. */
int
flameprof_take_frozen_sample(Sampler *s, PyInterpreterState *interp, unsigned long exclude, double tick,
                             const GilAtTick *gil)
{
    if (s->sampling || s->stale || scope_open(s))
        return 0;
    s->sampling = 1;
    flameprof_no_thread_state = 1;
    double start = flameprof_monotonic();
    int known = 1;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL && known; ts = PyThreadState_Next(ts)) {
        if (ts->thread_id == exclude || !flameprof_thread_made(ts))
            continue;
        if (GROW(s->walks, s->walks_cap, s->nwalks + 1) < 0) {
            known = 0;
            break;
        }
        Walk *w = &s->walks[s->nwalks];
        *w = (Walk){.ident = ts->thread_id, .first = s->nframes, .scope_first = s->nscope, .row = -1,
                    .held = gil != NULL && ts == gil->holder};
        known = walk_in_place(s, ts) > 0;
        w->count = s->nframes - w->first;
        if (known && w->count > 0)
            s->nwalks++;
    }
    for (Py_ssize_t i = 0; i < s->nwalks && known; i++) {
        Walk *w = &s->walks[i];
        ThreadRec *t = find_thread(s, w->ident);
        known = t != NULL && build_ids(s, w, 0) == 0;
        if (known)  /* as stack_id(): -1 for a thread whose every frame is skipped */
            w->sid = s->nids == 0 ? -1 : known_stack(s, s->ids, s->nids, hash_ids(s->ids, s->nids));
        known = known && w->sid != UNKNOWN_STACK;
        w->thread = t != NULL ? t - s->threads : -1;
    }
    if (known) {
        double now = flameprof_monotonic();
        tick = tick_time(s, tick, now);
        s->tick_count++;
        Py_ssize_t first_row = s->nrows;
        int failed = 0;
        for (Py_ssize_t i = 0; i < s->nwalks && !failed; i++) {
            s->threads[s->walks[i].thread].seen = s->tick_count;
            failed = append_walk(s, &s->walks[i], s->walks[i].sid, tick, now, gil) < 0;
        }
        if (!failed)
            gil_states(s, gil);
        end_tick(s, first_row, tick, now, failed);
        s->busy += flameprof_monotonic() - start;
    }
    s->nframes = s->nwalks = 0;  /* frames walked in place hold no reference */
    flameprof_no_thread_state = 0;
    s->sampling = 0;
    return known;
}

static PyObject *
Sampler_sample(Sampler *s, PyObject *args)
{
    unsigned long exclude = 0;
    if (!PyArg_ParseTuple(args, "|k", &exclude))
        return NULL;
    PyThreadState *self_ts = PyThreadState_Get();  /* holds the GIL now */
    GilAtTick gil = {self_ts, flameprof_gil_waiters(PyThreadState_GetInterpreter(self_ts))};
    if (flameprof_take_sample(s, exclude, 0.0, &gil) < 0)
        return NULL;
    Py_RETURN_NONE;
}

void
flameprof_sampler_mark_start(Sampler *s)
{
    s->last_tick = flameprof_monotonic();
    s->unwatched = 0.0;
}

/* The clock's own work (its tick hooks) is spread over the ticks after it: each takes as much
 * again at most of its own interval, until it is all given. A sample weighs the program's time
 * since the previous tick, given to where the program is at this one, and the next tick took
 * all of it: a long run of the hooks (folding samples past the memory limit: tens of
 * milliseconds; a few, waiting for the GIL) went to one stack, wherever the program was when the
 * clock got back. The totals stay whole.
 * Not while another thread's sample is in progress (the main thread's, in a pending call, whose
 * callback let the GIL go and the clock run its hooks): that sample has taken its tick's time
 * against the previous tick, and moving the previous tick past it would give its rows negative
 * wall and CPU times (seen in forked DataLoader workers, whose first sample asks Python about
 * every thread while the clock's first run of the hooks writes their part). Those hooks' time
 * then goes to the next tick, as it did before it was spread. */
void
flameprof_sampler_unwatched(Sampler *s, double seconds)
{
    if (s->sampling)
        return;
    double now = flameprof_monotonic(), start = s->last_tick;
    s->last_tick = start + seconds < now ? start + seconds : now;
    s->unwatched += s->last_tick - start;
}

static PyObject *
Sampler_mark_start(Sampler *s, PyObject *unused)
{
    flameprof_sampler_mark_start(s);
    Py_RETURN_NONE;
}

/* Hooks or boundary codes changed: forget cached code and hook results before the next sample. */
static PyObject *
Sampler_invalidate(Sampler *s, PyObject *unused)
{
    s->stale = 1;
    Py_RETURN_NONE;
}

/* After fork: the child has one thread and no clock; forget the parent's threads (and give
 * back the switch interval the parent's clock had lowered for a wait the fork cut short). */
static PyObject *
Sampler_reset_threads(Sampler *s, PyObject *unused)
{
    flameprof_clock_after_fork();
    s->nthreads = 0;
    s->last_tick = flameprof_monotonic();
    s->unwatched = 0.0;
    /* the fork may have cut a sample of the parent's clock thread (a Python callback let the forking
     * thread in): drop its rows and its reentrancy guard, or the child never samples */
    s->nrows = s->done_rows;
    s->sampling = 0;
    Py_RETURN_NONE;
}

/* Settle every thread's pending CPU time, so each completed row holds its own. */
static void
settle_all(Sampler *s)
{
    double now = flameprof_monotonic();
    for (Py_ssize_t i = 0; i < s->nthreads; i++)
        if (s->threads[i].unread)
            settle_cpu(s, &s->threads[i], now);
}

/* Clamp the tick range [*first, *first + *limit) (a negative limit: to the end) to the completed
 * ticks; returns the index of its first row and sets *nrows to its number of rows. */
static Py_ssize_t
tick_range(Sampler *s, Py_ssize_t *first, Py_ssize_t *limit, Py_ssize_t *nrows)
{
    if (*first < 0 || *first > s->nticks)
        *first = *first < 0 ? 0 : s->nticks;
    if (*limit < 0 || *limit > s->nticks - *first)
        *limit = s->nticks - *first;
    Py_ssize_t row0 = 0, n = 0;
    for (Py_ssize_t k = 0; k < *first; k++)
        row0 += s->tick_rows[k];
    for (Py_ssize_t k = *first; k < *first + *limit; k++)
        n += s->tick_rows[k];
    *nrows = n;
    return row0;
}

/* Rows of ``limit`` completed ticks from ``first_tick`` on (all of them when limit < 0), as bytes:
 * (tick times f64, rows per tick u32, thread u16, stack i32, wall f64, cpu f32, gil u8), wall
 * times worked out here (see append_row). */
static PyObject *
Sampler_columns(Sampler *s, PyObject *args)
{
    Py_ssize_t first = 0, limit = -1;
    if (!PyArg_ParseTuple(args, "|nn", &first, &limit))
        return NULL;
    settle_all(s);
    Py_ssize_t nrows;
    Py_ssize_t row0 = tick_range(s, &first, &limit, &nrows);
    PyObject *thread = PyBytes_FromStringAndSize(NULL, nrows * (Py_ssize_t)sizeof(uint16_t));
    PyObject *wall = PyBytes_FromStringAndSize(NULL, nrows * (Py_ssize_t)sizeof(double));
    if (thread == NULL || wall == NULL) {
        Py_XDECREF(thread);
        Py_XDECREF(wall);
        return NULL;
    }
    uint16_t *out_thread = (uint16_t *)PyBytes_AS_STRING(thread);
    double *out_wall = (double *)PyBytes_AS_STRING(wall);
    Py_ssize_t r = row0;
    for (Py_ssize_t k = first; k < first + limit; k++) {
        double wall = s->tick_wall[k];
        for (uint32_t i = 0; i < s->tick_rows[k]; i++, r++) {
            out_thread[r - row0] = s->row_thread[r];
            out_wall[r - row0] = wall;
        }
    }
    Py_ssize_t nticks = limit;
    if (nticks == 0)  /* nothing recorded yet: empty bytes, not None for the NULL buffers */
        return Py_BuildValue("(y#y#Ny#Ny#y#)", "", 0, "", 0, thread, "", 0, wall, "", 0, "", 0);
    return Py_BuildValue("(y#y#Ny#Ny#y#)",
                         (const char *)(s->tick_time + first), nticks * (Py_ssize_t)sizeof(double),
                         (const char *)(s->tick_rows + first), nticks * (Py_ssize_t)sizeof(uint32_t),
                         thread,
                         (const char *)(s->row_stack + row0), nrows * (Py_ssize_t)sizeof(int32_t),
                         wall,
                         (const char *)(s->row_cpu + row0), nrows * (Py_ssize_t)sizeof(float),
                         (const char *)(s->row_gil + row0), nrows);
}

/* One column of a part file (collect/jobs/parts.py) for ``limit`` completed ticks from ``first_tick``
 * on, as the bytes of its .npy data: 0 time (int64 microseconds since ``t0``), 1 thread (int32),
 * 2 stack (int32), 3 wall, 4 cpu (int64 microseconds), 5 gil (uint8). Converted here: a part is
 * rewritten every second from all the rows the sampler holds. */
static PyObject *
Sampler_part_column(Sampler *s, PyObject *args)
{
    int which;
    Py_ssize_t first, limit;
    double t0;
    if (!PyArg_ParseTuple(args, "innd", &which, &first, &limit, &t0))
        return NULL;
    if (which < 0 || which > 5) {
        PyErr_SetString(PyExc_ValueError, "column must be 0 to 5");
        return NULL;
    }
    if (which == 4)
        settle_all(s);
    Py_ssize_t nrows;
    Py_ssize_t row0 = tick_range(s, &first, &limit, &nrows);
    if (which == 5)
        return PyBytes_FromStringAndSize(nrows ? (const char *)(s->row_gil + row0) : "", nrows);
    size_t width = (which == 1 || which == 2) ? sizeof(int32_t) : sizeof(int64_t);
    PyObject *out = PyBytes_FromStringAndSize(NULL, nrows * (Py_ssize_t)width);
    if (out == NULL)
        return NULL;
    int64_t *wide = (int64_t *)PyBytes_AS_STRING(out);
    int32_t *narrow = (int32_t *)PyBytes_AS_STRING(out);
    Py_ssize_t r = row0, o = 0;
    for (Py_ssize_t k = first; k < first + limit; k++) {
        double now = s->tick_time[k];
        int64_t time_us = (int64_t)nearbyint((now - t0) * 1e6);
        int64_t wall_us = (int64_t)nearbyint(s->tick_wall[k] * 1e6);
        for (uint32_t i = 0; i < s->tick_rows[k]; i++, r++, o++) {
            switch (which) {
            case 0: wide[o] = time_us; break;
            case 1: narrow[o] = s->row_thread[r]; break;
            case 2: narrow[o] = s->row_stack[r]; break;
            case 3: wide[o] = wall_us; break;
            default: wide[o] = (int64_t)nearbyint((double)s->row_cpu[r] * 1e6); break;
            }
        }
    }
    return out;
}

/* The number of rows of ``limit`` completed ticks from ``first_tick`` on. */
static PyObject *
Sampler_rows_in(Sampler *s, PyObject *args)
{
    Py_ssize_t first, limit, nrows;
    if (!PyArg_ParseTuple(args, "nn", &first, &limit))
        return NULL;
    tick_range(s, &first, &limit, &nrows);
    return PyLong_FromSsize_t(nrows);
}

/* Drop the first ``n`` completed ticks and their rows (they were folded into aggregates, or belong to
 * the parent of a forked child); returns the number of rows dropped. */
static PyObject *
Sampler_discard(Sampler *s, PyObject *args)
{
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n))
        return NULL;
    if (s->sampling) {
        PyErr_SetString(PyExc_RuntimeError, "discard during a sample");
        return NULL;
    }
    settle_all(s);  /* no thread keeps an index of a row that moves */
    Py_ssize_t limit = n, nrows, first = 0;
    tick_range(s, &first, &limit, &nrows);
    if (limit == 0)
        return PyLong_FromLong(0);
    Py_ssize_t keep_ticks = s->nticks - limit, keep_rows = s->nrows - nrows;
    memmove(s->tick_time, s->tick_time + limit, (size_t)keep_ticks * sizeof(double));
    memmove(s->tick_wall, s->tick_wall + limit, (size_t)keep_ticks * sizeof(double));
    memmove(s->tick_rows, s->tick_rows + limit, (size_t)keep_ticks * sizeof(uint32_t));
    memmove(s->row_thread, s->row_thread + nrows, (size_t)keep_rows * sizeof(uint16_t));
    memmove(s->row_stack, s->row_stack + nrows, (size_t)keep_rows * sizeof(int32_t));
    memmove(s->row_cpu, s->row_cpu + nrows, (size_t)keep_rows * sizeof(float));
    memmove(s->row_gil, s->row_gil + nrows, (size_t)keep_rows);
    s->nticks = keep_ticks;
    s->nrows = keep_rows;
    s->done_rows -= nrows;
    return PyLong_FromSsize_t(nrows);
}

static PyObject *
Sampler_get_rows(Sampler *s, void *unused) { return PyLong_FromSsize_t(s->done_rows); }
static PyObject *
Sampler_get_completed_ticks(Sampler *s, void *unused) { return PyLong_FromSsize_t(s->nticks); }
static PyObject *
Sampler_get_ticks(Sampler *s, void *unused) { return PyLong_FromUnsignedLongLong(s->tick_count); }
static PyObject *
Sampler_get_busy(Sampler *s, void *unused) { return PyFloat_FromDouble(s->busy); }
static PyObject *
Sampler_get_dropped(Sampler *s, void *unused) { return PyLong_FromUnsignedLongLong(s->dropped); }

static PyObject *
Sampler_get_memory(Sampler *s, void *unused)
{
    size_t bytes = (size_t)s->arena_cap * 4 + (size_t)(s->ttime_cap + s->twall_cap) * 8 + (size_t)s->trows_cap * 4 +
                   (size_t)s->rthread_cap * 2 + (size_t)(s->rstack_cap + s->rcpu_cap) * 4 + (size_t)s->rgil_cap +
                   (size_t)(s->codes.cap + s->stacks.cap + s->hook_cache.cap + s->object_frames.cap +
                            s->markers.cap) * sizeof(Entry);
    return PyLong_FromSize_t(bytes);
}

static int
Sampler_init(Sampler *s, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"resolve_code", "resolve_stack", "resolve_thread", "resolve_frame",
                             "resolve_marker", "hooks", "scopes", "max_depth", NULL};
    PyObject *rc, *rs, *rt, *rf, *rm, *hooks, *scopes;
    int max_depth;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOi", kwlist, &rc, &rs, &rt, &rf, &rm, &hooks, &scopes,
                                     &max_depth))
        return -1;
    if ((hooks != Py_None && !PyDict_Check(hooks)) || (scopes != Py_None && !PyDict_Check(scopes))) {
        PyErr_SetString(PyExc_TypeError, "hooks and scopes must be dicts or None");
        return -1;
    }
    if (max_depth < 2) {
        PyErr_SetString(PyExc_ValueError, "max_depth must be at least 2");
        return -1;
    }
    Py_INCREF(rc); Py_XSETREF(s->resolve_code, rc);
    Py_INCREF(rs); Py_XSETREF(s->resolve_stack, rs);
    Py_INCREF(rt); Py_XSETREF(s->resolve_thread, rt);
    Py_INCREF(rf); Py_XSETREF(s->resolve_frame, rf);
    Py_INCREF(rm); Py_XSETREF(s->resolve_marker, rm);
    Py_INCREF(hooks); Py_XSETREF(s->hooks, hooks);
    Py_INCREF(scopes); Py_XSETREF(s->scopes, scopes);
    if (s->held == NULL && (s->held = PyList_New(0)) == NULL)
        return -1;
    s->max_depth = max_depth;
    s->last_tick = flameprof_monotonic();
    return 0;
}

static void
Sampler_dealloc(Sampler *s)
{
    release_scratch(s);
    Py_XDECREF(s->resolve_code);
    Py_XDECREF(s->resolve_stack);
    Py_XDECREF(s->resolve_thread);
    Py_XDECREF(s->resolve_frame);
    Py_XDECREF(s->resolve_marker);
    Py_XDECREF(s->hooks);
    Py_XDECREF(s->scopes);
    Py_XDECREF(s->held);
    flameprof_map_clear(&s->codes);
    flameprof_map_clear(&s->hook_cache);
    flameprof_map_clear(&s->object_frames);
    flameprof_map_clear(&s->markers);
    flameprof_map_clear(&s->stacks);
    void *bufs[] = {s->arena, s->threads, s->frames, s->walks, s->scope_items, s->ids, s->owners,
                    s->tick_time, s->tick_wall, s->tick_rows, s->row_thread, s->row_stack, s->row_cpu,
                    s->row_gil};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef Sampler_methods[] = {
    {"sample", (PyCFunction)Sampler_sample, METH_VARARGS,
     "sample(exclude=0): one sample of every thread but the one whose ident is exclude"},
    {"mark_start", (PyCFunction)Sampler_mark_start, METH_NOARGS, "the previous-tick time is now"},
    {"invalidate", (PyCFunction)Sampler_invalidate, METH_NOARGS, "forget cached code and hook results before the next sample"},
    {"reset_threads", (PyCFunction)Sampler_reset_threads, METH_NOARGS, "forget all threads (after fork)"},
    {"columns", (PyCFunction)Sampler_columns, METH_VARARGS,
     "columns(first_tick=0, limit=-1): the rows of limit completed ticks from first_tick on, as bytes columns"},
    {"part_column", (PyCFunction)Sampler_part_column, METH_VARARGS,
     "part_column(which, first_tick, limit, t0): one column of a part file, as .npy data"},
    {"rows_in", (PyCFunction)Sampler_rows_in, METH_VARARGS,
     "rows_in(first_tick, limit): the rows of limit completed ticks from first_tick on"},
    {"discard", (PyCFunction)Sampler_discard, METH_VARARGS,
     "discard(ticks): drop the first completed ticks and their rows; the rows dropped"},
    {"start_clock", (PyCFunction)flameprof_start_clock, METH_VARARGS,
     "start_clock(interval, on_slow, slow_interval): sample every interval from a C thread"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Sampler_getset[] = {
    {"rows", (getter)Sampler_get_rows, NULL, "rows recorded", NULL},
    {"ticks", (getter)Sampler_get_ticks, NULL, "samples taken", NULL},
    {"completed_ticks", (getter)Sampler_get_completed_ticks, NULL, "completed ticks held", NULL},
    {"busy", (getter)Sampler_get_busy, NULL, "seconds spent sampling", NULL},
    {"dropped", (getter)Sampler_get_dropped, NULL, "rows lost to a thread index beyond 65535", NULL},
    {"memory", (getter)Sampler_get_memory, NULL, "bytes of C buffers and tables", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SamplerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flameprof._native.Sampler",
    .tp_basicsize = sizeof(Sampler),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Per-tick stack sampling of all threads into compact C buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sampler_init,
    .tp_dealloc = (destructor)Sampler_dealloc,
    .tp_methods = Sampler_methods,
    .tp_getset = Sampler_getset,
};

static PyMethodDef module_methods[] = {
    {"stop_clock", flameprof_stop_clock, METH_NOARGS, "stop the clock thread and wait for it; True if one ran"},
    {"clock_running", flameprof_clock_running, METH_NOARGS, "whether the clock thread is running"},
    {"clock_stats", flameprof_clock_stats, METH_NOARGS, "how the last clock's ticks were served"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "flameprof._native", "flameprof's C sampling fast path.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    if (PyType_Ready(&SamplerType) < 0)
        return NULL;
    static int initialized = 0;
    if (!initialized) {
        initialized = 1;
        flameprof_clock_init();
    }
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SamplerType);
    if (PyModule_AddObject(m, "Sampler", (PyObject *)&SamplerType) < 0) {
        Py_DECREF(&SamplerType);
        Py_DECREF(m);
        return NULL;
    }
    if (flameprof_add_step_recorder(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
