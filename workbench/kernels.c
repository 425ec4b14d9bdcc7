/* Compiled twins of three hot loops of virtual time: workbench._kernels.
 *
 * Each function computes exactly what a Python/numpy function computes, value for value,
 * and that function stays the reference (it runs where this extension is not built, and
 * tests compare the two); workbench/kernels.py says which runs. docs/virtual-time.md,
 * "Compiled kernels", says why these three.
 *
 * - block_keys: workbench/segments.py's prefix keys of full blocks (`_mix` / `_mix_one`):
 *   splitmix64 of part_key + end * 2^64/phi, as int64, never -1 (block_keys_bytes: the
 *   same keys as native int64 bytes, for the engine's array('q') of block hashes).
 * - decode_ends: workbench/sim/cost.py's `decode_steps_ns` summed into a span's step ends
 *   (workbench/sim/engine.py `_span_ends`): the same double operations in the same order,
 *   rounded half to even (nearbyint under the default rounding mode; built with
 *   -ffp-contract=off, so no multiply-add is fused).
 * - heads: workbench/context/tokens.py's `heads_array`: the tokens 0 .. width-1 of each
 *   hash-id source, FNV-1a-seeded positions through the keyed splitmix finaliser.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#define GOLD 0x9E3779B97F4A7C15ULL
#define MIX1 0xBF58476D1CE4E5B9ULL
#define MIX2 0x94D049BB133111EBULL
#define FNV_PRIME 0x01000193U

static inline uint64_t finish(uint64_t z) {
    z ^= z >> 30;
    z *= MIX1;
    z ^= z >> 27;
    z *= MIX2;
    z ^= z >> 31;
    return z;
}

PyDoc_STRVAR(block_keys_doc,
             "block_keys(part_keys, counts, first_end, block_size) -> list[int]\n\n"
             "counts[i] keys for part key part_keys[i], the blocks ending at first_end, "
             "first_end + block_size, ... in order (segments.BlockKeyer).");

PyDoc_STRVAR(block_keys_bytes_doc,
             "block_keys_bytes(part_keys, counts, first_end, block_size) -> bytes\n\n"
             "block_keys' keys as native int64s, for array('q').frombytes: no Python int "
             "per key (the engine's block hashes, sim.scheduler.Sequence.hashes).");

/* The keys of block_keys into a fresh buffer of *total int64s (PyMem_Malloc'd; the caller
 * frees it); NULL with an error set. */
static int64_t *keys_of(PyObject *args, Py_ssize_t *total_out) {
    PyObject *pk_obj, *cnt_obj;
    long long first_end, bs;
    int64_t *buf = NULL;
    if (!PyArg_ParseTuple(args, "OOLL", &pk_obj, &cnt_obj, &first_end, &bs))
        return NULL;
    if (first_end < 0 || bs <= 0) {
        PyErr_SetString(PyExc_ValueError, "block_keys: first_end >= 0 and block_size > 0");
        return NULL;
    }
    PyObject *pks = PySequence_Fast(pk_obj, "block_keys: part_keys must be a sequence");
    if (!pks)
        return NULL;
    PyObject *cnts = PySequence_Fast(cnt_obj, "block_keys: counts must be a sequence");
    if (!cnts) {
        Py_DECREF(pks);
        return NULL;
    }
    Py_ssize_t m = PySequence_Fast_GET_SIZE(pks);
    if (PySequence_Fast_GET_SIZE(cnts) != m) {
        PyErr_SetString(PyExc_ValueError, "block_keys: one count per part key");
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t c = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(cnts, i));
        if (c == -1 && PyErr_Occurred())
            goto done;
        if (c < 0 || c > PY_SSIZE_T_MAX / 16 - total) {
            PyErr_SetString(PyExc_ValueError, "block_keys: counts must be >= 0");
            goto done;
        }
        total += c;
    }
    buf = PyMem_Malloc((total ? total : 1) * sizeof(int64_t));
    if (!buf) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t end = (uint64_t)first_end, step = (uint64_t)bs;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        /* any int, taken modulo 2^64 (as `part_key & _M64`) */
        uint64_t pk = PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(pks, i));
        if (pk == (uint64_t)-1 && PyErr_Occurred()) {
            PyMem_Free(buf);
            buf = NULL;
            goto done;
        }
        Py_ssize_t c = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(cnts, i));
        for (Py_ssize_t j = 0; j < c; j++, end += step) {
            int64_t v = (int64_t)finish(pk + end * GOLD);
            buf[k++] = v == -1 ? -2 : v;
        }
    }
    *total_out = total;
done:
    Py_DECREF(pks);
    Py_DECREF(cnts);
    return buf;
}

static PyObject *block_keys(PyObject *self, PyObject *args) {
    Py_ssize_t total = 0;
    int64_t *buf = keys_of(args, &total);
    if (!buf)
        return NULL;
    PyObject *out = PyList_New(total);
    for (Py_ssize_t k = 0; out && k < total; k++) {
        PyObject *key = PyLong_FromLongLong(buf[k]);
        if (!key)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, k, key);
    }
    PyMem_Free(buf);
    return out;
}

static PyObject *block_keys_bytes(PyObject *self, PyObject *args) {
    Py_ssize_t total = 0;
    int64_t *buf = keys_of(args, &total);
    if (!buf)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize((const char *)buf, total * sizeof(int64_t));
    PyMem_Free(buf);
    return out;
}

PyDoc_STRVAR(decode_ends_doc,
             "decode_ends(end, k, kv0, dkv, a, b, c, s, cap, floor, speedup) -> list[int]\n\n"
             "The k step ends of a decode span, the first at end: step i (1 .. k-1) with "
             "kv0 + i * dkv KV tokens takes round(max(floor, a*u*u + b*u + c + s) * 1e6 / "
             "speedup) ns, u = min(1, kv / cap) (cost.decode_steps_ns).");

static PyObject *decode_ends(PyObject *self, PyObject *args) {
    long long end, kv0, dkv;
    Py_ssize_t k;
    double a, b, c, s, cap, floor_ms, sp;
    if (!PyArg_ParseTuple(args, "LnLLddddddd", &end, &k, &kv0, &dkv, &a, &b, &c, &s, &cap,
                          &floor_ms, &sp))
        return NULL;
    if (k < 1 || cap <= 0 || sp <= 0) {
        PyErr_SetString(PyExc_ValueError, "decode_ends: k >= 1, cap > 0 and speedup > 0");
        return NULL;
    }
    PyObject *out = PyList_New(k);
    if (!out)
        return NULL;
    long long t = end;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (i) {
            double kv = (double)(kv0 + (long long)i * dkv);
            double u = kv / cap;
            if (!(u < 1.0))
                u = 1.0;
            double x = a * u * u + b * u + c + s;
            double ms = x > floor_ms ? x : floor_ms;
            t += (long long)nearbyint(ms * 1e6 / sp);
        }
        PyObject *v = PyLong_FromLongLong(t);
        if (!v) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

PyDoc_STRVAR(heads_doc,
             "heads(packed, width, n, lo, span, out) -> None\n\n"
             "The first n of tokens 0 .. width-1 of each source packed[i] (key << 32 | fnv), "
             "into out: a writable buffer of n uint32 or int64 (tokens.heads_array; uint32 "
             "keeps the low 32 bits, as numpy's astype does).");

static PyObject *heads(PyObject *self, PyObject *args) {
    PyObject *packed_obj;
    Py_ssize_t width, n;
    unsigned long long lo, span;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OnnKKw*", &packed_obj, &width, &n, &lo, &span, &out))
        return NULL;
    PyObject *packed = NULL;
    if (width < 0 || n < 0 || (out.itemsize != 4 && out.itemsize != 8) ||
        out.len != n * out.itemsize || span > 0x100000000ULL) {
        PyErr_SetString(PyExc_ValueError,
                        "heads: out must hold n uint32 or int64, width and n >= 0, "
                        "span <= 2**32");
        goto fail;
    }
    packed = PySequence_Fast(packed_obj, "heads: packed must be a sequence");
    if (!packed)
        goto fail;
    Py_ssize_t rows = PySequence_Fast_GET_SIZE(packed);
    if (n > rows * width) {
        PyErr_SetString(PyExc_ValueError, "heads: n exceeds len(packed) * width");
        goto fail;
    }
    Py_ssize_t idx = 0;
    for (Py_ssize_t r = 0; r < rows && idx < n; r++) {
        uint64_t kf = PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(packed, r));
        if (kf == (uint64_t)-1 && PyErr_Occurred())
            goto fail;
        uint32_t seed = (uint32_t)(kf & 0xFFFFFFFFULL) * FNV_PRIME;
        uint64_t key = kf >> 32 << 32;
        for (Py_ssize_t j = 0; j < width && idx < n; j++, idx++) {
            uint32_t x = (seed ^ (uint32_t)j) * FNV_PRIME;
            uint64_t z = finish(key | x) >> 32;
            z = ((z * span) >> 32) + lo;
            if (out.itemsize == 4)
                ((uint32_t *)out.buf)[idx] = (uint32_t)z;
            else
                ((int64_t *)out.buf)[idx] = (int64_t)z;
        }
    }
    Py_DECREF(packed);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(packed);
    PyBuffer_Release(&out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"block_keys", block_keys, METH_VARARGS, block_keys_doc},
    {"block_keys_bytes", block_keys_bytes, METH_VARARGS, block_keys_bytes_doc},
    {"decode_ends", decode_ends, METH_VARARGS, decode_ends_doc},
    {"heads", heads, METH_VARARGS, heads_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Compiled twins of three hot loops of virtual time (workbench/kernels.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
