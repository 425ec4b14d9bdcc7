/* Compiled twins of hot leaf loops of virtual time: workbench._kernels.
 *
 * Each function computes exactly what a Python/numpy function computes, value for value,
 * and that function stays the reference (it runs where this extension is not built, and
 * tests compare the two); workbench/kernels.py says which runs. docs/virtual-time.md,
 * "Compiled kernels", says why these.
 *
 * - block_keys: workbench/segments.py's prefix keys of full blocks (`_mix` / `_mix_one`):
 *   splitmix64 of part_key + end * 2^64/phi, as int64, never -1 (block_keys_bytes: the
 *   same keys as native int64 bytes, for the engine's array('q') of block hashes).
 * - walk: workbench/segments.py's `_twin_walk`, BlockKeyer's walk over the parts to the
 *   blocks it keys: each part key is Python's own hash of the twin's tuple (PyObject_Hash
 *   of a tuple built here), so the keys are the twin's in every Python.
 * - whole_parts / memo_prefix / memo_store: workbench/replay/rounds.py's record hashes of a
 *   prompt as parts around chain_heads: which blocks are whole hash-id parts, the leading
 *   ones the hash-id memo already holds, and the memo's new entries (`_twin_whole_parts`,
 *   `_twin_memo_prefix`, `_twin_memo_store`); dict and tuple operations of the C API, so
 *   the same objects and comparisons as the twins'.
 * - decode_ends: workbench/sim/cost.py's `decode_steps_ns` summed into a span's step ends
 *   (workbench/sim/engine.py `_span_ends`): the same double operations in the same order,
 *   rounded half to even (nearbyint under the default rounding mode; built with
 *   -ffp-contract=off, so no multiply-add is fused).
 * - heads: workbench/context/tokens.py's `heads_array`: the tokens 0 .. width-1 of each
 *   hash-id source, FNV-1a-seeded positions through the keyed splitmix finaliser.
 * - chain / chain_heads: workbench/context/hashing.py's `chain_hashes` (blake2b chained
 *   over each block's uint32 tokens), chain_heads over `heads` tokens of each hash-id block.
 * - stream_keys: workbench/context/tokens.py's `_stream_keys_once` of each hash id's name.
 * - json_ints_fit: whether workbench/storage/rundir.py's `loads_line` may keep orjson's
 *   result (every integer literal in orjson's exact range; its twin writes the value back).
 * - due: workbench/sim/cluster.py's `_due`, the workers whose span has an event due (a
 *   cluster's load board, read at every routed request).
 * - cut_ints: workbench/storage/columnar.py's `cut_ints_py`: where a record line's one
 *   token times array is, and its int64 values when its text is exactly what orjson
 *   writes for them (its twin: `find`s, then numpy's parse and orjson's write-back).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

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

PyDoc_STRVAR(walk_doc,
             "walk(parts, i, off, run, end, last, block_size, part_keys, counts)\n"
             "-> (i, off, run, end, part_key, top)\n\n"
             "segments._twin_walk: from part i (at token off, running key run) move the next "
             "block end `end` past every full block ending by `last`, appending each part's "
             "key hash((run, kind, key, start)) and block count to the lists; part_key and "
             "top are the key and end of the part the walk stopped inside (top 0: none).");

/* `obj` as a part (kind, key, start, n), with its n in *m where m is not NULL; NULL with
 * an error set (the twins unpack four items) */
static PyObject *as_part(PyObject *obj, const char *who, long long *m) {
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 4) {
        PyErr_Format(PyExc_TypeError, "%s: a part is a tuple (kind, key, start, n)", who);
        return NULL;
    }
    if (m) {
        *m = PyLong_AsLongLong(PyTuple_GET_ITEM(obj, 3));
        if (*m == -1 && PyErr_Occurred())
            return NULL;
    }
    return obj;
}

/* hash((a, b, c, d[, e])) of Python objects, as the twin's tuple hash: -1 with an error */
static Py_hash_t hash_of(PyObject *items[], Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (!t)
        return -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_INCREF(items[j]);
        PyTuple_SET_ITEM(t, j, items[j]);
    }
    Py_hash_t h = PyObject_Hash(t);
    Py_DECREF(t);
    return h;
}

/* list.append(o) of a new reference `o` (NULL: its error), the reference dropped: 0, or
 * -1 with an error set */
static int append_new(PyObject *list, PyObject *o) {
    if (!o)
        return -1;
    int r = PyList_Append(list, o);
    Py_DECREF(o);
    return r;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *parts, *pkeys, *counts;
    Py_ssize_t i;
    long long off, run, e, last, bs;
    if (!PyArg_ParseTuple(args, "O!nLLLLLO!O!", &PyTuple_Type, &parts, &i, &off, &run, &e,
                          &last, &bs, &PyList_Type, &pkeys, &PyList_Type, &counts))
        return NULL;
    if (bs <= 0 || i < 0) {
        PyErr_SetString(PyExc_ValueError, "walk: block_size > 0 and i >= 0");
        return NULL;
    }
    long long pk = 0, top = 0;
    while (e <= last) {
        if (i >= PyTuple_GET_SIZE(parts)) {
            PyErr_SetString(PyExc_IndexError, "walk: a block ends past the last part");
            return NULL;
        }
        long long m;
        PyObject *part = as_part(PyTuple_GET_ITEM(parts, i), "walk", &m);
        if (!part)
            return NULL;
        PyObject *r = PyLong_FromLongLong(run);
        if (!r)
            return NULL;
        PyObject *items[5] = {r, PyTuple_GET_ITEM(part, 0), PyTuple_GET_ITEM(part, 1),
                              PyTuple_GET_ITEM(part, 2), PyTuple_GET_ITEM(part, 3)};
        long long t = off + m;
        if (e <= t) {
            long long c = ((t < last ? t : last) - e) / bs + 1;
            Py_hash_t h = hash_of(items, 4);
            if (h == -1 || append_new(pkeys, PyLong_FromLongLong(h)) ||
                append_new(counts, PyLong_FromLongLong(c))) {
                Py_DECREF(r);
                return NULL;
            }
            e += c * bs;
            if (e <= t) { /* stopped inside this part */
                Py_DECREF(r);
                pk = h;
                top = t;
                break;
            }
        }
        Py_hash_t h = hash_of(items, 5);
        Py_DECREF(r);
        if (h == -1)
            return NULL;
        run = h;
        off = t;
        i++;
    }
    return Py_BuildValue("(nLLLLL)", i, off, run, e, pk, top);
}

PyDoc_STRVAR(whole_parts_doc,
             "whole_parts(parts, n, block_size, kind) -> list\n\n"
             "replay.rounds._twin_whole_parts: for each block of a prompt of n tokens, the "
             "part of kind `kind` (hash-id blocks) that is exactly that block, from its "
             "token 0 (the last block may be short), else None.");

static PyObject *whole_parts(PyObject *self, PyObject *args) {
    PyObject *parts;
    long long n, bs, kind;
    if (!PyArg_ParseTuple(args, "O!LLL", &PyTuple_Type, &parts, &n, &bs, &kind))
        return NULL;
    if (bs <= 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "whole_parts: block_size > 0 and n >= 0");
        return NULL;
    }
    PyObject *out = PyList_New((Py_ssize_t)((n + bs - 1) / bs));
    if (!out)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(out); k++) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(out, k, Py_None);
    }
    long long off = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts); i++) {
        long long m;
        PyObject *part = as_part(PyTuple_GET_ITEM(parts, i), "whole_parts", &m);
        if (!part)
            goto fail;
        int of = 0;
        long long k = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(part, 0), &of);
        if (k == -1 && PyErr_Occurred())
            goto fail;
        if (!of && k == kind && off % bs == 0 && (m == bs || (0 < m && m < bs && off + m == n))) {
            long long start = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(part, 2), &of);
            if (start == -1 && PyErr_Occurred())
                goto fail;
            Py_ssize_t at = (Py_ssize_t)(off / bs);
            if (!of && start == 0 && at < PyList_GET_SIZE(out)) {
                Py_INCREF(part);
                PyList_SetItem(out, at, part); /* drops the None */
            }
        }
        off += m;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(memo_prefix_doc,
             "memo_prefix(whole, j, memo, prev, out) -> int\n\n"
             "replay.rounds._twin_memo_prefix: from block j, while whole[j] is a part whose key "
             "the memo holds with the previous hash `prev` and the part's length, append its "
             "hash to out (it becomes prev); the first block it stops at.");

static PyObject *memo_prefix(PyObject *self, PyObject *args) {
    PyObject *whole, *memo, *prev, *out;
    Py_ssize_t j;
    if (!PyArg_ParseTuple(args, "O!nO!OO!", &PyList_Type, &whole, &j, &PyDict_Type, &memo,
                          &prev, &PyList_Type, &out))
        return NULL;
    Py_INCREF(prev);
    for (; j >= 0 && j < PyList_GET_SIZE(whole); j++) {
        PyObject *part = PyList_GET_ITEM(whole, j);
        if (part == Py_None)
            break;
        if (!as_part(part, "memo_prefix", NULL))
            goto fail;
        PyObject *seen = PyDict_GetItemWithError(memo, PyTuple_GET_ITEM(part, 1)); /* borrowed */
        if (!seen) {
            if (PyErr_Occurred())
                goto fail;
            break;
        }
        if (!PyTuple_Check(seen) || PyTuple_GET_SIZE(seen) != 3) {
            PyErr_SetString(PyExc_TypeError, "memo_prefix: a memo entry is (prev, n, hash)");
            goto fail;
        }
        int ne = PyObject_RichCompareBool(PyTuple_GET_ITEM(seen, 0), prev, Py_NE);
        if (ne < 0)
            goto fail;
        if (ne)
            break;
        ne = PyObject_RichCompareBool(PyTuple_GET_ITEM(seen, 1), PyTuple_GET_ITEM(part, 3), Py_NE);
        if (ne < 0)
            goto fail;
        if (ne)
            break;
        PyObject *h = PyTuple_GET_ITEM(seen, 2);
        if (PyList_Append(out, h))
            goto fail;
        Py_INCREF(h);
        Py_SETREF(prev, h);
    }
    Py_DECREF(prev);
    return PyLong_FromSsize_t(j);
fail:
    Py_DECREF(prev);
    return NULL;
}

PyDoc_STRVAR(memo_store_doc,
             "memo_store(whole, out, j, memo) -> None\n\n"
             "replay.rounds._twin_memo_store: memo[part key] = (previous hash, part length, "
             "hash) for each block from j that is a whole part (whole[i] not None), in order.");

static PyObject *memo_store(PyObject *self, PyObject *args) {
    PyObject *whole, *out, *memo;
    Py_ssize_t j;
    if (!PyArg_ParseTuple(args, "O!O!nO!", &PyList_Type, &whole, &PyList_Type, &out, &j,
                          &PyDict_Type, &memo))
        return NULL;
    Py_ssize_t nb = PyList_GET_SIZE(whole);
    if (j < 0 || PyList_GET_SIZE(out) != nb || j > nb) {
        PyErr_SetString(PyExc_ValueError, "memo_store: one hash per block, 0 <= j <= blocks");
        return NULL;
    }
    PyObject *prev = j ? PyList_GET_ITEM(out, j - 1) : Py_None;
    for (Py_ssize_t i = j; i < nb; i++) {
        PyObject *part = PyList_GET_ITEM(whole, i), *h = PyList_GET_ITEM(out, i);
        if (part != Py_None) {
            if (!as_part(part, "memo_store", NULL))
                return NULL;
            PyObject *entry = PyTuple_Pack(3, prev, PyTuple_GET_ITEM(part, 3), h);
            if (!entry)
                return NULL;
            int r = PyDict_SetItem(memo, PyTuple_GET_ITEM(part, 1), entry);
            Py_DECREF(entry);
            if (r)
                return NULL;
        }
        prev = h;
    }
    Py_RETURN_NONE;
}

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

/* Token j of a hash-id source (seed: its FNV-1a seed times the prime, key: its key << 32):
 * the position through the keyed splitmix finaliser, reduced into [lo, lo + span). */
static inline uint64_t head_token(uint32_t seed, uint64_t key, uint32_t j, uint64_t lo,
                                  uint64_t span) {
    uint32_t x = (seed ^ j) * FNV_PRIME;
    uint64_t z = finish(key | x) >> 32;
    return ((z * span) >> 32) + lo;
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
            uint64_t z = head_token(seed, key, (uint32_t)j, lo, span);
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

/* BLAKE2b through the standard library's hashlib.blake2b (not an implementation of our
 * own): the hash of record block hashes and of stream keys. One call a block: the loop
 * around it, the tokens and the bytes are what is compiled here. */
static PyObject *b2_new = NULL;     /* hashlib.blake2b */
static PyObject *b2_kwnames = NULL; /* ("digest_size",) */
static PyObject *b2_sizes[9];       /* digest_size values, by size */
static PyObject *b2_digest_name = NULL;

static int b2_ready(void) {
    if (b2_new)
        return 0;
    PyObject *mod = PyImport_ImportModule("hashlib");
    if (!mod)
        return -1;
    PyObject *ctor = PyObject_GetAttrString(mod, "blake2b");
    Py_DECREF(mod);
    if (!ctor)
        return -1;
    b2_kwnames = Py_BuildValue("(s)", "digest_size");
    b2_digest_name = PyUnicode_InternFromString("digest");
    b2_sizes[4] = PyLong_FromLong(4);
    b2_sizes[8] = PyLong_FromLong(8);
    if (!b2_kwnames || !b2_digest_name || !b2_sizes[4] || !b2_sizes[8]) {
        Py_DECREF(ctor);
        return -1;
    }
    b2_new = ctor;
    return 0;
}

/* blake2b(a[0:na] + b[0:nb], digest_size=nn) for nn 4 or 8, its digest read as a
 * little-endian int into *out; -1 with the exception set. */
static int b2_digest(const uint8_t *a, size_t na, const uint8_t *b, size_t nb, unsigned nn,
                     uint64_t *out) {
    if (b2_ready() < 0)
        return -1;
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(na + nb));
    if (!data)
        return -1;
    memcpy(PyBytes_AS_STRING(data), a, na);
    memcpy(PyBytes_AS_STRING(data) + na, b, nb);
    PyObject *call[2] = {data, b2_sizes[nn]};
    PyObject *h = PyObject_Vectorcall(b2_new, call, 1, b2_kwnames);
    Py_DECREF(data);
    if (!h)
        return -1;
    PyObject *d = PyObject_CallMethodNoArgs(h, b2_digest_name);
    Py_DECREF(h);
    if (!d)
        return -1;
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(d);
    uint64_t v = 0;
    for (unsigned i = 0; i < nn; i++)
        v |= (uint64_t)p[i] << (8 * i);
    Py_DECREF(d);
    *out = v;
    return 0;
}

/* blake2b(prev as 8 little-endian bytes + data[0:n], digest_size=8) into *out */
static int b2_chain(uint64_t prev, const uint8_t *data, size_t n, uint64_t *out) {
    uint8_t p[8];
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(prev >> (8 * i));
    return b2_digest(p, 8, data, n, 8, out);
}

/* prev: None (the first block: 8 zero bytes) or an int in [0, 2**64) (OverflowError
 * otherwise, as int.to_bytes(8, "little") raises). */
static int prev_of(PyObject *obj, uint64_t *out) {
    if (obj == Py_None) {
        *out = 0;
        return 0;
    }
    PyObject *num = PyNumber_Index(obj);
    if (!num)
        return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(num);
    Py_DECREF(num);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

static int append_u64(PyObject *list, uint64_t v) {
    return append_new(list, PyLong_FromUnsignedLongLong(v));
}

PyDoc_STRVAR(chain_doc,
             "chain(prev, data, step) -> list[int]\n\n"
             "The chained block hashes of data cut into step-byte slices (the last may be "
             "short): h = blake2b(h as 8 little-endian bytes + slice, digest_size=8), read "
             "little-endian; the first h is prev, None for 8 zero bytes "
             "(context.hashing.chain_hashes).");

static PyObject *chain(PyObject *self, PyObject *args) {
    PyObject *prev_obj;
    Py_buffer data;
    Py_ssize_t step;
    if (!PyArg_ParseTuple(args, "Oy*n", &prev_obj, &data, &step))
        return NULL;
    uint64_t p;
    PyObject *out = NULL;
    if (step <= 0) {
        PyErr_SetString(PyExc_ValueError, "chain: step must be > 0");
        goto done;
    }
    if (prev_of(prev_obj, &p) < 0)
        goto done;
    out = PyList_New(0);
    if (!out)
        goto done;
    const uint8_t *buf = data.buf;
    for (Py_ssize_t at = 0; at < data.len; at += step) {
        Py_ssize_t n = data.len - at < step ? data.len - at : step;
        if (b2_chain(p, buf + at, (size_t)n, &p) < 0 || append_u64(out, p) < 0) {
            Py_CLEAR(out);
            break;
        }
    }
done:
    PyBuffer_Release(&data);
    return out;
}

PyDoc_STRVAR(chain_heads_doc,
             "chain_heads(prev, packed, width, n, lo, span) -> list[int]\n\n"
             "chain(prev, heads(packed, width, n, lo, span) as uint32 bytes, 4 * width): "
             "the record hashes of hash-id blocks, their tokens never in an array "
             "(replay.rounds.RoundMaker._segment_hashes).");

static PyObject *chain_heads(PyObject *self, PyObject *args) {
    PyObject *prev_obj, *packed_obj;
    Py_ssize_t width, n;
    unsigned long long lo, span;
    if (!PyArg_ParseTuple(args, "OOnnKK", &prev_obj, &packed_obj, &width, &n, &lo, &span))
        return NULL;
    if (width <= 0 || n < 0 || span > 0x100000000ULL) {
        PyErr_SetString(PyExc_ValueError,
                        "chain_heads: width > 0, n >= 0 and span <= 2**32");
        return NULL;
    }
    uint64_t p;
    if (prev_of(prev_obj, &p) < 0)
        return NULL;
    PyObject *packed = PySequence_Fast(packed_obj, "chain_heads: packed must be a sequence");
    if (!packed)
        return NULL;
    PyObject *out = NULL;
    uint8_t *buf = NULL;
    Py_ssize_t rows = PySequence_Fast_GET_SIZE(packed);
    if (n > rows * width) {
        PyErr_SetString(PyExc_ValueError, "chain_heads: n exceeds len(packed) * width");
        goto done;
    }
    buf = PyMem_Malloc((size_t)width * 4);
    out = buf ? PyList_New(0) : PyErr_NoMemory();
    if (!out)
        goto done;
    Py_ssize_t left = n;
    for (Py_ssize_t r = 0; r < rows && left > 0; r++) {
        uint64_t kf = PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(packed, r));
        if (kf == (uint64_t)-1 && PyErr_Occurred()) {
            Py_CLEAR(out);
            goto done;
        }
        uint32_t seed = (uint32_t)(kf & 0xFFFFFFFFULL) * FNV_PRIME;
        uint64_t key = kf >> 32 << 32;
        Py_ssize_t m = left < width ? left : width;
        for (Py_ssize_t j = 0; j < m; j++) {
            uint32_t t = (uint32_t)head_token(seed, key, (uint32_t)j, lo, span);
            buf[4 * j] = (uint8_t)t;
            buf[4 * j + 1] = (uint8_t)(t >> 8);
            buf[4 * j + 2] = (uint8_t)(t >> 16);
            buf[4 * j + 3] = (uint8_t)(t >> 24);
        }
        left -= m;
        if (b2_chain(p, buf, (size_t)m * 4, &p) < 0 || append_u64(out, p) < 0) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    PyMem_Free(buf);
    Py_DECREF(packed);
    return out;
}

PyDoc_STRVAR(stream_keys_doc,
             "stream_keys(head, state, names) -> list[int]\n\n"
             "key << 32 | fnv of each stream named str(names[i]) after the stream id's head "
             "(bytes): key the little-endian blake2b(head + name, digest_size=4), fnv the "
             "FNV-1a of the name continued from state (context.tokens._stream_keys_once).");

static PyObject *stream_keys(PyObject *self, PyObject *args) {
    Py_buffer head;
    unsigned long state;
    PyObject *names_obj;
    if (!PyArg_ParseTuple(args, "y*kO", &head, &state, &names_obj))
        return NULL;
    PyObject *out = NULL;
    PyObject *names = PySequence_Fast(names_obj, "stream_keys: names must be a sequence");
    if (!names)
        goto done;
    if (state > 0xFFFFFFFFUL) {
        PyErr_SetString(PyExc_ValueError, "stream_keys: state must be a 32-bit FNV state");
        goto done;
    }
    Py_ssize_t m = PySequence_Fast_GET_SIZE(names);
    out = PyList_New(m);
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *name = PyObject_Str(PySequence_Fast_GET_ITEM(names, i));
        if (!name) {
            Py_CLEAR(out);
            goto done;
        }
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(name, &len);
        if (!s) {
            Py_DECREF(name);
            Py_CLEAR(out);
            goto done;
        }
        uint64_t key;
        if (b2_digest(head.buf, (size_t)head.len, (const uint8_t *)s, (size_t)len, 4, &key) < 0) {
            Py_DECREF(name);
            Py_CLEAR(out);
            goto done;
        }
        uint32_t h = (uint32_t)state;
        for (Py_ssize_t j = 0; j < len; j++)
            h = (h ^ (uint8_t)s[j]) * FNV_PRIME;
        Py_DECREF(name);
        PyObject *v = PyLong_FromUnsignedLongLong(key << 32 | h);
        if (!v) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, v);
    }
done:
    Py_XDECREF(names);
    PyBuffer_Release(&head);
    return out;
}

PyDoc_STRVAR(json_ints_fit_doc,
             "json_ints_fit(data) -> bool\n\n"
             "False when a JSON text has an integer literal (outside strings: no fraction, "
             "no exponent) out of [-2**63, 2**64), which orjson reads as a float; True "
             "otherwise (storage.rundir.loads_line keeps orjson's result then).");

/* digits[0:n] (no sign) compared with the decimal string lim of the same length */
static int digits_le(const char *digits, const char *lim, Py_ssize_t n) {
    return memcmp(digits, lim, (size_t)n) <= 0;
}

static PyObject *json_ints_fit(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    const char *p = data.buf, *end = p + data.len;
    int fit = 1;
    while (p < end && fit) {
        char c = *p;
        if (c == '"') { /* a string: to its closing quote, escapes skipped */
            p++;
            while (p < end && *p != '"')
                p += *p == '\\' ? 2 : 1;
            p++;
            continue;
        }
        if (c != '-' && (c < '0' || c > '9')) {
            p++;
            continue;
        }
        int neg = c == '-';
        const char *d = p + neg, *q = d;
        while (q < end && *q >= '0' && *q <= '9')
            q++;
        Py_ssize_t n = q - d;
        if (q < end && (*q == '.' || *q == 'e' || *q == 'E')) { /* a float: skip it */
            q++;
            while (q < end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' ||
                               *q == 'E' || *q == '+' || *q == '-'))
                q++;
        } else if (n >= 19) {
            if (neg)
                fit = n == 19 && digits_le(d, "9223372036854775808", 19);
            else
                fit = n == 19 || (n == 20 && digits_le(d, "18446744073709551615", 20));
        }
        p = q > p ? q : p + 1;
    }
    PyBuffer_Release(&data);
    return PyBool_FromLong(fit);
}

PyDoc_STRVAR(due_doc, "due(times, now) -> list[int]\n\n"
                     "[i for i, t in enumerate(times) if t <= now]: times a list of floats.");

static PyObject *due(PyObject *self, PyObject *args) {
    PyObject *times, *out;
    double now;
    if (!PyArg_ParseTuple(args, "O!d", &PyList_Type, &times, &now))
        return NULL;
    out = PyList_New(0);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(times); i++) {
        PyObject *t = PyList_GET_ITEM(times, i);
        double v = PyFloat_CheckExact(t) ? PyFloat_AS_DOUBLE(t) : PyFloat_AsDouble(t);
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        if (v <= now) {
            PyObject *k = PyLong_FromSsize_t(i);
            if (!k || PyList_Append(out, k)) {
                Py_XDECREF(k);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(k);
        }
    }
    return out;
}

PyDoc_STRVAR(cut_ints_doc,
             "cut_ints(line, key) -> (start, end, values) | None\n\n"
             "The one array after `key` in `line` (key ends with '['): its text line[start:end] "
             "(end at its ']') and its values as native int64 bytes, when the text is "
             "exactly the JSON orjson writes for int64 values (-?(0|[1-9][0-9]*), commas, "
             "no space, no -0, in range), `key` is not found again and the line has no "
             "unicode escape; else None.");

/* the first `k` bytes of `needle` in hay[0:n], or NULL */
static const char *find(const char *hay, Py_ssize_t n, const char *needle, Py_ssize_t k) {
    if (k <= 0)
        return hay;
    const char *p = hay, *end = hay + n;
    while (end - p >= k) {
        p = memchr(p, needle[0], (size_t)(end - p - k + 1));
        if (p == NULL)
            return NULL;
        if (memcmp(p, needle, (size_t)k) == 0)
            return p;
        p++;
    }
    return NULL;
}

/* the value of 8 ASCII digits at p: three multiplies over the 8 bytes as one word
 * (little-endian hosts; a digit at a time elsewhere) */
static uint64_t eight_digits(const char *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    v -= 0x3030303030303030ULL;
    v = (v * 10) + (v >> 8); /* each even byte: two digits' value */
    v = (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
         (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
    return v;
#else
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u * 10 + (uint64_t)(p[i] - '0');
    return u;
#endif
}

/* the value of the n (1..19) ASCII digits at d: the last 8 at once when there are more */
static uint64_t digits_value(const char *d, Py_ssize_t n) {
    uint64_t u = 0;
    Py_ssize_t head = n > 8 ? n - 8 : n;
    for (Py_ssize_t i = 0; i < head; i++)
        u = u * 10 + (uint64_t)(d[i] - '0');
    return n > 8 ? u * 100000000ULL + eight_digits(d + head) : u;
}

#define CUT_STACK 512

static PyObject *cut_ints(PyObject *self, PyObject *args) {
    Py_buffer line, key;
    if (!PyArg_ParseTuple(args, "y*y*", &line, &key))
        return NULL;
    const char *b = line.buf, *k = key.buf;
    Py_ssize_t n = line.len, klen = key.len;
    PyObject *out = NULL;
    int64_t stack[CUT_STACK], *v = stack;
    const char *at = find(b, n, k, klen);
    if (at == NULL || klen == 0)
        goto none;
    Py_ssize_t start = (at - b) + klen, end = start, count = 0;
    Py_ssize_t cap = (n - start) / 2 + 1; /* a value takes a digit and a separator */
    if (cap > CUT_STACK && (v = PyMem_Malloc((size_t)cap * sizeof(int64_t))) == NULL) {
        PyBuffer_Release(&line);
        PyBuffer_Release(&key);
        return PyErr_NoMemory();
    }
    /* one pass: each value as orjson writes it, then a ',' or the closing ']' */
    const char *p = b + start, *e = b + n;
    if (p < e && *p == ']') {
        end = start;
    } else {
        for (;;) {
            int neg = p < e && *p == '-';
            const char *d = p + neg, *q = d;
            while (q < e && (unsigned char)(*q - '0') < 10u && q - d < 20)
                q++;
            Py_ssize_t nd = q - d;
            if (nd == 0 || nd > 19 || (nd > 1 && *d == '0') || (neg && nd == 1 && *d == '0'))
                goto none; /* no digit, a leading zero, -0, or past int64 */
            uint64_t u = digits_value(d, nd);
            if (nd == 19 && u > (neg ? 9223372036854775808ULL : 9223372036854775807ULL))
                goto none;
            v[count++] = neg ? (int64_t)(0 - u) : (int64_t)u;
            if (q < e && *q == ',') {
                p = q + 1;
                continue;
            }
            if (q < e && *q == ']') {
                end = q - b;
                break;
            }
            goto none;
        }
    }
    if (find(b, start, "\\u", 2) || find(b + end, n - end, "\\u", 2) ||
        find(b + end, n - end, k, klen))
        goto none;
    out = PyBytes_FromStringAndSize((const char *)v, count * (Py_ssize_t)sizeof(int64_t));
    if (v != stack)
        PyMem_Free(v);
    PyBuffer_Release(&line);
    PyBuffer_Release(&key);
    if (out == NULL)
        return NULL;
    return Py_BuildValue("(nnN)", start, end, out);
none:
    if (v != stack)
        PyMem_Free(v);
    PyBuffer_Release(&line);
    PyBuffer_Release(&key);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"block_keys", block_keys, METH_VARARGS, block_keys_doc},
    {"block_keys_bytes", block_keys_bytes, METH_VARARGS, block_keys_bytes_doc},
    {"walk", walk, METH_VARARGS, walk_doc},
    {"whole_parts", whole_parts, METH_VARARGS, whole_parts_doc},
    {"memo_prefix", memo_prefix, METH_VARARGS, memo_prefix_doc},
    {"memo_store", memo_store, METH_VARARGS, memo_store_doc},
    {"decode_ends", decode_ends, METH_VARARGS, decode_ends_doc},
    {"heads", heads, METH_VARARGS, heads_doc},
    {"chain", chain, METH_VARARGS, chain_doc},
    {"chain_heads", chain_heads, METH_VARARGS, chain_heads_doc},
    {"stream_keys", stream_keys, METH_VARARGS, stream_keys_doc},
    {"json_ints_fit", json_ints_fit, METH_VARARGS, json_ints_fit_doc},
    {"due", due, METH_VARARGS, due_doc},
    {"cut_ints", cut_ints, METH_VARARGS, cut_ints_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Compiled twins of hot leaf loops of virtual time (workbench/kernels.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
