/* The KV manager's inner loops, compiled: workbench.sim._kvcache.
 *
 * Two parts: the hash -> block index (get, prefix, commit, rebuild; its interface and its
 * dict twin are workbench/sim/kvindex.py) and the block moves of the manager
 * (acquire, release, allocate; workbench/sim/kvcache.py calls them and holds the same
 * moves in numpy where this extension is not built). docs/embedded-engine.md, "KV manager
 * representation", says why they are compiled.
 *
 * The index is one int64 buffer of (key, block) pairs, a power of two of them (a slot is
 * empty while its block is -1; key and block share a cache line), probed linearly from a
 * Fibonacci hash of the key (the top bits of key * 2^64/phi, `shift` = 64 - log2(slots)).
 * An entry is authoritative only while its block still holds the key: own[block] == key,
 * `own` being the manager's per-block hash array. Block ids and hashes come in as int64
 * arrays (array('q') or numpy: the engine's, read in place) or as Python lists of ints
 * (read one item at a time, so a lookup that stops at its first miss converts no more);
 * allocate gives its blocks back as int64 bytes (array('q').frombytes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MULT 0x9E3779B97F4A7C15ULL
#define GROUP 16 /* items whose memory is prefetched together */
#define AHEAD 16 /* a block loop's prefetch distance (acquire, release): their per-block
                    arrays of 64 workers are far larger than the cache */

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

/* Block id b checked against n blocks; -1 with an IndexError naming fn set. */
static inline int check_block(int64_t b, Py_ssize_t n, const char *fn) {
    if (b < 0 || b >= n) {
        PyErr_Format(PyExc_IndexError, "%s: block %lld out of range", fn, (long long)b);
        return -1;
    }
    return 0;
}

/* An int64 sequence read either way: a buffer (an array: no conversion) or a list. */
typedef struct {
    Py_buffer view;
    PyObject *fast;
    const int64_t *buf;
    Py_ssize_t n;
} Int64s;

static int int64s_open(Int64s *x, PyObject *obj, const char *fn, const char *what) {
    x->fast = NULL;
    x->buf = NULL;
    if (PyObject_CheckBuffer(obj)) {
        if (PyObject_GetBuffer(obj, &x->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS))
            return -1;
        if (x->view.itemsize != 8 || x->view.len % 8 || !x->view.format ||
            (strcmp(x->view.format, "l") && strcmp(x->view.format, "q") &&
             strcmp(x->view.format, "<l") && strcmp(x->view.format, "<q") &&
             strcmp(x->view.format, "=l") && strcmp(x->view.format, "=q"))) {
            PyBuffer_Release(&x->view);
            PyErr_Format(PyExc_ValueError, "%s: %s must be int64", fn, what);
            return -1;
        }
        x->buf = (const int64_t *)x->view.buf;
        x->n = x->view.len / 8;
        return 0;
    }
    x->fast = PySequence_Fast(obj, "not a sequence");
    if (!x->fast) {
        if (PyErr_ExceptionMatches(PyExc_TypeError))
            PyErr_Format(PyExc_TypeError, "%s: %s must be a sequence", fn, what);
        return -1;
    }
    x->n = PySequence_Fast_GET_SIZE(x->fast);
    return 0;
}

static void int64s_close(Int64s *x) {
    if (x->fast)
        Py_DECREF(x->fast);
    else if (x->buf)
        PyBuffer_Release(&x->view);
}

static inline int int64s_get(const Int64s *x, Py_ssize_t i, int64_t *out) {
    if (x->buf) {
        *out = x->buf[i];
        return 0;
    }
    return item(x->fast, i, out);
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
             "hashes[start], hashes[start + 1], ... up to the first miss (before end), a list\n"
             "(hashes: an int64 array, read in place, or a list of ints)");

static PyObject *kv_prefix(PyObject *self, PyObject *args) {
    Table t;
    int shift;
    PyObject *hashes, *out = NULL;
    Int64s seq = {0};
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "w*w*iOnn", &t.table, &t.own, &shift, &hashes,
                          &start, &end))
        return NULL;
    if (table_open(&t, shift))
        return NULL;
    if (int64s_open(&seq, hashes, "kvindex.prefix", "hashes"))
        goto done;
    if (end > seq.n)
        end = seq.n;
    if (start < 0)
        start = 0;
    out = PyList_New(0);
    if (!out)
        goto done;
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t h, b;
        if (int64s_get(&seq, i, &h))
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
    int64s_close(&seq);
    table_release(&t);
    return out;
}

PyDoc_STRVAR(commit_doc,
             "commit(table, own, shift, blocks, hashes, no_hash) -> (cached, added)\n"
             "Make blocks[i] hold hashes[i], in order: a block already holding a hash keeps\n"
             "it, and one whose hash a block already holds stays private. Returns how many\n"
             "blocks now hold their hash and how many table entries were added. hashes: an int64\n"
             "array (read in place) or a list of ints.");

static PyObject *kv_commit(PyObject *self, PyObject *args) {
    Table t;
    int shift;
    long long no_hash;
    PyObject *blocks, *hashes, *ret = NULL;
    Int64s bs = {0}, hs = {0};
    Py_ssize_t cached = 0, added = 0;
    if (!PyArg_ParseTuple(args, "w*w*iOOL", &t.table, &t.own, &shift, &blocks,
                          &hashes, &no_hash))
        return NULL;
    if (table_open(&t, shift))
        return NULL;
    if (int64s_open(&bs, blocks, "kvindex.commit", "blocks") ||
        int64s_open(&hs, hashes, "kvindex.commit", "hashes"))
        goto done;
    Py_ssize_t n = bs.n;
    if (hs.n != n) {
        PyErr_SetString(PyExc_ValueError, "kvindex.commit: blocks and hashes differ in length");
        goto done;
    }
    /* in groups: the items read and their table slots and blocks prefetched first, so
     * the cache misses of a group overlap instead of queueing one after the other */
    for (Py_ssize_t g = 0; g < n; g += GROUP) {
        int64_t bg[GROUP], hg[GROUP];
        Py_ssize_t m = n - g < GROUP ? n - g : GROUP;
        for (Py_ssize_t j = 0; j < m; j++) {
            if (int64s_get(&bs, g + j, &bg[j]) || int64s_get(&hs, g + j, &hg[j]))
                goto done;
            if (check_block(bg[j], t.nblocks, "kvindex.commit"))
                goto done;
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
    int64s_close(&bs);
    int64s_close(&hs);
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


/* ---- the block moves ---------------------------------------------------------------
 * The manager's per-block arrays (kvcache.py, BlockManager): ref (reference counts), own
 * (the hash a block holds, or no_hash), free (a stack of uncached free blocks, the next
 * taken from the top: free[0 .. nfree)), log (the LRU log: entries [head, tail), entry p
 * live iff pos[log[p]] == p) and pos. The scalars go in and come back out as ints. */

typedef struct {
    Py_buffer ref, own, free, log, pos;
    int64_t *r, *o, *f, *l, *p;
    Py_ssize_t nblocks, loglen;
} Blocks;

static void blocks_release(Blocks *k) {
    PyBuffer_Release(&k->ref);
    PyBuffer_Release(&k->own);
    PyBuffer_Release(&k->free);
    PyBuffer_Release(&k->log);
    PyBuffer_Release(&k->pos);
}

static int blocks_open(Blocks *k) {
    k->nblocks = k->ref.len / 8;
    k->loglen = k->log.len / 8;
    if (k->ref.len % 8 || k->own.len != k->ref.len || k->free.len != k->ref.len ||
        k->pos.len != k->ref.len || k->log.len % 8 || k->loglen < k->nblocks) {
        PyErr_SetString(PyExc_ValueError, "kvcache: the block arrays must be int64, "
                                          "num_blocks long (the log at least as long)");
        blocks_release(k);
        return -1;
    }
    k->r = (int64_t *)k->ref.buf;
    k->o = (int64_t *)k->own.buf;
    k->f = (int64_t *)k->free.buf;
    k->l = (int64_t *)k->log.buf;
    k->p = (int64_t *)k->pos.buf;
    return 0;
}

/* Block id i of a sequence, checked against the arrays; -1 with an error set. */
static inline int block_item(const Blocks *k, const Int64s *seq, Py_ssize_t i, int64_t *out) {
    return int64s_get(seq, i, out) || check_block(*out, k->nblocks, "kvcache") ? -1 : 0;
}

PyDoc_STRVAR(acquire_doc,
             "acquire(ref, own, free, log, pos, blocks) -> idle\n"
             "A reference more on each of blocks (distinct ids); the ones that had none leave\n"
             "the LRU (their log entries turn stale). Returns how many had none.");

static PyObject *kv_acquire(PyObject *self, PyObject *args) {
    Blocks k;
    PyObject *blocks;
    Int64s seq = {0};
    Py_ssize_t idle = 0;
    if (!PyArg_ParseTuple(args, "w*w*w*w*w*O", &k.ref, &k.own, &k.free, &k.log, &k.pos,
                          &blocks))
        return NULL;
    if (blocks_open(&k))
        return NULL;
    if (int64s_open(&seq, blocks, "kvcache.acquire", "blocks")) {
        blocks_release(&k);
        return NULL;
    }
    Py_ssize_t n = seq.n;
    for (Py_ssize_t j = 0; j < n; j++) { /* checked first: an error changes nothing */
        int64_t b;
        if (block_item(&k, &seq, j, &b)) {
            int64s_close(&seq);
            blocks_release(&k);
            return NULL;
        }
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t b = 0;
        if (seq.buf && j + AHEAD < n) { /* an array: the lines of a block AHEAD on */
            __builtin_prefetch(&k.r[seq.buf[j + AHEAD]], 1);
            __builtin_prefetch(&k.p[seq.buf[j + AHEAD]], 1);
        }
        int64s_get(&seq, j, &b); /* read above: cannot fail */
        if (k.r[b] == 0) {
            k.p[b] = -1;
            idle++;
        }
        k.r[b]++;
    }
    int64s_close(&seq);
    blocks_release(&k);
    return PyLong_FromSsize_t(idle);
}

/* Move the live LRU entries to the front of the log, in order. */
static void compact(Blocks *k, int64_t *head, int64_t *tail) {
    int64_t m = 0;
    for (int64_t q = *head; q < *tail; q++) {
        int64_t b = k->l[q];
        if (k->p[b] == q) {
            k->l[m] = b;
            k->p[b] = m++;
        }
    }
    *head = 0;
    *tail = m;
}

PyDoc_STRVAR(release_doc,
             "release(ref, own, free, log, pos, blocks, nfree, head, tail, no_hash)\n"
             "    -> (nfree, head, tail, freed, cached)\n"
             "A reference less on each of blocks (distinct ids), the last one first; those left\n"
             "with none are freed: an uncached one onto the free stack, a cached one appended\n"
             "to the LRU log (compacted first when it is full). Returns the new scalars, how\n"
             "many were freed and how many of them went to the LRU.");

static PyObject *kv_release(PyObject *self, PyObject *args) {
    Blocks k;
    PyObject *blocks, *ret = NULL;
    Int64s seq = {0};
    Py_ssize_t nfree;
    int64_t head, tail, *zero = NULL;
    long long no_hash;
    Py_ssize_t freed = 0, cached = 0;
    if (!PyArg_ParseTuple(args, "w*w*w*w*w*OnLLL", &k.ref, &k.own, &k.free, &k.log, &k.pos,
                          &blocks, &nfree, &head, &tail, &no_hash))
        return NULL;
    if (blocks_open(&k))
        return NULL;
    if (int64s_open(&seq, blocks, "kvcache.release", "blocks"))
        goto done;
    Py_ssize_t n = seq.n;
    zero = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    if (!zero) {
        PyErr_NoMemory();
        goto done;
    }
    /* read and checked first (an error changes nothing), the last block first */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (block_item(&k, &seq, n - 1 - i, &zero[i]))
            goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t b = zero[i];
        if (i + AHEAD < n) { /* the lines of a block AHEAD on (zero[i + AHEAD]: not yet
                                overwritten, freed <= i) */
            __builtin_prefetch(&k.r[zero[i + AHEAD]], 1);
            __builtin_prefetch(&k.o[zero[i + AHEAD]], 0);
        }
        if (--k.r[b] == 0) {
            zero[freed++] = b; /* freed <= i: only what was read is overwritten */
            cached += k.o[b] != (int64_t)no_hash;
        }
    }
    if (tail + cached > k.loglen)
        compact(&k, &head, &tail);
    for (Py_ssize_t i = 0; i < freed; i++) {
        int64_t b = zero[i];
        if (i + AHEAD < freed)
            __builtin_prefetch(&k.p[zero[i + AHEAD]], 1);
        if (k.o[b] == (int64_t)no_hash) {
            k.f[nfree++] = b;
        } else {
            k.l[tail] = b;
            k.p[b] = tail++;
        }
    }
    ret = Py_BuildValue("nLLnn", nfree, (long long)head, (long long)tail, freed, cached);
done:
    PyMem_Free(zero);
    int64s_close(&seq);
    blocks_release(&k);
    return ret;
}

PyDoc_STRVAR(allocate_doc,
             "allocate(ref, own, free, log, pos, n, nfree, head, tail, no_hash, offload)\n"
             "    -> (blocks, nfree, head, evicted, hashes)\n"
             "n fresh blocks, each with one reference: from the top of the free stack, then the\n"
             "least recently freed cached ones, which forget their hash (the caller checked\n"
             "that there are n). Returns them (native int64s, bytes: array('q').frombytes),\n"
             "the new scalars, how many were evicted\n"
             "and, when offload is true, the hashes they held in that order (else None).");

static PyObject *kv_allocate(PyObject *self, PyObject *args) {
    Blocks k;
    Py_ssize_t n, nfree;
    long long head, tail, no_hash;
    int offload;
    PyObject *out = NULL, *hashes = NULL, *ret = NULL;
    if (!PyArg_ParseTuple(args, "w*w*w*w*w*nnLLLp", &k.ref, &k.own, &k.free, &k.log, &k.pos,
                          &n, &nfree, &head, &tail, &no_hash, &offload))
        return NULL;
    if (blocks_open(&k))
        return NULL;
    if (n < 0 || nfree < 0 || nfree > k.nblocks || head < 0 || tail > k.loglen ||
        head > tail) {
        PyErr_SetString(PyExc_ValueError, "kvcache.allocate: bad counts");
        goto done;
    }
    Py_ssize_t take = n < nfree ? n : nfree, evicted = n - take;
    out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    hashes = offload ? PyList_New(evicted) : (Py_INCREF(Py_None), Py_None);
    if (!out || !hashes)
        goto done;
    /* the LRU's victims first (nothing is written before they are known to be there) */
    int64_t q = head, *victims = NULL;
    if (evicted) {
        victims = PyMem_Malloc(evicted * sizeof(int64_t));
        if (!victims) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t got = 0; got < evicted; q++) {
            if (q >= tail) {
                PyMem_Free(victims);
                PyErr_Format(PyExc_RuntimeError,
                             "kvcache.allocate: LRU log exhausted with %zd of %zd blocks to "
                             "evict", evicted - got, evicted);
                goto done;
            }
            int64_t b = k.l[q];
            if (k.p[b] == q)
                victims[got++] = b;
        }
    }
    int64_t *got = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < take; i++) {
        int64_t b = k.f[nfree - take + i];
        k.r[b] = 1;
        got[i] = b;
    }
    for (Py_ssize_t i = 0; i < evicted; i++) {
        int64_t b = victims[i];
        k.p[b] = -1;
        if (offload)
            PyList_SET_ITEM(hashes, i, PyLong_FromLongLong(k.o[b]));
        k.o[b] = (int64_t)no_hash;
        k.r[b] = 1;
        got[take + i] = b;
    }
    PyMem_Free(victims);
    for (Py_ssize_t i = 0; offload && i < evicted; i++) {
        if (!PyList_GET_ITEM(hashes, i))
            goto done; /* an int could not be made: MemoryError is set */
    }
    ret = Py_BuildValue("OnLnO", out, nfree - take, (long long)(evicted ? q : head), evicted,
                        hashes);
done:
    Py_XDECREF(out);
    Py_XDECREF(hashes);
    blocks_release(&k);
    return ret;
}

PyDoc_STRVAR(held_doc,
             "held(own, blocks, hashes) -> n\n"
             "How many leading blocks still hold the matching hashes: own[blocks[i]] ==\n"
             "hashes[i] for every i < n (hashes at least as long as blocks). own is an int64\n"
             "buffer; blocks and hashes int64 arrays or lists of ints (a list is converted\n"
             "only up to the first block that lost its hash, where it stops).");

static PyObject *kv_held(PyObject *self, PyObject *args) {
    Py_buffer own;
    PyObject *blocks_obj, *hashes_obj, *ret = NULL;
    Int64s blocks = {0}, hashes = {0};
    if (!PyArg_ParseTuple(args, "y*OO", &own, &blocks_obj, &hashes_obj))
        return NULL;
    const int64_t *o = (const int64_t *)own.buf;
    Py_ssize_t nblocks = own.len / 8, i;
    if (own.len % 8) {
        PyErr_SetString(PyExc_ValueError, "kvcache.held: own must be int64");
        goto done;
    }
    if (int64s_open(&blocks, blocks_obj, "kvcache.held", "blocks") ||
        int64s_open(&hashes, hashes_obj, "kvcache.held", "hashes"))
        goto done;
    if (hashes.n < blocks.n) {
        PyErr_SetString(PyExc_ValueError, "kvcache.held: fewer hashes than blocks");
        goto done;
    }
    for (i = 0; i < blocks.n; i++) {
        int64_t b, h;
        if (int64s_get(&blocks, i, &b) || int64s_get(&hashes, i, &h) ||
            check_block(b, nblocks, "kvcache.held"))
            goto done;
        if (o[b] != h)
            break;
    }
    ret = PyLong_FromSsize_t(i);
done:
    int64s_close(&blocks);
    int64s_close(&hashes);
    PyBuffer_Release(&own);
    return ret;
}

PyDoc_STRVAR(idle_doc, "idle(ref, blocks) -> how many of blocks (int64 array or list) have no "
                       "reference");

static PyObject *kv_idle(PyObject *self, PyObject *args) {
    Py_buffer ref;
    PyObject *blocks_obj, *ret = NULL;
    Int64s blocks = {0};
    if (!PyArg_ParseTuple(args, "y*O", &ref, &blocks_obj))
        return NULL;
    const int64_t *r = (const int64_t *)ref.buf;
    Py_ssize_t nblocks = ref.len / 8, idle = 0;
    if (ref.len % 8) {
        PyErr_SetString(PyExc_ValueError, "kvcache.idle: ref must be int64");
        goto done;
    }
    if (int64s_open(&blocks, blocks_obj, "kvcache.idle", "blocks"))
        goto done;
    for (Py_ssize_t i = 0; i < blocks.n; i++) {
        int64_t b;
        if (int64s_get(&blocks, i, &b) || check_block(b, nblocks, "kvcache.idle"))
            goto done;
        idle += r[b] == 0;
    }
    ret = PyLong_FromSsize_t(idle);
done:
    int64s_close(&blocks);
    PyBuffer_Release(&ref);
    return ret;
}

/* ---- the workers' indexes, held for a router -----------------------------------------
 * A prefix-aware router (workbench/sim/router.py, PrefixAware) asks every worker of a
 * cluster, per request, whether its cache holds one block of the prompt (its bound) and
 * looks up the likely winner in full. Called one worker at a time, each call took the two
 * buffers again (~0.5 us, most of the call); Shards takes them once, when the router first
 * sees the workers (the tables are rebuilt and cleared in place, never reallocated), and
 * makes the whole choice in one call: the same rule as PrefixAware._best, its twin. */

typedef struct {
    PyObject_HEAD
    Table *t;
    Py_ssize_t n;
} Shards;

static void Shards_dealloc(Shards *self) {
    for (Py_ssize_t i = 0; i < self->n; i++)
        table_release(&self->t[i]);
    PyMem_Free(self->t);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Shards_init(Shards *self, PyObject *args, PyObject *kw) {
    PyObject *views, *fast;
    if (self->t) {
        PyErr_SetString(PyExc_RuntimeError, "Shards: already initialised");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O", &views))
        return -1;
    fast = PySequence_Fast(views, "Shards: views must be a sequence of (table, own, shift)");
    if (!fast)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    self->t = PyMem_Calloc(n ? n : 1, sizeof(Table));
    if (!self->t) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (; self->n < n; self->n++) {
        Table *t = &self->t[self->n];
        PyObject *view = PySequence_Fast_GET_ITEM(fast, self->n);
        int shift;
        if (!PyTuple_Check(view)) {
            PyErr_SetString(PyExc_TypeError, "Shards: a view is a (table, own, shift) tuple");
            Py_DECREF(fast);
            return -1;
        }
        if (!PyArg_ParseTuple(view, "w*w*i", &t->table, &t->own, &shift) ||
            table_open(t, shift)) {
            Py_DECREF(fast);
            return -1; /* the tables opened so far are released by dealloc */
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* How many of h[0 .. end) the table holds, leading: its prefix hit, the blocks holding it
 * written to out[0 ..). Pipelined a group at a time: the group's slots were prefetched
 * (with the group before), the blocks they name are read and their own[] lines
 * prefetched, the next group's slots are prefetched, then the group is checked in order
 * (two dependent misses a block, overlapped across two groups). */
static Py_ssize_t hit_len(const Table *t, const int64_t *h, Py_ssize_t end, int64_t *out) {
    Py_ssize_t g, j, m;
    for (j = 0; j < end && j < GROUP; j++)
        __builtin_prefetch(&KEY(t, home(t, h[j])));
    for (g = 0; g < end; g += GROUP) {
        m = end - g < GROUP ? end - g : GROUP;
        for (j = g; j < g + m; j++) {
            int64_t b = VAL(t, find(t, h[j]));
            out[j] = b;
            if (b >= 0 && b < t->nblocks)
                __builtin_prefetch(&t->o[b]);
        }
        for (j = g + m; j < end && j < g + m + GROUP; j++)
            __builtin_prefetch(&KEY(t, home(t, h[j])));
        for (j = g; j < g + m; j++) {
            int64_t b = out[j];
            if (b < 0 || b >= t->nblocks || t->o[b] != h[j])
                return j; /* lookup()'s test */
        }
    }
    return end;
}

/* hit_len for a worker whose blocks known[0 .. nk) held h[0 .. nk) when it was last asked
 * (the session's last hit there): a known block still holding its hash is what the lookup
 * would find (own[b] == h: the table maps h to b, and to no other block), so those are
 * checked against own[] alone, every line prefetched at once (one miss each, overlapped,
 * not two dependent ones), up to the first that lost its hash; the walk goes on from
 * there by lookups. */
static Py_ssize_t known_hit_len(const Table *t, const int64_t *h, Py_ssize_t end,
                                const int64_t *known, Py_ssize_t nk, int64_t *out) {
    Py_ssize_t j;
    if (nk > end)
        nk = end;
    for (j = 0; j < nk; j++)
        if (known[j] >= 0 && known[j] < t->nblocks)
            __builtin_prefetch(&t->o[known[j]]);
    for (j = 0; j < nk; j++) {
        int64_t b = known[j];
        if (b < 0 || b >= t->nblocks || t->o[b] != h[j])
            break;
        out[j] = b;
    }
    return j + hit_len(t, h + j, end - j, out + j);
}

/* Warm the cache for the probes the choice's loop makes next: whether each of the workers
 * order[from .. m) holds h[at] and, when at > 0, h[at - 1] (its bound and a tie's). The
 * tables are far larger than the cache, so each probe is two dependent misses (the slot,
 * then own[block]); loading every worker's slot, then every block's own line, overlaps
 * them across workers. Only the cache changes: the loop still decides (and looks up) as
 * before, and a probe whose bound moved meanwhile just misses. */
static void probe_ahead(const Shards *self, const Py_ssize_t *order, Py_ssize_t from,
                        Py_ssize_t m, const int64_t *h, Py_ssize_t at) {
    Py_ssize_t k;
    int c, two = at > 0;
    for (k = from; k < m; k++) {
        const Table *t = &self->t[order[k]];
        for (c = 0; c <= two; c++)
            __builtin_prefetch(&KEY(t, home(t, h[at - c])));
    }
    for (k = from; k < m; k++) {
        const Table *t = &self->t[order[k]];
        for (c = 0; c <= two; c++) {
            int64_t b = VAL(t, find(t, h[at - c]));
            if (b >= 0 && b < t->nblocks)
                __builtin_prefetch(&t->o[b]);
        }
    }
}

/* (q, u, i) < (bq, bu, bi), as Python orders the tuples */
static inline int rest_less(long long q, double u, Py_ssize_t i, long long bq, double bu,
                            Py_ssize_t bi) {
    return q != bq ? q < bq : u != bu ? u < bu : i < bi;
}

PyDoc_STRVAR(choose_doc,
             "choose(hashes, loads, home, overload_threshold, max_kv_usage[, known])\n"
             "  -> (worker, hit)\n"
             "PrefixAware's choice (workbench/sim/router.py): among the workers not overloaded\n"
             "(loads: one (running, waiting, usage) a worker), the home one asked first, the\n"
             "least (-hit, queued, usage, index); -1 when every worker is overloaded. hit: the\n"
             "blocks holding the chosen worker's longest cached prefix of hashes (what\n"
             "kvindex.prefix gives) as int64 bytes, for array('q').frombytes (empty for -1).\n"
             "known: int64 blocks the home worker held for the leading hashes when last asked\n"
             "(its last hit for the session): checked against own[] before any lookup.");

static PyObject *Shards_choose(Shards *self, PyObject *args) {
    PyObject *hashes_obj, *loads, *ret = NULL;
    Py_ssize_t home, threshold, n = self->n;
    double max_usage;
    Int64s hs = {0};
    int64_t *copy = NULL;
    long long *q = NULL;
    double *u = NULL;
    Py_ssize_t *order = NULL;
    int64_t *found = NULL, *cand; /* the best's blocks (its hit) and a candidate's */
    Py_buffer known = {0};
    known.len = 0;
    if (!PyArg_ParseTuple(args, "OO!nnd|y*", &hashes_obj, &PyList_Type, &loads, &home,
                          &threshold, &max_usage, &known))
        return NULL;
    const int64_t *kb = known.buf;
    Py_ssize_t nk = known.len / (Py_ssize_t)sizeof(int64_t);
    if (PyList_GET_SIZE(loads) != n || n < 1 || known.len % 8) {
        PyErr_SetString(PyExc_ValueError, known.len % 8 ? "Shards.choose: known must be int64s"
                                                        : "Shards.choose: one load a worker");
        if (known.buf)
            PyBuffer_Release(&known);
        return NULL;
    }
    if (int64s_open(&hs, hashes_obj, "Shards.choose", "hashes")) {
        if (known.buf)
            PyBuffer_Release(&known);
        return NULL;
    }
    const int64_t *h = hs.buf;
    Py_ssize_t nh = hs.n;
    q = PyMem_Malloc(n * sizeof(*q));
    u = PyMem_Malloc(n * sizeof(*u));
    order = PyMem_Malloc(n * sizeof(*order));
    found = PyMem_Malloc((2 * nh + 1) * sizeof(int64_t));
    cand = found ? found + nh : NULL;
    if (!h && nh) { /* a list: its ints read once */
        copy = PyMem_Malloc(nh * sizeof(int64_t));
        if (copy)
            for (Py_ssize_t i = 0; i < nh; i++)
                if (int64s_get(&hs, i, &copy[i]))
                    goto done;
        h = copy;
    }
    if (!q || !u || !order || !found || (nh && !h)) {
        PyErr_NoMemory();
        goto done;
    }
    long long floor = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *l = PyList_GET_ITEM(loads, i);
        if (!PyTuple_Check(l) || PyTuple_GET_SIZE(l) != 3) {
            PyErr_SetString(PyExc_TypeError, "Shards.choose: a load is (running, waiting, usage)");
            goto done;
        }
        q[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(l, 0)) + PyLong_AsLongLong(PyTuple_GET_ITEM(l, 1));
        u[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(l, 2));
        if (PyErr_Occurred())
            goto done;
        if (!i || q[i] < floor)
            floor = q[i];
    }
    Py_ssize_t m = 0;
    int home_open = home >= 0 && home < n && q[home] - floor <= threshold && u[home] <= max_usage;
    if (home_open)
        order[m++] = home;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i != home && q[i] - floor <= threshold && u[i] <= max_usage)
            order[m++] = i;
    }
    if (!m) {
        ret = Py_BuildValue("(ny#)", (Py_ssize_t)-1, "", (Py_ssize_t)0);
        goto done;
    }
    /* the loop of PrefixAware._best: a worker is looked up in full only when it can win */
    Py_ssize_t best = order[0], best_hit = 0;
    int have = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t i = order[k], hit;
        const Table *t = &self->t[i];
        if (!nh) {
            hit = 0;
        } else if (!have || (best_hit < nh && lookup(t, h[best_hit]) >= 0)) {
            hit = i == home && nk ? known_hit_len(t, h, nh, kb, nk, cand)
                                  : hit_len(t, h, nh, cand);
        } else if (!rest_less(q[i], u[i], i, q[best], u[best], best)) {
            continue; /* at most a tie, and it would lose it */
        } else if (best_hit && lookup(t, h[best_hit - 1]) >= 0) {
            hit = hit_len(t, h, best_hit, cand);
        } else if (best_hit) {
            continue; /* fewer than best_hit blocks */
        } else {
            hit = 0;
        }
        if (!have || hit > best_hit ||
            (hit == best_hit && rest_less(q[i], u[i], i, q[best], u[best], best))) {
            best = i;
            best_hit = hit;
            have = 1;
            int64_t *swap = found; /* its blocks, when it has any, are cand's */
            found = cand;
            cand = swap;
        }
        if (!k && nh && m > 1 && best_hit < nh) /* the others are probed at this bound */
            probe_ahead(self, order, 1, m, h, best_hit);
    }
    /* the winner's hit as its blocks (admission starts from them): every lookup of its
       first best_hit hashes holds (best_hit is its longest hit, whatever bound found it);
       int64 bytes (array('q').frombytes), no Python int a block */
    PyObject *hit = PyBytes_FromStringAndSize(NULL, best_hit * (Py_ssize_t)sizeof(int64_t));
    if (!hit)
        goto done;
    memcpy(PyBytes_AS_STRING(hit), found, best_hit * sizeof(int64_t));
    ret = Py_BuildValue("(nN)", best, hit);
done:
    PyMem_Free(found < cand ? found : cand); /* the one allocation, whichever half is which */
    PyMem_Free(copy);
    PyMem_Free(q);
    PyMem_Free(u);
    PyMem_Free(order);
    int64s_close(&hs);
    if (known.buf)
        PyBuffer_Release(&known);
    return ret;
}

static PyMethodDef Shards_methods[] = {
    {"choose", (PyCFunction)Shards_choose, METH_VARARGS, choose_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ShardsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "workbench.sim._kvcache.Shards",
    .tp_basicsize = sizeof(Shards),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Shards(views): the workers' hash indexes, each (table, own, shift), held for "
              "a router's choose().",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Shards_init,
    .tp_dealloc = (destructor)Shards_dealloc,
    .tp_methods = Shards_methods,
};

static PyMethodDef methods[] = {
    {"acquire", kv_acquire, METH_VARARGS, acquire_doc},
    {"release", kv_release, METH_VARARGS, release_doc},
    {"allocate", kv_allocate, METH_VARARGS, allocate_doc},
    {"get", kv_get, METH_VARARGS, get_doc},
    {"prefix", kv_prefix, METH_VARARGS, prefix_doc},
    {"commit", kv_commit, METH_VARARGS, commit_doc},
    {"rebuild", kv_rebuild, METH_VARARGS, rebuild_doc},
    {"held", kv_held, METH_VARARGS, held_doc},
    {"idle", kv_idle, METH_VARARGS, idle_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kvcache",
    "The KV manager's inner loops, compiled (workbench/sim/kvcache.py, kvindex.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kvcache(void) {
    if (PyType_Ready(&ShardsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&ShardsType);
    if (PyModule_AddObject(m, "Shards", (PyObject *)&ShardsType) < 0) {
        Py_DECREF(&ShardsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
