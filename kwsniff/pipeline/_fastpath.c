/* The common-case packet path of kwsniff.pipeline.session.Session.packet, compiled.
 *
 * One captured Ethernet (or Linux cooked)/IPv4/TCP frame of a connection the session already follows, carrying the
 * ACK flag and no SYN, FIN or RST, not a copy of a recent frame, and either a pure acknowledgement
 * or the next in-order bytes of its direction with nothing waiting out of order in either
 * direction: that is nearly every packet of a real capture, and this module does for it exactly
 * what the Python code does, in the same order, on the same Python objects (the connection's
 * counters, its reassemblers' fields, the frame splitter's partial frame). The bytes go on to the
 * reassembler's on_data as the same memoryview the Python path makes; a piece in the middle of a
 * frame (FrameSplitter.data's first case) is kept here without a Python call.
 *
 * Every other packet (a new flow, SYN/FIN/RST, out of order, a gap, a copy, a tunnel, a fragment,
 * IPv6, other link types, a truncated frame) is handed to the pure-Python Session.packet untouched:
 * the decision is made before any state changes, so Python stays the single source of truth for
 * anything unusual and both paths give the same tables byte for byte (tests/test_fastpath.py).
 *
 * Python objects' __slots__ are read and written through their member descriptors' offsets
 * (checked at start: a slot that is not an object slot disables the fast path).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#ifdef Py_T_OBJECT_EX
#define SLOT_OBJECT Py_T_OBJECT_EX
#else
#define SLOT_OBJECT T_OBJECT_EX
#endif

/* TCP flags (RFC 9293 section 3.1). */
#define FIN 0x01
#define SYN 0x02
#define RST 0x04
#define ACK 0x10
#define LINKTYPE_ETHERNET 1
#define LINKTYPE_LINUX_SLL 113
#define ETHERNET_HEADER 14
#define SLL_HEADER 16

enum {
    /* Connection */
    C_CLOSED, C_RECENT, C_TS_LAST, C_PACKETS, C_RS, C_WIRE_BYTES,
    /* TcpReassembler */
    R_NEXT_SEQ, R_OOO, R_LAST_ACK, R_SEGMENTS, R_BYTES_DELIVERED, R_ON_DATA,
    /* FrameSplitter */
    S_NEED, S_BODY, S_BODY_TS, S_HELD,
    N_SLOTS
};

static const char *slot_names[N_SLOTS] = {
    "closed", "recent", "ts_last", "packets", "rs", "wire_bytes",
    "next_seq", "_ooo", "_last_ack", "segments", "bytes_delivered", "on_data",
    "_need", "_body", "_body_ts", "_held",
};

typedef struct {
    PyObject_HEAD
    PyObject *session;
    PyObject *pure;            /* Session.packet, the pure-Python function */
    PyTypeObject *conn_type;   /* Connection */
    PyTypeObject *rs_type;     /* TcpReassembler */
    PyTypeObject *split_type;  /* FrameSplitter */
    PyObject *split_data;      /* FrameSplitter.data, the function */
    PyObject *flows;           /* session.flows (a dict, never replaced) */
    PyObject *stats;           /* session.stats */
    PyObject *held;            /* session.held: the reassembly pool's [bytes] */
    long long copy_within_us;
    long long forget_closed_us;
    Py_ssize_t off[N_SLOTS];
    unsigned long long fast, slow;  /* packets each way (for tests and the bench) */
} FastPath;

static PyObject *s_packets, *s_held_trigger, *s_swept, *s_evict_largest, *s_sweep;

#define SLOT(obj, i) (*(PyObject **)((char *)(obj) + self->off[i]))

/* Replace a slot's value with a new reference (stolen). */
static inline void
slot_set(FastPath *self, PyObject *obj, int i, PyObject *value)
{
    PyObject **p = (PyObject **)((char *)obj + self->off[i]);
    PyObject *old = *p;
    *p = value;
    Py_XDECREF(old);
}

static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *off)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name);
    if (d == NULL)
        return -1;
    if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || ((PyMemberDescrObject *)d)->d_member->type != SLOT_OBJECT) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, name);
        Py_DECREF(d);
        return -1;
    }
    *off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return 0;
}

static inline unsigned
be16(const unsigned char *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static inline unsigned long
be32(const unsigned char *p)
{
    return (unsigned long)p[0] << 24 | (unsigned long)p[1] << 16 | (unsigned long)p[2] << 8 | p[3];
}

/* obj[i] += by for a list of Python ints; -1 on error. */
static inline int
list_add(PyObject *list, Py_ssize_t i, long long by)
{
    long long v = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    PyObject *n = PyLong_FromLongLong(v + by);
    if (n == NULL)
        return -1;
    PyList_SetItem(list, i, n);
    return 0;
}

static inline int
slot_add(FastPath *self, PyObject *obj, int i, long long by)
{
    long long v = PyLong_AsLongLong(SLOT(obj, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    PyObject *n = PyLong_FromLongLong(v + by);
    if (n == NULL)
        return -1;
    slot_set(self, obj, i, n);
    return 0;
}

static inline int
is_int_list(PyObject *o)
{
    return PyList_CheckExact(o) && PyList_GET_SIZE(o) == 2 && PyLong_CheckExact(PyList_GET_ITEM(o, 0))
           && PyLong_CheckExact(PyList_GET_ITEM(o, 1));
}

static PyObject *
slow(FastPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "packet() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    self->slow++;
    PyObject *call[5] = {NULL, self->session, NULL, NULL, NULL};
    for (Py_ssize_t i = 0; i < nargs; i++)
        call[i + 2] = args[i];
    return PyObject_Vectorcall(self->pure, call + 1, (nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* The last part of Session.packet: memory pressure and the periodic sweep. */
static PyObject *
after_packet(FastPath *self, PyObject *ts_o, long long ts)
{
    PyObject *trigger = PyObject_GetAttr(self->session, s_held_trigger);
    if (trigger == NULL)
        return NULL;
    int over = PyObject_RichCompareBool(PyList_GET_ITEM(self->held, 0), trigger, Py_GT);
    Py_DECREF(trigger);
    if (over < 0)
        return NULL;
    if (over) {
        PyObject *r = PyObject_CallMethodOneArg(self->session, s_evict_largest, ts_o);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    PyObject *swept_o = PyObject_GetAttr(self->session, s_swept);
    if (swept_o == NULL)
        return NULL;
    long long swept = PyLong_AsLongLong(swept_o);
    Py_DECREF(swept_o);
    if (swept == -1 && PyErr_Occurred())
        return NULL;
    if (ts - swept > self->forget_closed_us) {
        PyObject *r = PyObject_CallMethodOneArg(self->session, s_sweep, ts_o);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

/* Deliver in-order bytes to the reassembler's on_data, as TcpReassembler.segment's hot path does. */
static int
deliver(FastPath *self, PyObject *on_data, PyObject *ts_o, PyObject *data_o, Py_ssize_t start,
        Py_ssize_t end)
{
    PyObject *whole = PyMemoryView_FromObject(data_o);
    if (whole == NULL)
        return -1;
    PyObject *view = PySequence_GetSlice(whole, start, end);
    Py_DECREF(whole);
    if (view == NULL)
        return -1;
    Py_ssize_t n = end - start;
    if (PyMethod_Check(on_data) && PyMethod_GET_FUNCTION(on_data) == self->split_data
        && Py_IS_TYPE(PyMethod_GET_SELF(on_data), self->split_type)) {
        /* FrameSplitter.data's first case: the middle of a frame begun in an earlier chunk. */
        PyObject *sp = PyMethod_GET_SELF(on_data);
        PyObject *need_o = SLOT(sp, S_NEED), *body = SLOT(sp, S_BODY), *body_ts = SLOT(sp, S_BODY_TS),
                 *held = SLOT(sp, S_HELD);
        if (need_o && body && body_ts && held && PyLong_CheckExact(need_o) && PyList_CheckExact(body)
            && PyList_CheckExact(body_ts) && PyList_CheckExact(held) && PyList_GET_SIZE(held) >= 1) {
            long long need = PyLong_AsLongLong(need_o);
            if (need == -1 && PyErr_Occurred()) {
                Py_DECREF(view);
                return -1;
            }
            if (0 < n && n < need) {
                int rc = PyList_Append(body, view);
                Py_DECREF(view);
                if (rc < 0 || PyList_Append(body_ts, ts_o) < 0)
                    return -1;
                PyObject *left = PyLong_FromLongLong(need - n);
                if (left == NULL)
                    return -1;
                slot_set(self, sp, S_NEED, left);
                return list_add(held, 0, n);
            }
        }
    }
    PyObject *call[3] = {NULL, ts_o, view};
    PyObject *r = PyObject_Vectorcall(on_data, call + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(view);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *
fast_packet(FastPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return slow(self, args, nargs);
    PyObject *ts_o = args[0], *lt_o = args[1], *data_o = args[2];
    if (!PyLong_CheckExact(ts_o) || !PyLong_CheckExact(lt_o) || !PyBytes_CheckExact(data_o))
        return slow(self, args, nargs);
    int overflow;
    long lt = PyLong_AsLongAndOverflow(lt_o, &overflow);
    long long ts = PyLong_AsLongLongAndOverflow(ts_o, &overflow);
    if (overflow || (ts == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return slow(self, args, nargs);
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(data_o);
    Py_ssize_t len = PyBytes_GET_SIZE(data_o);
    /* IPv4 without options carrying TCP, not a fragment, in Ethernet or Linux cooked (SLL) framing:
     * the first cases of kwsniff.net.packet.parse_tcp (and of kwsniff.net.ip.tcp_in_ipv4). */
    Py_ssize_t off;
    if (lt == LINKTYPE_ETHERNET && len >= ETHERNET_HEADER && be16(b + 12) == 0x0800)
        off = ETHERNET_HEADER;
    else if (lt == LINKTYPE_LINUX_SLL && len >= SLL_HEADER && be16(b + 14) == 0x0800)
        off = SLL_HEADER;
    else
        return slow(self, args, nargs);
    if (len < off + 40 || b[off] != 0x45 || b[off + 9] != 6 || (be16(b + off + 6) & 0x3FFF))
        return slow(self, args, nargs);
    const unsigned char *tcp = b + off + 20;
    Py_ssize_t ip_end = off + (Py_ssize_t)be16(b + off + 2);
    Py_ssize_t start = off + 20 + ((tcp[12] >> 2) & 0x3C);
    unsigned flags = tcp[13];
    if (start < off + 40 || ip_end < start || ip_end > len || (flags & (SYN | FIN | RST)) || !(flags & ACK))
        return slow(self, args, nargs);
    Py_ssize_t n = ip_end - start;
    unsigned long seq = be32(tcp + 4), ack = be32(tcp + 8);

    /* The flow: (src, sport, dst, dport) -> (connection, direction), as Session.flows holds it. */
    PyObject *key = PyTuple_New(4);
    if (key == NULL)
        return NULL;
    PyObject *items[4] = {PyBytes_FromStringAndSize((const char *)b + off + 12, 4), PyLong_FromLong(be16(tcp)),
                          PyBytes_FromStringAndSize((const char *)b + off + 16, 4), PyLong_FromLong(be16(tcp + 2))};
    for (int i = 0; i < 4; i++) {
        if (items[i] == NULL) {
            for (int j = i; j < 4; j++)
                Py_XDECREF(items[j]);
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i, items[i]);
    }
    PyObject *entry = PyDict_GetItemWithError(self->flows, key);
    Py_DECREF(key);
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return slow(self, args, nargs);
    }
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2)
        return slow(self, args, nargs);
    PyObject *conn = PyTuple_GET_ITEM(entry, 0), *d_o = PyTuple_GET_ITEM(entry, 1);
    if (!Py_IS_TYPE(conn, self->conn_type) || !PyLong_CheckExact(d_o))
        return slow(self, args, nargs);
    long d = PyLong_AsLong(d_o);
    if (d != 0 && d != 1)
        return slow(self, args, nargs);
    PyObject *closed = SLOT(conn, C_CLOSED), *recent = SLOT(conn, C_RECENT), *ts_last_o = SLOT(conn, C_TS_LAST),
             *packets = SLOT(conn, C_PACKETS), *rs = SLOT(conn, C_RS), *wire = SLOT(conn, C_WIRE_BYTES);
    if (closed != Py_False || recent == NULL || !PyList_CheckExact(recent) || PyList_GET_SIZE(recent) != 2
        || ts_last_o == NULL || !PyLong_CheckExact(ts_last_o) || packets == NULL || !is_int_list(packets)
        || wire == NULL || !is_int_list(wire) || rs == NULL || !PyTuple_CheckExact(rs) || PyTuple_GET_SIZE(rs) != 2)
        return slow(self, args, nargs);
    PyObject *window = PyList_GET_ITEM(recent, d);
    if (!PyTuple_CheckExact(window) || PyTuple_GET_SIZE(window) != 4)
        return slow(self, args, nargs);
    /* A copy of one of the direction's last frames (kwsniff.net.duplicates): the key is every byte
     * before the payload (data[:-len(payload)]), or the whole frame when it carries none. */
    Py_ssize_t klen = n ? len - n : len;
    int seen = 0;
    for (int i = 0; i < 4; i++) {
        PyObject *k = PyTuple_GET_ITEM(window, i);
        if (!PyBytes_CheckExact(k))
            return slow(self, args, nargs);
        if (PyBytes_GET_SIZE(k) == klen && memcmp(PyBytes_AS_STRING(k), b, klen) == 0)
            seen = 1;
    }
    if (seen) {
        long long ts_last = PyLong_AsLongLong(ts_last_o);
        if ((ts_last == -1 && PyErr_Occurred()) || ts - ts_last < self->copy_within_us) {
            PyErr_Clear();
            return slow(self, args, nargs);  /* a copy: counted by the Python path */
        }
    }
    PyObject *r = PyTuple_GET_ITEM(rs, d), *peer = PyTuple_GET_ITEM(rs, 1 - d);
    if (!Py_IS_TYPE(r, self->rs_type) || !Py_IS_TYPE(peer, self->rs_type))
        return slow(self, args, nargs);
    PyObject *peer_ooo = SLOT(peer, R_OOO);
    if (peer_ooo == NULL || !PyDict_CheckExact(peer_ooo) || PyDict_GET_SIZE(peer_ooo))
        return slow(self, args, nargs);  /* the acknowledgement may prove a hole there */
    PyObject *on_data = NULL;
    if (n) {
        PyObject *ooo = SLOT(r, R_OOO), *next_seq = SLOT(r, R_NEXT_SEQ);
        on_data = SLOT(r, R_ON_DATA);
        if (ooo == NULL || !PyDict_CheckExact(ooo) || PyDict_GET_SIZE(ooo) || next_seq == NULL
            || !PyLong_CheckExact(next_seq) || on_data == NULL || SLOT(r, R_SEGMENTS) == NULL
            || !PyLong_CheckExact(SLOT(r, R_SEGMENTS)) || SLOT(r, R_BYTES_DELIVERED) == NULL
            || !PyLong_CheckExact(SLOT(r, R_BYTES_DELIVERED)))
            return slow(self, args, nargs);
        unsigned long expected = PyLong_AsUnsignedLong(next_seq);
        if (expected == (unsigned long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return slow(self, args, nargs);
        }
        if (expected != seq)
            return slow(self, args, nargs);  /* out of order, a retransmission, a hole */
    }

    /* From here on the packet is ours: the same changes as Session.packet, Connection.packet,
     * TcpReassembler.peer_ack and TcpReassembler.segment make, in their order. */
    self->fast++;
    Py_INCREF(conn);
    Py_INCREF(r);
    Py_INCREF(peer);
    Py_XINCREF(on_data);
    PyObject *result = NULL;
    {
        PyObject *count = PyObject_GetAttr(self->stats, s_packets);
        if (count == NULL)
            goto done;
        long long packets_seen = PyLong_AsLongLong(count);
        Py_DECREF(count);
        if (packets_seen == -1 && PyErr_Occurred())
            goto done;
        PyObject *next = PyLong_FromLongLong(packets_seen + 1);
        if (next == NULL)
            goto done;
        int rc = PyObject_SetAttr(self->stats, s_packets, next);
        Py_DECREF(next);
        if (rc < 0)
            goto done;
    }
    {
        PyObject *k = n ? PyBytes_FromStringAndSize((const char *)b, klen) : Py_NewRef(data_o);
        if (k == NULL)
            goto done;
        PyObject *w = PyTuple_Pack(4, k, PyTuple_GET_ITEM(window, 0), PyTuple_GET_ITEM(window, 1),
                                   PyTuple_GET_ITEM(window, 2));
        Py_DECREF(k);
        if (w == NULL)
            goto done;
        PyList_SetItem(recent, d, w);
    }
    slot_set(self, conn, C_TS_LAST, Py_NewRef(ts_o));
    if (list_add(packets, d, 1) < 0)
        goto done;
    {
        PyObject *a = PyLong_FromUnsignedLong(ack);
        if (a == NULL)
            goto done;
        slot_set(self, peer, R_LAST_ACK, a);
    }
    if (n) {
        if (list_add(wire, d, n) < 0 || slot_add(self, r, R_SEGMENTS, 1) < 0)
            goto done;
        PyObject *next_seq = PyLong_FromUnsignedLong((seq + (unsigned long)n) & 0xFFFFFFFFUL);
        if (next_seq == NULL)
            goto done;
        slot_set(self, r, R_NEXT_SEQ, next_seq);
        if (slot_add(self, r, R_BYTES_DELIVERED, n) < 0)
            goto done;
        if (deliver(self, on_data, ts_o, data_o, start, ip_end) < 0)
            goto done;
    }
    result = after_packet(self, ts_o, ts);
done:
    Py_DECREF(conn);
    Py_DECREF(r);
    Py_DECREF(peer);
    Py_XDECREF(on_data);
    return result;
}

static PyObject *
fast_counts(FastPath *self, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(KK)", self->fast, self->slow);
}

static int
fast_init(FastPath *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"session", "pure", "connection", "reassembler", "splitter",
                             "copy_within_us", "forget_closed_us", NULL};
    PyObject *session, *pure, *conn_type, *rs_type, *split_type;
    long long copy_within_us, forget_closed_us;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!O!LL", kwlist, &session, &pure, &PyType_Type,
                                     &conn_type, &PyType_Type, &rs_type, &PyType_Type, &split_type,
                                     &copy_within_us, &forget_closed_us))
        return -1;
    PyTypeObject *types[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++)
        types[i] = (PyTypeObject *)(i < R_NEXT_SEQ ? conn_type : i < S_NEED ? rs_type : split_type);
    for (int i = 0; i < N_SLOTS; i++)
        if (slot_offset(types[i], slot_names[i], &self->off[i]) < 0)
            return -1;
    PyObject *split_data = PyObject_GetAttrString(split_type, "data");
    if (split_data == NULL)
        return -1;
    PyObject *flows = PyObject_GetAttrString(session, "flows");
    PyObject *stats = flows ? PyObject_GetAttrString(session, "stats") : NULL;
    PyObject *held = stats ? PyObject_GetAttrString(session, "held") : NULL;
    if (held == NULL || !PyDict_CheckExact(flows) || !PyList_CheckExact(held) || PyList_GET_SIZE(held) < 1) {
        if (held != NULL)
            PyErr_SetString(PyExc_TypeError, "session.flows must be a dict and session.held a list");
        Py_XDECREF(flows);
        Py_XDECREF(stats);
        Py_XDECREF(held);
        Py_DECREF(split_data);
        return -1;
    }
    Py_XSETREF(self->session, Py_NewRef(session));
    Py_XSETREF(self->pure, Py_NewRef(pure));
    Py_XSETREF(self->conn_type, (PyTypeObject *)Py_NewRef(conn_type));
    Py_XSETREF(self->rs_type, (PyTypeObject *)Py_NewRef(rs_type));
    Py_XSETREF(self->split_type, (PyTypeObject *)Py_NewRef(split_type));
    Py_XSETREF(self->split_data, split_data);
    Py_XSETREF(self->flows, flows);
    Py_XSETREF(self->stats, stats);
    Py_XSETREF(self->held, held);
    self->copy_within_us = copy_within_us;
    self->forget_closed_us = forget_closed_us;
    return 0;
}

static int
fast_traverse(FastPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->session);
    Py_VISIT(self->pure);
    Py_VISIT(self->conn_type);
    Py_VISIT(self->rs_type);
    Py_VISIT(self->split_type);
    Py_VISIT(self->split_data);
    Py_VISIT(self->flows);
    Py_VISIT(self->stats);
    Py_VISIT(self->held);
    return 0;
}

static int
fast_clear(FastPath *self)
{
    Py_CLEAR(self->session);
    Py_CLEAR(self->pure);
    Py_CLEAR(self->conn_type);
    Py_CLEAR(self->rs_type);
    Py_CLEAR(self->split_type);
    Py_CLEAR(self->split_data);
    Py_CLEAR(self->flows);
    Py_CLEAR(self->stats);
    Py_CLEAR(self->held);
    return 0;
}

static void
fast_dealloc(FastPath *self)
{
    PyObject_GC_UnTrack(self);
    fast_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
fast_packet_checked(FastPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->session == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FastPath not initialised");
        return NULL;
    }
    return fast_packet(self, args, nargs);
}

static PyMethodDef fast_methods[] = {
    {"packet", (PyCFunction)(void (*)(void))fast_packet_checked, METH_FASTCALL,
     "packet(ts, linktype, data): Session.packet, the common case compiled."},
    {"counts", (PyCFunction)fast_counts, METH_NOARGS,
     "(packets handled here, packets handed to the Python path)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kwsniff.pipeline._fastpath.FastPath",
    .tp_basicsize = sizeof(FastPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled common-case packet path of one Session.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fast_init,
    .tp_dealloc = (destructor)fast_dealloc,
    .tp_traverse = (traverseproc)fast_traverse,
    .tp_clear = (inquiry)fast_clear,
    .tp_methods = fast_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kwsniff.pipeline._fastpath",
    .m_doc = "The common-case packet path of kwsniff.pipeline.session, compiled (see _fastpath.c).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&FastPathType) < 0)
        return NULL;
    s_packets = PyUnicode_InternFromString("packets");
    s_held_trigger = PyUnicode_InternFromString("_held_trigger");
    s_swept = PyUnicode_InternFromString("_swept");
    s_evict_largest = PyUnicode_InternFromString("_evict_largest");
    s_sweep = PyUnicode_InternFromString("_sweep");
    if (!s_packets || !s_held_trigger || !s_swept || !s_evict_largest || !s_sweep)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "FastPath", (PyObject *)&FastPathType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
