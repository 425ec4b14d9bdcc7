/* The KV manager's hash -> block index, compiled: workbench.sim._kvindex.
 *
 * workbench/sim/kvindex.py is the interface and holds the same functions in Python (the
 * reference, used when this extension is not built); docs/embedded-engine.md, "KV manager
 * representation", says why the index is compiled.
 *
 * The table is one int64 buffer of (key, block) pairs, a power of two of them (a slot is
 * empty while its block is -1; key and block share a cache line), probed linearly from a Fibonacci hash of the key (the top
 * bits of key * 2^64/phi, `shift` = 64 - log2(length)). An entry is authoritative only
 * while its block still holds the key: own[block] == key, `own` being the manager's
 * per-block hash array. Block ids and hashes come in as Python lists (or any sequence) of
 * ints, and a lookup stops at its first miss, so a long prompt whose hit is short is not
 * converted as a whole.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MULT 0x9E3779B97F4A7C15ULL
#define GROUP 16 /* items whose memory is prefetched together */

typedef struct {
    Py_buffer table, own;
    int64_t *s, *o; /* slot i: key s[2i], block s[2i + 1] */
    int64_t mask, nblocks;
    int shift;
} Table;

#define KEY(t, i) ((t)->s[2 * (i)])
#define VAL(t, i) ((t)->s[2 * (i) + 1])

static void table_release(Table *t) {
    PyBuffer_Release(&t->table);
    PyBuffer_Release(&t->own);
}

/* Fill in the pointers of buffers PyArg_ParseTuple got ("w*w*"), checking their sizes. */
static int table_open(Table *t, int shift) {
    Py_ssize_t n = t->table.len / 16;
    if (t->table.len % 16 || t->own.len % 8 || n < 2 || (n & (n - 1)) || shift < 1 ||
        shift > 63 || ((int64_t)1 << (64 - shift)) != n) {
        PyErr_SetString(PyExc_ValueError,
                        "kvindex: the table must be int64 (key, block) pairs, 2**(64 - shift) "
                        "of them");
        table_release(t);
        return -1;
    }
    t->s = (int64_t *)t->table.buf;
    t->o = (int64_t *)t->own.buf;
    t->mask = n - 1;
    t->nblocks = t->own.len / 8;
    t->shift = shift;
    return 0;
}

static inline int64_t home(const Table *t, int64_t h) {
    return (int64_t)(((uint64_t)h * MULT) >> t->shift);
}

/* The slot holding h, or the empty slot where it would go (the table is never full). */
static inline int64_t find(const Table *t, int64_t h) {
    int64_t i = home(t, h);
    while (VAL(t, i) >= 0 && KEY(t, i) != h)
        i = (i + 1) & t->mask;
    return i;
}

/* The block holding h, or -1 (an entry whose block no longer holds h counts as none). */
static inline int64_t lookup(const Table *t, int64_t h) {
    int64_t b = VAL(t, find(t, h));
    if (b < 0 || b >= t->nblocks || t->o[b] != h)
        return -1;
    return b;
}

/* Item i of a sequence as int64; -1 with an error set on failure (callers check). */
static inline int item(PyObject *seq, Py_ssize_t i, int64_t *out) {
    PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
    long long v = PyLong_AsLongLong(x);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

PyDoc_STRVAR(get_doc, "get(table, own, shift, h) -> the block holding h, or -1");

static PyObject *kv_get(PyObject *self, PyObject *args) {
    Table t;
    int shift;
    long long h;
    if (!PyArg_ParseTuple(args, "w*w*iL", &t.table, &t.own, &shift, &h))
        return NULL;
    if (table_open(&t, shift))
        return NULL;
    int64_t b = lookup(&t, (int64_t)h);
    table_release(&t);
    return PyLong_FromLongLong(b);
}

PyDoc_STRVAR(prefix_doc,
             "prefix(table, own, shift, hashes, start, end) -> the blocks holding\n"
             "hashes[start], hashes[start + 1], ... up to the first miss (before end), a list");

static PyObject *kv_prefix(PyObject *self, PyObject *args) {
    Table t;
    int shift;
    PyObject *hashes, *seq, *out = NULL;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "w*w*iOnn", &t.table, &t.own, &shift, &hashes,
                          &start, &end))
        return NULL;
    if (table_open(&t, shift))
        return NULL;
    seq = PySequence_Fast(hashes, "kvindex.prefix: hashes must be a sequence");
    if (!seq)
        goto done;
    if (end > PySequence_Fast_GET_SIZE(seq))
        end = PySequence_Fast_GET_SIZE(seq);
    if (start < 0)
        start = 0;
    out = PyList_New(0);
    if (!out)
        goto done;
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t h, b;
        if (item(seq, i, &h))
            goto fail;
        b = lookup(&t, h);
        if (b < 0)
            break;
        PyObject *x = PyLong_FromLongLong(b);
        if (!x || PyList_Append(out, x)) {
            Py_XDECREF(x);
            goto fail;
        }
        Py_DECREF(x);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(seq);
    table_release(&t);
    return out;
}

PyDoc_STRVAR(commit_doc,
             "commit(table, own, shift, blocks, hashes, no_hash) -> (cached, added)\n"
             "Make blocks[i] hold hashes[i], in order: a block already holding a hash keeps\n"
             "it, and one whose hash a block already holds stays private. Returns how many\n"
             "blocks now hold their hash and how many table entries were added.");

static PyObject *kv_commit(PyObject *self, PyObject *args) {
    Table t;
    int shift;
    long long no_hash;
    PyObject *blocks, *hashes, *bs = NULL, *hs = NULL, *ret = NULL;
    Py_ssize_t cached = 0, added = 0;
    if (!PyArg_ParseTuple(args, "w*w*iOOL", &t.table, &t.own, &shift, &blocks,
                          &hashes, &no_hash))
        return NULL;
    if (table_open(&t, shift))
        return NULL;
    bs = PySequence_Fast(blocks, "kvindex.commit: blocks must be a sequence");
    hs = bs ? PySequence_Fast(hashes, "kvindex.commit: hashes must be a sequence") : NULL;
    if (!hs)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bs);
    if (PySequence_Fast_GET_SIZE(hs) != n) {
        PyErr_SetString(PyExc_ValueError, "kvindex.commit: blocks and hashes differ in length");
        goto done;
    }
    /* in groups: the items read and their table slots and blocks prefetched first, so
     * the cache misses of a group overlap instead of queueing one after the other */
    for (Py_ssize_t g = 0; g < n; g += GROUP) {
        int64_t bg[GROUP], hg[GROUP];
        Py_ssize_t m = n - g < GROUP ? n - g : GROUP;
        for (Py_ssize_t j = 0; j < m; j++) {
            if (item(bs, g + j, &bg[j]) || item(hs, g + j, &hg[j]))
                goto done;
            if (bg[j] < 0 || bg[j] >= t.nblocks) {
                PyErr_Format(PyExc_IndexError, "kvindex.commit: block %lld out of range",
                             (long long)bg[j]);
                goto done;
            }
            __builtin_prefetch(&KEY(&t, home(&t, hg[j])));
            __builtin_prefetch(&t.o[bg[j]]);
        }
        for (Py_ssize_t j = 0; j < m; j++) {
            int64_t b = bg[j], h = hg[j], i, there;
            if (t.o[b] != (int64_t)no_hash)
                continue; /* it holds a hash already: it keeps it */
            i = find(&t, h);
            there = VAL(&t, i);
            if (there < 0) {
                KEY(&t, i) = h;
                added++;
            } else if (there < t.nblocks && t.o[there] == h) {
                continue; /* a live duplicate: this block stays private */
            }
            VAL(&t, i) = b; /* a new entry, or a stale one taken over */
            t.o[b] = h;
            cached++;
        }
    }
    ret = Py_BuildValue("nn", cached, added);
done:
    Py_XDECREF(bs);
    Py_XDECREF(hs);
    table_release(&t);
    return ret;
}

PyDoc_STRVAR(rebuild_doc,
             "rebuild(table, own, shift, no_hash) -> entries\n"
             "Empty the table and enter exactly the hashes the blocks hold.");

static PyObject *kv_rebuild(PyObject *self, PyObject *args) {
    Table t;
    int shift;
    long long no_hash;
    Py_ssize_t n = 0;
    if (!PyArg_ParseTuple(args, "w*w*iL", &t.table, &t.own, &shift, &no_hash))
        return NULL;
    if (table_open(&t, shift))
        return NULL;
    if (t.nblocks > t.mask) {
        PyErr_SetString(PyExc_ValueError, "kvindex.rebuild: more blocks than table slots");
        table_release(&t);
        return NULL;
    }
    for (int64_t i = 0; i <= t.mask; i++)
        VAL(&t, i) = -1;
    for (int64_t b = 0; b < t.nblocks; b++) {
        int64_t h = t.o[b];
        if (h != (int64_t)no_hash) {
            int64_t i = find(&t, h);
            KEY(&t, i) = h;
            VAL(&t, i) = b;
            n++;
        }
    }
    table_release(&t);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"get", kv_get, METH_VARARGS, get_doc},
    {"prefix", kv_prefix, METH_VARARGS, prefix_doc},
    {"commit", kv_commit, METH_VARARGS, commit_doc},
    {"rebuild", kv_rebuild, METH_VARARGS, rebuild_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kvindex",
    "The KV manager's hash -> block index, compiled (workbench/sim/kvindex.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__kvindex(void) { return PyModule_Create(&module); }
