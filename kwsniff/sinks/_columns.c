/* Row tuples to Arrow column buffers, for the Parquet writer (kwsniff/sinks/parquet.py).
 *
 * A batch of rows arrives as a list of tuples in schema order; Arrow's own conversion of them
 * (`pa.array(rows, type=struct)`) inspects every value's type against the struct's child type and
 * builds each column through generic builders: about 2.4 us per `partitions` row of 64 columns.
 * columns() reads each tuple once and appends each value straight to its column's buffers in Arrow's
 * layout (validity bitmap; little-endian values; bit-packed booleans; int32 offsets + UTF-8 bytes),
 * which the sink hands to `pa.Array.from_buffers`: the same arrays, so the same Parquet bytes.
 *
 * columns() decides; it never half-answers: a value of a type it does not take exactly (only int,
 * float, bool, str, bytes and None), an int out of its column's range, a float column given an int
 * that a double cannot hold exactly, a str that is not valid UTF-8, a row that is not a tuple of the
 * schema's width, or more than 2 GB of text in one column -- returns None, and the sink converts that
 * batch with Arrow as before (which raises where Arrow would have raised). KWSNIFF_PURE_PYTHON=1
 * skips this module altogether.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Column kinds, one character each in the kinds string (kwsniff/sinks/parquet.py's _KINDS). */
#define K_INT64 'q'  /* int64 and timestamp[us] (int microseconds) */
#define K_INT32 'i'
#define K_INT16 'h'
#define K_DOUBLE 'd'
#define K_BOOL '?'
#define K_STRING 's' /* utf8, from str */
#define K_BINARY 'y' /* binary, from bytes */

typedef struct {
    char kind;
    unsigned char *valid; /* bitmap, all ones until a null */
    Py_ssize_t nulls;
    PyObject *fixed;     /* fixed width values or the bool bitmap: the returned bytes, filled in place */
    unsigned char *data; /* into `fixed`, or the text bytes (PyMem, copied out at the end) */
    Py_ssize_t data_len, data_cap;
    int32_t *offsets; /* strings and binary: rows + 1 */
    /* The last value put (not None) and what it was written as: a row's values that the row before
     * had too (its exchange's capture, connection, client and times; a topic) are the same objects,
     * alive in the rows for the whole call, and are copied, not converted again. */
    PyObject *last;
    unsigned char last_fixed[8];
    const char *last_text;
    Py_ssize_t last_len;
} Column;

static void free_columns(Column *cols, Py_ssize_t n) {
    for (Py_ssize_t j = 0; j < n; j++) {
        PyMem_Free(cols[j].valid);
        if (cols[j].fixed != NULL)
            Py_DECREF(cols[j].fixed);
        else
            PyMem_Free(cols[j].data);
        PyMem_Free(cols[j].offsets);
    }
    PyMem_Free(cols);
}

static int width(char kind) {
    switch (kind) {
    case K_INT64:
    case K_DOUBLE:
        return 8;
    case K_INT32:
        return 4;
    case K_INT16:
        return 2;
    default:
        return 0;
    }
}

/* Append `len` bytes to a text column; 0 when it would pass Arrow's int32 offsets or memory fails. */
static int append_bytes(Column *c, const char *bytes, Py_ssize_t len) {
    if (len > INT32_MAX - c->data_len)
        return 0;
    if (c->data_len + len > c->data_cap) {
        Py_ssize_t cap = c->data_cap * 2;
        if (cap < c->data_len + len)
            cap = c->data_len + len;
        unsigned char *grown = PyMem_Realloc(c->data, cap);
        if (grown == NULL)
            return 0;
        c->data = grown;
        c->data_cap = cap;
    }
    memcpy(c->data + c->data_len, bytes, len);
    c->data_len += len;
    return 1;
}

/* One value into column `c` at row `i`: 1 done, 0 not a value this column takes exactly. */
static int put(Column *c, Py_ssize_t i, PyObject *v) {
    if (v == Py_None) {
        c->valid[i >> 3] &= (unsigned char)~(1u << (i & 7));
        c->nulls++;
        if (c->offsets != NULL)
            c->offsets[i + 1] = (int32_t)c->data_len;
        return 1;
    }
    switch (c->kind) {
    case K_INT64:
    case K_INT32:
    case K_INT16: {
        if (!PyLong_CheckExact(v))
            return 0;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        if (c->kind == K_INT64) {
            int64_t w = (int64_t)x;
            memcpy(c->last_fixed, &w, 8);
        } else if (c->kind == K_INT32) {
            if (x < INT32_MIN || x > INT32_MAX)
                return 0;
            int32_t w = (int32_t)x;
            memcpy(c->last_fixed, &w, 4);
        } else {
            if (x < INT16_MIN || x > INT16_MAX)
                return 0;
            int16_t w = (int16_t)x;
            memcpy(c->last_fixed, &w, 2);
        }
        memcpy(c->data + i * width(c->kind), c->last_fixed, width(c->kind));
        c->last = v;
        return 1;
    }
    case K_DOUBLE: {
        double d;
        if (PyFloat_CheckExact(v)) {
            d = PyFloat_AS_DOUBLE(v);
        } else if (PyLong_CheckExact(v)) {
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow != 0 || x > (1LL << 53) || x < -(1LL << 53)) {
                PyErr_Clear();
                return 0;
            }
            d = (double)x;
        } else {
            return 0;
        }
        memcpy(c->last_fixed, &d, 8);
        memcpy(c->data + i * 8, &d, 8);
        c->last = v;
        return 1;
    }
    case K_BOOL:
        if (v == Py_True)
            c->data[i >> 3] |= (unsigned char)(1u << (i & 7));
        else if (v != Py_False)
            return 0;
        return 1;
    case K_STRING: {
        if (!PyUnicode_CheckExact(v))
            return 0;
        Py_ssize_t len;
        const char *text = PyUnicode_AsUTF8AndSize(v, &len);
        if (text == NULL) {
            PyErr_Clear();
            return 0;
        }
        if (!append_bytes(c, text, len))
            return 0;
        c->offsets[i + 1] = (int32_t)c->data_len;
        c->last = v;
        c->last_text = text;
        c->last_len = len;
        return 1;
    }
    case K_BINARY:
        if (!PyBytes_CheckExact(v))
            return 0;
        if (!append_bytes(c, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)))
            return 0;
        c->offsets[i + 1] = (int32_t)c->data_len;
        c->last = v;
        c->last_text = PyBytes_AS_STRING(v);
        c->last_len = PyBytes_GET_SIZE(v);
        return 1;
    default:
        return 0;
    }
}

/* The value put last in column `c` again, at row `i` (v == c->last): 1, or 0 as put() answers. */
static int put_again(Column *c, Py_ssize_t i) {
    switch (c->kind) {
    case K_INT64:
    case K_DOUBLE:
        memcpy(c->data + i * 8, c->last_fixed, 8);
        return 1;
    case K_INT32:
        memcpy(c->data + i * 4, c->last_fixed, 4);
        return 1;
    case K_INT16:
        memcpy(c->data + i * 2, c->last_fixed, 2);
        return 1;
    default: /* text */
        if (!append_bytes(c, c->last_text, c->last_len))
            return 0;
        c->offsets[i + 1] = (int32_t)c->data_len;
        return 1;
    }
}

static PyObject *bytes_or_none(const void *data, Py_ssize_t len, int none) {
    if (none)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)data, len);
}

/* columns(rows, kinds) -> [(null count, validity bytes or None, data bytes, offsets bytes or None)]
 * per column, or None: the caller converts the rows with Arrow. */
static PyObject *columns(PyObject *self, PyObject *args) {
    PyObject *rows;
    const char *kinds;
    Py_ssize_t ncols;
    if (!PyArg_ParseTuple(args, "O!s#", &PyList_Type, &rows, &kinds, &ncols))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    Py_ssize_t bitmap = (n + 7) / 8;
    Column *cols = PyMem_Calloc(ncols ? ncols : 1, sizeof(Column));
    if (cols == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t j = 0; j < ncols; j++) {
        Column *c = &cols[j];
        c->kind = kinds[j];
        c->valid = PyMem_Malloc(bitmap ? bitmap : 1);
        if (c->valid == NULL)
            goto nomem;
        memset(c->valid, 0xff, bitmap);
        int w = width(c->kind);
        if (w || c->kind == K_BOOL) {
            /* Zeroed: a null's value slot, and a false's bit, stay 0. */
            c->data_cap = w ? n * w : bitmap;
            c->fixed = PyBytes_FromStringAndSize(NULL, c->data_cap);
            if (c->fixed == NULL)
                goto fail;
            c->data = (unsigned char *)PyBytes_AS_STRING(c->fixed);
            memset(c->data, 0, c->data_cap);
        } else if (c->kind == K_STRING || c->kind == K_BINARY) {
            c->data_cap = 8 * n + 64;
            c->data = PyMem_Malloc(c->data_cap);
            c->offsets = PyMem_Malloc((n + 1) * sizeof(int32_t));
            if (c->data == NULL || c->offsets == NULL)
                goto nomem;
            c->offsets[0] = 0;
        } else {
            free_columns(cols, ncols);
            Py_RETURN_NONE;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != ncols)
            goto refuse;
        for (Py_ssize_t j = 0; j < ncols; j++) {
            PyObject *v = PyTuple_GET_ITEM(row, j);
            if (!(v == cols[j].last ? put_again(&cols[j], i) : put(&cols[j], i, v)))
                goto refuse;
        }
    }
    PyObject *out = PyList_New(ncols);
    if (out == NULL)
        goto fail;
    for (Py_ssize_t j = 0; j < ncols; j++) {
        Column *c = &cols[j];
        PyObject *data = c->fixed != NULL ? Py_NewRef(c->fixed) : bytes_or_none(c->data, c->data_len, 0);
        PyObject *item = Py_BuildValue(
            "(nNNN)", c->nulls, bytes_or_none(c->valid, bitmap, c->nulls == 0), data,
            bytes_or_none(c->offsets, (n + 1) * (Py_ssize_t)sizeof(int32_t), c->offsets == NULL));
        if (item == NULL) {
            Py_DECREF(out);
            goto fail;
        }
        PyList_SET_ITEM(out, j, item);
    }
    free_columns(cols, ncols);
    return out;
refuse:
    free_columns(cols, ncols);
    Py_RETURN_NONE;
nomem:
    PyErr_NoMemory();
fail:
    free_columns(cols, ncols);
    return NULL;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS,
     "columns(rows, kinds) -> [(null count, validity or None, data, offsets or None)] per column, or None: "
     "convert the rows with Arrow"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns", NULL, -1, methods};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
