/* flameprof._trees: per-node values of a parent-pointer tree in one pass over its nodes.
 *
 * Every tree here (a profile's stack table, a call tree) lists parents before their children, so a
 * node's depth follows from its parent's in one forward pass, and subtree sums gather in one
 * backward pass. numpy has no sequential scan: analyze/ancestry.py does both a depth level at a
 * time (pointer jumping, then a scatter-add per level), which on a million-line folded file's 4.9
 * million stacks took half a second of its three. ancestry.py falls back to numpy where this is
 * not built. Arrays come in through the buffer protocol (no numpy headers needed).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The int32 parent column of ``arg``: NULL with ValueError when a parent does not precede its
 * child (or a buffer of another size). */
static const int32_t *
parents(Py_buffer *view, Py_ssize_t *n)
{
    if (view->len % (Py_ssize_t)sizeof(int32_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "parent must be int32");
        return NULL;
    }
    const int32_t *parent = view->buf;
    *n = view->len / (Py_ssize_t)sizeof(int32_t);
    for (Py_ssize_t i = 0; i < *n; i++)
        if (parent[i] >= i || parent[i] < -1) {
            PyErr_Format(PyExc_ValueError, "node %zd's parent %d does not precede it", i, (int)parent[i]);
            return NULL;
        }
    return parent;
}

static PyObject *
depths(PyObject *module, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:depths", &view))
        return NULL;
    Py_ssize_t n;
    const int32_t *parent = parents(&view, &n);
    PyObject *out = parent != NULL ? PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t)) : NULL;
    if (out != NULL) {
        int32_t *depth = (int32_t *)PyByteArray_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++)
            depth[i] = parent[i] < 0 ? 0 : depth[parent[i]] + 1;
    }
    PyBuffer_Release(&view);
    return out;
}

static PyObject *
add_subtrees(PyObject *module, PyObject *args)
{
    Py_buffer pview, vview;
    if (!PyArg_ParseTuple(args, "y*w*:add_subtrees", &pview, &vview))
        return NULL;
    Py_ssize_t n;
    const int32_t *parent = parents(&pview, &n);
    if (parent != NULL && vview.len != n * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "values must be float64, one per node");
        parent = NULL;
    }
    if (parent != NULL) {
        double *value = vview.buf;
        for (Py_ssize_t i = n - 1; i > 0; i--)
            if (parent[i] >= 0)
                value[parent[i]] += value[i];
    }
    PyBuffer_Release(&pview);
    PyBuffer_Release(&vview);
    if (parent == NULL)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"depths", depths, METH_VARARGS, "depths(parent) -> bytearray of int32: each node's depth (0 for roots)."},
    {"add_subtrees", add_subtrees, METH_VARARGS,
     "add_subtrees(parent, values): add each node's float64 value into its ancestors', in place."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef trees_module = {PyModuleDef_HEAD_INIT, "flameprof._trees", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__trees(void)
{
    return PyModule_Create(&trees_module);
}
