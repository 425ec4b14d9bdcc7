/* The implicit decoders' events, compiled: workbench.sim._decoders.
 *
 * The scheduler's implicit decoders (docs/virtual-time.md, "Implicit decode") advance one
 * token a step without being visited; each has three events: the step its last block
 * fills (a commit), the step it needs a new block (a grow) and the step it emits its
 * last token (a finish). This type holds, per implicit decoder (a *slot*), what those
 * events read and write, as int64 columns, and the two event queues as binary heaps
 * ordered by (step, admission rank), so a step's due events come out in running order.
 * The Python twin, the reference, is workbench/sim/decoders.py (``PyDecoders``): the same
 * methods, the same state, the same answers; tests/sim/test_sim_compiled_twin.py runs both.
 *
 * Per slot: co = num_computed - tb and fin = the step of its last token (both constant
 * while it is implicit), next_full, committed, cap (its capacity in tokens), rank, and a
 * generation per queue (an entry filed before the last re-filing is stale). Its block
 * ids and keys stay the sequence's own int64 arrays (array('q')): a grow appends to the
 * blocks, a fill reads both.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t step, rank, slot, gen;
} Event;

typedef struct {
    Event *e;
    Py_ssize_t n, cap;
} Heap;

static inline int ev_less(const Event *a, const Event *b) {
    if (a->step != b->step)
        return a->step < b->step;
    if (a->rank != b->rank)
        return a->rank < b->rank;
    if (a->slot != b->slot)
        return a->slot < b->slot;
    return a->gen < b->gen;
}

static int heap_push(Heap *h, Event ev) {
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 64;
        Event *e = PyMem_Realloc(h->e, (size_t)cap * sizeof(Event));
        if (!e) {
            PyErr_NoMemory();
            return -1;
        }
        h->e = e;
        h->cap = cap;
    }
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!ev_less(&ev, &h->e[p]))
            break;
        h->e[i] = h->e[p];
        i = p;
    }
    h->e[i] = ev;
    return 0;
}

static Event heap_pop(Heap *h) {
    Event top = h->e[0];
    Event last = h->e[--h->n];
    Py_ssize_t i = 0, n = h->n;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && ev_less(&h->e[c + 1], &h->e[c]))
            c++;
        if (!ev_less(&h->e[c], &last))
            break;
        h->e[i] = h->e[c];
        i = c;
    }
    if (n)
        h->e[i] = last;
    return top;
}

typedef struct {
    int64_t co, fin, next_full, committed, cap, rank, genf, geng;
    PyObject *seq, *blocks, *hashes; /* NULL: a free slot */
} Slot;

typedef struct {
    PyObject_HEAD
    int64_t bs;
    Slot *s;
    Py_ssize_t nslots, cap;
    Py_ssize_t *free_; /* free slot ids, a stack */
    Py_ssize_t nfree;
    Heap fills, grows;
    Py_ssize_t *pending; /* the slots of the grows taken by the last grow_due, in order */
    Py_ssize_t npending, cappending;
} Decoders;

static PyObject *str_append, *str_ensure_hashes;

static void slot_drop(Slot *s) {
    Py_CLEAR(s->seq);
    Py_CLEAR(s->blocks);
    Py_CLEAR(s->hashes);
}

static int arm_fill(Decoders *d, Py_ssize_t i) {
    Slot *s = &d->s[i];
    s->genf++;
    int64_t fill = s->next_full - s->co - 1;
    if (s->fin < fill)
        fill = s->fin;
    Event ev = {fill, s->rank, i, s->genf};
    return heap_push(&d->fills, ev);
}

static int arm_grow(Decoders *d, Py_ssize_t i) {
    Slot *s = &d->s[i];
    s->geng++;
    int64_t grow = s->cap - s->co;
    if (grow > s->fin)
        return 0;
    Event ev = {grow, s->rank, i, s->geng};
    return heap_push(&d->grows, ev);
}

static int Decoders_init(Decoders *self, PyObject *args, PyObject *kw) {
    long long bs;
    if (!PyArg_ParseTuple(args, "L", &bs))
        return -1;
    if (bs < 1) {
        PyErr_SetString(PyExc_ValueError, "Decoders: block_size must be >= 1");
        return -1;
    }
    self->bs = bs;
    return 0;
}

static void Decoders_clear_all(Decoders *self) {
    for (Py_ssize_t i = 0; i < self->nslots; i++)
        slot_drop(&self->s[i]);
    self->nfree = 0;
    for (Py_ssize_t i = self->nslots - 1; i >= 0; i--)
        self->free_[self->nfree++] = i;
    self->fills.n = self->grows.n = 0;
    self->npending = 0;
}

/* The slots hold their sequences, which may reach back here (a handle, its engine, the
 * scheduler): the cyclic GC sees those references, as it saw the Python twin's. */
static int Decoders_traverse(Decoders *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < self->nslots; i++) {
        Py_VISIT(self->s[i].seq);
        Py_VISIT(self->s[i].blocks);
        Py_VISIT(self->s[i].hashes);
    }
    return 0;
}

static int Decoders_tp_clear(Decoders *self) {
    Decoders_clear_all(self);
    return 0;
}

static void Decoders_dealloc(Decoders *self) {
    PyObject_GC_UnTrack(self);
    for (Py_ssize_t i = 0; i < self->nslots; i++)
        slot_drop(&self->s[i]);
    PyMem_Free(self->s);
    PyMem_Free(self->free_);
    PyMem_Free(self->fills.e);
    PyMem_Free(self->grows.e);
    PyMem_Free(self->pending);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(add_doc, "add(seq, blocks, hashes, rank, co, fin, next_full, committed, cap) -> slot\n"
                      "A request turns implicit: hold its fields and file its fill and grow.");

static PyObject *Decoders_add(Decoders *self, PyObject *args) {
    PyObject *seq, *blocks, *hashes;
    long long rank, co, fin, next_full, committed, cap;
    if (!PyArg_ParseTuple(args, "OOOLLLLLL", &seq, &blocks, &hashes, &rank, &co, &fin,
                          &next_full, &committed, &cap))
        return NULL;
    if (!self->nfree) {
        Py_ssize_t n = self->cap ? 2 * self->cap : 64;
        Slot *s = PyMem_Realloc(self->s, (size_t)n * sizeof(Slot));
        if (!s)
            return PyErr_NoMemory();
        self->s = s;
        Py_ssize_t *f = PyMem_Realloc(self->free_, (size_t)n * sizeof(Py_ssize_t));
        if (!f)
            return PyErr_NoMemory();
        self->free_ = f;
        Py_ssize_t *p = PyMem_Realloc(self->pending, (size_t)n * sizeof(Py_ssize_t));
        if (!p)
            return PyErr_NoMemory();
        self->pending = p;
        self->cappending = n;
        memset(&self->s[self->cap], 0, (size_t)(n - self->cap) * sizeof(Slot));
        for (Py_ssize_t i = n - 1; i >= self->cap; i--)
            self->free_[self->nfree++] = i;
        self->nslots = self->cap = n;
    }
    Py_ssize_t i = self->free_[--self->nfree];
    Slot *s = &self->s[i];
    s->co = co;
    s->fin = fin;
    s->next_full = next_full;
    s->committed = committed;
    s->cap = cap;
    s->rank = rank;
    Py_INCREF(seq);
    Py_INCREF(blocks);
    Py_INCREF(hashes);
    s->seq = seq;
    s->blocks = blocks;
    s->hashes = hashes;
    if (arm_fill(self, i) || arm_grow(self, i))
        return NULL;
    return PyLong_FromSsize_t(i);
}

static int check_slot(Decoders *self, Py_ssize_t i) {
    if (i < 0 || i >= self->nslots || !self->s[i].seq) {
        PyErr_Format(PyExc_IndexError, "Decoders: slot %zd is not in use", i);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(remove_doc, "remove(slot) -> (next_full, committed, cap)\n"
                         "A request turns explicit: its events turn stale, its slot is freed.");

static PyObject *Decoders_remove(Decoders *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (check_slot(self, i))
        return NULL;
    Slot *s = &self->s[i];
    s->genf++;
    s->geng++;
    PyObject *out = Py_BuildValue("(LLL)", (long long)s->next_full, (long long)s->committed,
                                  (long long)s->cap);
    slot_drop(s);
    self->free_[self->nfree++] = i;
    return out;
}

PyDoc_STRVAR(clear_doc, "clear()\nNo implicit decoder left: every slot freed, both queues emptied.");

static PyObject *Decoders_clear(Decoders *self, PyObject *unused) {
    Decoders_clear_all(self);
    Py_RETURN_NONE;
}

/* Pop the entries of step `tick` from h (and any stale one before it); the valid ones'
 * slots (their generation the slot's, of the grow queue if `grow`) go to out, in order. */
static Py_ssize_t take_due(Decoders *self, Heap *h, int64_t tick, int grow, Py_ssize_t *out) {
    Py_ssize_t k = 0;
    while (h->n && h->e[0].step <= tick) {
        Event ev = heap_pop(h);
        Slot *s = &self->s[ev.slot];
        int valid = s->seq && (grow ? s->geng : s->genf) == ev.gen;
        if (!valid)
            continue;
        if (ev.step < tick) {
            PyErr_Format(PyExc_RuntimeError, "Decoders: an event of step %lld was not handled "
                         "by step %lld", (long long)ev.step, (long long)tick);
            return -1;
        }
        out[k++] = (Py_ssize_t)ev.slot;
    }
    return k;
}

PyDoc_STRVAR(grow_due_doc, "grow_due(tick) -> k\nTake the grows due at step `tick`: how many "
                           "decoders need a block now (assign gives them theirs).");

static PyObject *Decoders_grow_due(Decoders *self, PyObject *arg) {
    long long tick = PyLong_AsLongLong(arg);
    if (tick == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t k = take_due(self, &self->grows, tick, 1, self->pending);
    if (k < 0)
        return NULL;
    self->npending = k;
    return PyLong_FromSsize_t(k);
}

PyDoc_STRVAR(assign_doc, "assign(got, at, k)\nThe k blocks got[at:at + k] (int64s) to the grows "
                         "taken by grow_due, one each, in order; each re-files its next grow.");

static PyObject *Decoders_assign(Decoders *self, PyObject *args) {
    PyObject *got;
    Py_ssize_t at, k;
    if (!PyArg_ParseTuple(args, "Onn", &got, &at, &k))
        return NULL;
    if (k != self->npending) {
        PyErr_Format(PyExc_RuntimeError, "Decoders.assign: %zd blocks for %zd grows", k,
                     self->npending);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(got, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS))
        return NULL;
    if (view.itemsize != 8 || at < 0 || (at + k) * 8 > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "Decoders.assign: got must hold int64 blocks at..at+k");
        return NULL;
    }
    const int64_t *b = (const int64_t *)view.buf;
    for (Py_ssize_t j = 0; j < k; j++) {
        Py_ssize_t i = self->pending[j];
        Slot *s = &self->s[i];
        PyObject *v = PyLong_FromLongLong(b[at + j]);
        PyObject *r = v ? PyObject_CallMethodOneArg(s->blocks, str_append, v) : NULL;
        Py_XDECREF(v);
        if (!r) {
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(r);
        s->cap += self->bs;
        if (arm_grow(self, i)) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    self->npending = 0;
    Py_RETURN_NONE;
}

/* Append blocks[lo:hi] of an int64 buffer object to out (a bytearray). */
static int gather(PyObject *obj, int64_t lo, int64_t hi, PyObject *out) {
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE))
        return -1;
    if (hi * 8 > v.len) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_RuntimeError, "Decoders.fill: a sequence holds fewer blocks "
                                            "than it filled");
        return -1;
    }
    Py_ssize_t n = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, n + (hi - lo) * 8)) {
        PyBuffer_Release(&v);
        return -1;
    }
    memcpy(PyByteArray_AS_STRING(out) + n, (const char *)v.buf + lo * 8, (size_t)(hi - lo) * 8);
    PyBuffer_Release(&v);
    return 0;
}

static Py_ssize_t buf_items(PyObject *obj) {
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE))
        return -1;
    Py_ssize_t n = v.len / 8;
    PyBuffer_Release(&v);
    return n;
}

PyDoc_STRVAR(fill_doc, "fill(tick, blocks, hashes) -> finished\nApply step `tick`'s fill events "
                       "(the step just completed): each decoder whose block filled appends its "
                       "newly full blocks and their keys to the bytearrays `blocks`, `hashes`; "
                       "those that emitted their last token are returned (sequences, in "
                       "order); the others re-file their next fill.");

/* Step `tick`'s fills (fill's body): the finished sequences go to `done`, or, with `done`
 * NULL, a finish is an error (a span has none: run). 0, or -1 with an exception set. */
static int do_fill(Decoders *self, int64_t tick, PyObject *fb, PyObject *fh, PyObject *done) {
    Heap *h = &self->fills;
    int64_t bs = self->bs;
    while (h->n && h->e[0].step <= tick) {
        Event ev = heap_pop(h);
        Py_ssize_t i = (Py_ssize_t)ev.slot;
        Slot *s = &self->s[i];
        if (!s->seq || s->genf != ev.gen)
            continue;
        if (ev.step < tick) {
            PyErr_Format(PyExc_RuntimeError, "Decoders: a fill of step %lld was not handled "
                         "by step %lld", (long long)ev.step, (long long)tick);
            return -1;
        }
        int64_t computed = s->co + tick + 1;
        if (computed >= s->next_full) {
            int64_t full = computed / bs;
            Py_ssize_t have = buf_items(s->hashes);
            if (have < 0)
                return -1;
            if (have < full) { /* keys from token ids: hashed as the block fills */
                PyObject *r = PyObject_CallMethod(s->seq, "ensure_hashes", "LL", (long long)bs,
                                                  (long long)(computed + 1));
                if (!r)
                    return -1;
                Py_DECREF(r);
            }
            if (gather(s->blocks, s->committed, full, fb) ||
                gather(s->hashes, s->committed, full, fh))
                return -1;
            s->committed = full;
            s->next_full = (full + 1) * bs;
        }
        if (tick >= s->fin) {
            if (!done) {
                PyErr_Format(PyExc_RuntimeError, "Decoders.run: a request finished inside "
                             "a span (step %lld)", (long long)tick);
                return -1;
            }
            if (PyList_Append(done, s->seq))
                return -1;
        } else if (arm_fill(self, i)) {
            return -1;
        }
    }
    return 0;
}

static PyObject *Decoders_fill(Decoders *self, PyObject *args) {
    long long tick;
    PyObject *fb, *fh;
    if (!PyArg_ParseTuple(args, "LO!O!", &tick, &PyByteArray_Type, &fb, &PyByteArray_Type, &fh))
        return NULL;
    PyObject *done = PyList_New(0);
    if (!done)
        return NULL;
    if (do_fill(self, tick, fb, fh, done)) {
        Py_DECREF(done);
        return NULL;
    }
    return done;
}

/* Give the pending grows their blocks b[0 .. npending), one each in order (assign's body). */
static int give(Decoders *self, const int64_t *b) {
    for (Py_ssize_t j = 0; j < self->npending; j++) {
        Slot *s = &self->s[self->pending[j]];
        PyObject *v = PyLong_FromLongLong(b[j]);
        PyObject *res = v ? PyObject_CallMethodOneArg(s->blocks, str_append, v) : NULL;
        Py_XDECREF(v);
        if (!res)
            return -1;
        Py_DECREF(res);
        s->cap += self->bs;
        if (arm_grow(self, self->pending[j]))
            return -1;
    }
    self->npending = 0;
    return 0;
}

static int64_t heap_top(Heap *h);

PyDoc_STRVAR(run_doc,
             "run(stop, blocks, hashes, ref, own, free, log, pos, nfree, head, tail, no_hash,\n"
             "    evict) -> (at, nfree, head, evicted, k)\n"
             "Apply the events of a span's steps up to stop-1 in step order, as fill and\n"
             "grow_due + assign would one step at a time: each step's fills (their blocks and\n"
             "keys appended to the bytearrays; a finish is an error: a span has none), then\n"
             "the grows of the next step's plan, given blocks as the KV manager's allocation\n"
             "(kvcache.c) gives them over its arrays: from the top of the free stack\n"
             "free[:nfree], then, with `evict`, the least recently freed cached blocks of the\n"
             "LRU log [head, tail) (their hash dropped) unless one holds a hash among the\n"
             "uncommitted `hashes` (committed first, it would keep that hash findable). Stops\n"
             "at a step `at` whose next plan's k grows it cannot serve so: they are taken (as\n"
             "grow_due) for the caller to commit, allocate and assign, then run goes on; else\n"
             "at is stop and k 0. nfree, head: where they are now; evicted: blocks evicted.");

static PyObject *Decoders_run(Decoders *self, PyObject *args) {
    long long stop, head, tail, no_hash;
    PyObject *fb, *fh;
    Py_buffer ref, own, fr, log, pos;
    Py_ssize_t nfree;
    int evict;
    if (!PyArg_ParseTuple(args, "LO!O!w*w*w*w*w*nLLLp", &stop, &PyByteArray_Type, &fb,
                          &PyByteArray_Type, &fh, &ref, &own, &fr, &log, &pos, &nfree, &head,
                          &tail, &no_hash, &evict))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t nb = ref.len / 8, loglen = log.len / 8, nvict = 0;
    if (ref.itemsize != 8 || own.len != ref.len || fr.len != ref.len || pos.len != ref.len ||
        log.itemsize != 8 || nfree < 0 || nfree > nb || head < 0 || head > tail ||
        tail > loglen) {
        PyErr_SetString(PyExc_ValueError, "Decoders.run: the block arrays must be int64, "
                                          "num_blocks long; 0 <= nfree, head <= tail");
        goto done;
    }
    int64_t *r = (int64_t *)ref.buf, *o = (int64_t *)own.buf, *l = (int64_t *)log.buf;
    int64_t *p = (int64_t *)pos.buf;
    const int64_t *f = (const int64_t *)fr.buf;
    int64_t at = stop, q = head;
    Py_ssize_t k = 0, evicted = 0;
    int64_t got[64];
    for (;;) {
        int64_t fs = heap_top(&self->fills), gs = heap_top(&self->grows) - 1;
        int64_t e = fs < gs ? fs : gs;
        if (e >= stop)
            break;
        if (fs == e && do_fill(self, e, fb, fh, NULL))
            goto done;
        if (gs != e)
            continue;
        k = take_due(self, &self->grows, e + 1, 1, self->pending);
        if (k < 0)
            goto done;
        self->npending = k;
        Py_ssize_t fresh = k < nfree ? k : nfree, need = k - fresh;
        if (k > 64 || (need && !evict)) { /* the caller allocates */
            at = e;
            break;
        }
        /* the LRU's victims first (nothing is written before they are all known) */
        nvict = 0;
        int64_t qq = q;
        while (nvict < need) {
            if (qq >= tail) {
                PyErr_SetString(PyExc_RuntimeError, "Decoders.run: the LRU log ran out");
                goto done;
            }
            int64_t b = l[qq];
            if (b < 0 || b >= nb) {
                PyErr_SetString(PyExc_ValueError, "Decoders.run: a logged block out of range");
                goto done;
            }
            if (p[b] == qq)
                got[fresh + nvict++] = b;
            qq++;
        }
        int clash = 0; /* a victim's hash among the fills not yet committed */
        const int64_t *pend = (const int64_t *)PyByteArray_AS_STRING(fh);
        Py_ssize_t npend = PyByteArray_GET_SIZE(fh) / 8;
        for (Py_ssize_t j = 0; j < nvict && !clash; j++) {
            int64_t h = o[got[fresh + j]];
            for (Py_ssize_t m = 0; m < npend; m++) {
                if (pend[m] == h) {
                    clash = 1;
                    break;
                }
            }
        }
        if (clash) {
            at = e;
            break;
        }
        for (Py_ssize_t j = 0; j < fresh; j++) {
            int64_t b = f[nfree - fresh + j];
            if (b < 0 || b >= nb) {
                PyErr_SetString(PyExc_ValueError, "Decoders.run: a free block out of range");
                goto done;
            }
            r[b] = 1;
            got[j] = b;
        }
        for (Py_ssize_t j = 0; j < nvict; j++) {
            int64_t b = got[fresh + j];
            p[b] = -1;
            o[b] = (int64_t)no_hash;
            r[b] = 1;
        }
        nfree -= fresh;
        if (nvict)
            q = qq;
        evicted += nvict;
        if (give(self, got))
            goto done;
        k = 0;
    }
    out = Py_BuildValue("(LnLnn)", (long long)at, nfree, (long long)q, evicted,
                        at < stop ? k : (Py_ssize_t)0);
done:
    PyBuffer_Release(&ref);
    PyBuffer_Release(&own);
    PyBuffer_Release(&fr);
    PyBuffer_Release(&log);
    PyBuffer_Release(&pos);
    return out;
}

static int64_t heap_top(Heap *h) { return h->n ? h->e[0].step : ((int64_t)1 << 62); }

PyDoc_STRVAR(next_grow_doc, "next_grow() -> step\nThe earliest grow filed (stale ones too), "
                            "or 2**62.");
PyDoc_STRVAR(next_fill_doc, "next_fill() -> step\nThe earliest fill filed (stale ones too), "
                            "or 2**62.");

static PyObject *Decoders_next_grow(Decoders *self, PyObject *unused) {
    return PyLong_FromLongLong(heap_top(&self->grows));
}

static PyObject *Decoders_next_fill(Decoders *self, PyObject *unused) {
    return PyLong_FromLongLong(heap_top(&self->fills));
}

static PyMethodDef Decoders_methods[] = {
    {"add", (PyCFunction)Decoders_add, METH_VARARGS, add_doc},
    {"remove", (PyCFunction)Decoders_remove, METH_O, remove_doc},
    {"clear", (PyCFunction)Decoders_clear, METH_NOARGS, clear_doc},
    {"grow_due", (PyCFunction)Decoders_grow_due, METH_O, grow_due_doc},
    {"assign", (PyCFunction)Decoders_assign, METH_VARARGS, assign_doc},
    {"fill", (PyCFunction)Decoders_fill, METH_VARARGS, fill_doc},
    {"run", (PyCFunction)Decoders_run, METH_VARARGS, run_doc},
    {"next_grow", (PyCFunction)Decoders_next_grow, METH_NOARGS, next_grow_doc},
    {"next_fill", (PyCFunction)Decoders_next_fill, METH_NOARGS, next_fill_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DecodersType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "workbench.sim._decoders.Decoders",
    .tp_basicsize = sizeof(Decoders),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Decoders_traverse,
    .tp_clear = (inquiry)Decoders_tp_clear,
    .tp_doc = "The implicit decoders' state and event queues (workbench/sim/decoders.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decoders_init,
    .tp_dealloc = (destructor)Decoders_dealloc,
    .tp_methods = Decoders_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_decoders",
    "The implicit decoders' events, compiled (workbench/sim/decoders.py is the twin).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__decoders(void) {
    str_append = PyUnicode_InternFromString("append");
    str_ensure_hashes = PyUnicode_InternFromString("ensure_hashes");
    if (!str_append || !str_ensure_hashes || PyType_Ready(&DecodersType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&DecodersType);
    if (PyModule_AddObject(m, "Decoders", (PyObject *)&DecodersType) < 0) {
        Py_DECREF(&DecodersType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
