/* flameprof._native.StepRecorder: the optimizer post hook that times training steps, in C.
 *
 * torch calls its global optimizer post hooks once per ``optimizer.step()``, in the program's
 * hot loop. The Python hook (torch_hooks.TorchHooks._on_optimizer_step) cost a small PyTorch
 * loop about 1.5 % of its time; this one records (time, thread) in a C buffer and costs about
 * what calling an empty lambda does. Python drains the buffer into the profile's step marks.
 * Only the leading optimizer's steps count, by scopes.LeadingOptimizer's rule: the first that
 * steps leads until it is gone or another steps twice in a row, which then leads from the first
 * of those two steps. A step nested in another step wrapper (a subclass's ``step`` calling
 * ``super().step()``) is not one: see optimizer_steps.is_nested_step, its Python twin.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h> /* PyFrame_GetBack: not in Python.h before 3.11 */
#include <pthread.h>
#include <stdint.h>

#include "interp_internals.h"
#include "steps.h"

typedef struct {
    double time;           /* CLOCK_MONOTONIC seconds: time.perf_counter()'s clock on Linux */
    unsigned long ident;   /* threading.get_ident() */
    unsigned long native;  /* threading.get_native_id() */
} StepRow;

typedef struct {
    PyObject_HEAD
    PyObject *leader;      /* weak reference to the optimizer whose steps count, or NULL */
    PyObject *candidate;   /* weak reference to the last other optimizer that stepped, or NULL */
    StepRow pending;       /* the candidate's step */
    StepRow *rows;
    Py_ssize_t n, cap;
    uint64_t forks;        /* fork_count when the rows and the candidate were recorded */
} StepRecorder;

/* Forks so far: a child drops the rows its parent recorded (the parent reports them). */
static uint64_t fork_count;
static __thread unsigned long cached_native;
static __thread uint64_t cached_native_forks = UINT64_MAX;

static void
count_fork(void)
{
    fork_count++;
}

static void
forget_parents_rows(StepRecorder *r)
{
    if (r->forks != fork_count) {
        r->n = 0;
        Py_CLEAR(r->candidate);
        r->forks = fork_count;
    }
}

/* The object ``ref`` refers to, compared by identity only (the caller holds what it compares
 * with), or NULL when ``ref`` is NULL or dead. */
static PyObject *
referent(PyObject *ref)
{
    PyObject *obj = NULL;
    if (ref == NULL)
        return NULL;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyWeakref_GetRef(ref, &obj) < 0)
        PyErr_Clear();
    Py_XDECREF(obj);
#else
    obj = PyWeakref_GetObject(ref);
    if (obj == Py_None)
        obj = NULL;
#endif
    return obj;
}

/* Appends ``row``; 0 when out of memory (the step goes unmarked). */
static int
add_row(StepRecorder *r, const StepRow *row)
{
    if (r->n == r->cap) {
        Py_ssize_t cap = r->cap ? r->cap * 2 : 1024;
        StepRow *rows = PyMem_RawRealloc(r->rows, (size_t)cap * sizeof(StepRow));
        if (rows == NULL)
            return 0;
        r->rows = rows;
        r->cap = cap;
    }
    r->rows[r->n++] = *row;
    return 1;
}

#define NESTED_DEPTH 16  /* optimizer_steps.NESTED_DEPTH */

/* Whether the step wrapper that calls this hook (the running frame) was called from another step
 * wrapper: the same code at most NESTED_DEPTH frames further out. */
static int
nested_step(void)
{
    PyFrameObject *wrapper = PyEval_GetFrame();  /* borrowed */
    if (wrapper == NULL)
        return 0;
    PyCodeObject *code = PyFrame_GetCode(wrapper);
    PyFrameObject *frame = PyFrame_GetBack(wrapper);
    int nested = 0;
    for (int i = 0; frame != NULL && i < NESTED_DEPTH && !nested; i++) {
        PyCodeObject *outer = PyFrame_GetCode(frame);
        nested = outer == code;
        Py_DECREF(outer);
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    Py_XDECREF(frame);
    Py_DECREF(code);
    return nested;
}

/* hook(optimizer, args, kwargs), as torch calls it; never raises. */
static PyObject *
StepRecorder_call(StepRecorder *r, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) < 1 || nested_step())
        Py_RETURN_NONE;
    PyObject *optimizer = PyTuple_GET_ITEM(args, 0);
    forget_parents_rows(r);
    if (cached_native_forks != fork_count) {  /* a thread's native id changes in a forked child */
        cached_native = PyThread_get_thread_native_id();
        cached_native_forks = fork_count;
    }
    StepRow row = {flameprof_monotonic(), PyThread_get_thread_ident(), cached_native};
    PyObject *leader = referent(r->leader);
    if (leader == optimizer) {
        Py_CLEAR(r->candidate);
        add_row(r, &row);
        Py_RETURN_NONE;
    }
    PyObject *ref = PyWeakref_NewRef(optimizer, NULL);
    if (ref == NULL) {  /* an optimizer that refuses weak references: no steps from it */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int again = referent(r->candidate) == optimizer;
    Py_CLEAR(r->candidate);
    if (leader == NULL || again) {  /* the leader is gone, or this optimizer stepped twice in a row */
        Py_XSETREF(r->leader, ref);
        if (!again || add_row(r, &r->pending))
            add_row(r, &row);
    }
    else {
        r->candidate = ref;
        r->pending = row;
    }
    Py_RETURN_NONE;
}

/* take() -> [(time, ident, native_id), ...]: the steps recorded since the last take, oldest first. */
static PyObject *
StepRecorder_take(StepRecorder *r, PyObject *unused)
{
    forget_parents_rows(r);
    PyObject *out = PyList_New(r->n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < r->n; i++) {
        PyObject *item = Py_BuildValue("(dkk)", r->rows[i].time, r->rows[i].ident, r->rows[i].native);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    r->n = 0;
    return out;
}

static int
StepRecorder_init(StepRecorder *r, PyObject *args, PyObject *kwargs)
{
    if (!PyArg_ParseTuple(args, ":StepRecorder"))
        return -1;
    r->forks = fork_count;
    return 0;
}

static void
StepRecorder_dealloc(StepRecorder *r)
{
    Py_XDECREF(r->leader);
    Py_XDECREF(r->candidate);
    PyMem_RawFree(r->rows);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMethodDef StepRecorder_methods[] = {
    {"take", (PyCFunction)StepRecorder_take, METH_NOARGS,
     "take() -> [(time, ident, native_id)]: the steps recorded since the last take"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StepRecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flameprof._native.StepRecorder",
    .tp_basicsize = sizeof(StepRecorder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An optimizer post hook that records when the leading optimizer's step() returns.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)StepRecorder_init,
    .tp_dealloc = (destructor)StepRecorder_dealloc,
    .tp_call = (ternaryfunc)StepRecorder_call,
    .tp_methods = StepRecorder_methods,
};

/* Called from PyInit__native (sampler.c). */
int
flameprof_add_step_recorder(PyObject *module)
{
    static int initialized = 0;
    if (PyType_Ready(&StepRecorderType) < 0)
        return -1;
    if (!initialized) {
        initialized = 1;
        pthread_atfork(NULL, NULL, count_fork);
    }
    Py_INCREF(&StepRecorderType);
    if (PyModule_AddObject(module, "StepRecorder", (PyObject *)&StepRecorderType) < 0) {
        Py_DECREF(&StepRecorderType);
        return -1;
    }
    return 0;
}
