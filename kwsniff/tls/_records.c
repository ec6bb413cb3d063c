/* The bulk of a TLS connection, compiled: runs of application-data records decrypted back to back.
 *
 * kwsniff.tls.stream.TlsStream._application_run's loop, for one direction under one key: from an
 * offset in the direction's buffer, every complete record of type 23 is opened with the AEAD and
 * its plaintext written after the previous one's, until a record that is incomplete, fails its tag,
 * or is not plain application data (TLS 1.3: an inner content type other than 23, or padding).
 * There it stops without consuming that record, so the careful Python path (on `cryptography`)
 * handles it exactly as before: a failed tag, a KeyUpdate, an alert, padding, a handshake message.
 *
 * Why not `cryptography` here: its AEAD objects set a new cipher context up for every call (1.7 us
 * here), so a connection written in 2 KB records (Python's ssl writes one record per send) spends
 * more on that than on the decryption itself. This keeps one OpenSSL cipher context per direction
 * and only changes its nonce: the same OpenSSL EVP calls `cryptography` makes, in the libcrypto
 * Python's own ssl module links. It is loaded with dlopen, so building needs no OpenSSL headers;
 * without it (no libcrypto.so.3 or .so.1.1) this module fails to import and the Python loop on
 * `cryptography` runs instead, with the same results (tests/test_tls_records.py).
 *
 * Record layout: RFC 8446 section 5.2 (TLS 1.3: nonce = IV xor sequence number, additional data =
 * the record header, an inner content type after the content); RFC 5246 section 6.2.3.3 with RFC
 * 5288 (TLS 1.2 AES-GCM: an 8-byte explicit nonce after the header, additional data = sequence
 * number, type, version and plaintext length) and RFC 7905 (TLS 1.2 ChaCha20-Poly1305: nonce as TLS
 * 1.3's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#define APPLICATION_DATA 23
#define TAG 16
#define MAX_RECORD ((1 << 14) + 256)
#define EVP_CTRL_AEAD_SET_IVLEN 0x9
#define EVP_CTRL_AEAD_SET_TAG 0x11

typedef struct evp_cipher_ctx EVP_CIPHER_CTX;
typedef struct evp_cipher EVP_CIPHER;

static struct {
    EVP_CIPHER_CTX *(*ctx_new)(void);
    void (*ctx_free)(EVP_CIPHER_CTX *);
    int (*ctrl)(EVP_CIPHER_CTX *, int, int, void *);
    int (*init)(EVP_CIPHER_CTX *, const EVP_CIPHER *, void *, const unsigned char *, const unsigned char *);
    int (*update)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
    int (*final)(EVP_CIPHER_CTX *, unsigned char *, int *);
    const EVP_CIPHER *(*aes_128_gcm)(void);
    const EVP_CIPHER *(*aes_256_gcm)(void);
    const EVP_CIPHER *(*chacha20_poly1305)(void);
} evp;

static const char *libcrypto_name;

typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *ctx;
    int tls13;
    int explicit_nonce;  /* TLS 1.2 AES-GCM: 8 */
    unsigned char iv[12];
    unsigned long long records;  /* records opened, for tests */
} Opener;

/* Open one record's ciphertext (with its tag at the end) into out. 1: opened; 0: the tag failed. */
static int
open_record(Opener *o, const unsigned char *nonce, const unsigned char *aad, int aad_len,
            const unsigned char *ct, int ct_len, unsigned char *out)
{
    int len = 0, body = ct_len - TAG;
    if (body < 0 || !evp.init(o->ctx, NULL, NULL, NULL, nonce))
        return 0;
    if (!evp.update(o->ctx, NULL, &len, aad, aad_len))
        return 0;
    if (body > 0 && !evp.update(o->ctx, out, &len, ct, body))
        return 0;
    if (!evp.ctrl(o->ctx, EVP_CTRL_AEAD_SET_TAG, TAG, (void *)(ct + body)))
        return 0;
    return evp.final(o->ctx, out + body, &len) > 0;
}

static void
seq_nonce(const unsigned char *iv, unsigned long long seq, unsigned char *nonce)
{
    memcpy(nonce, iv, 12);
    for (int i = 0; i < 8; i++)
        nonce[11 - i] ^= (unsigned char)(seq >> (8 * i));
}

static void
opener_dealloc(Opener *self)
{
    if (self->ctx != NULL)
        evp.ctx_free(self->ctx);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
opener_init(Opener *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"cipher", "key", "iv", "tls13", NULL};
    const char *cipher_name;
    Py_buffer key, iv;
    int tls13;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sy*y*p", kwlist, &cipher_name, &key, &iv, &tls13))
        return -1;
    const EVP_CIPHER *cipher = NULL;
    Py_ssize_t key_len = 32;
    if (strcmp(cipher_name, "aes-128-gcm") == 0) {
        cipher = evp.aes_128_gcm();
        key_len = 16;
    } else if (strcmp(cipher_name, "aes-256-gcm") == 0)
        cipher = evp.aes_256_gcm();
    else if (strcmp(cipher_name, "chacha20-poly1305") == 0)
        cipher = evp.chacha20_poly1305();
    int rc = -1;
    int explicit_nonce = !tls13 && strcmp(cipher_name, "chacha20-poly1305") != 0 ? 8 : 0;
    Py_ssize_t iv_len = explicit_nonce ? 4 : 12;
    if (cipher == NULL)
        PyErr_Format(PyExc_ValueError, "unknown AEAD %s", cipher_name);
    else if (key.len != key_len || iv.len != iv_len)
        PyErr_SetString(PyExc_ValueError, "key or IV of the wrong length");
    else {
        if (self->ctx == NULL)
            self->ctx = evp.ctx_new();
        if (self->ctx == NULL || !evp.init(self->ctx, cipher, NULL, NULL, NULL)
            || !evp.ctrl(self->ctx, EVP_CTRL_AEAD_SET_IVLEN, 12, NULL)
            || !evp.init(self->ctx, NULL, NULL, key.buf, NULL))
            PyErr_SetString(PyExc_RuntimeError, "libcrypto could not set the key up");
        else {
            memset(self->iv, 0, sizeof self->iv);
            memcpy(self->iv, iv.buf, iv_len);
            self->tls13 = tls13;
            self->explicit_nonce = explicit_nonce;
            rc = 0;
        }
    }
    PyBuffer_Release(&key);
    PyBuffer_Release(&iv);
    return rc;
}

/* The loop: records from p[pos] on, opened into out; returns where it stopped, advances *seq and *o. */
static Py_ssize_t
run_records(Opener *self, const unsigned char *p, Py_ssize_t pos, Py_ssize_t n, unsigned long long *seq_io,
            unsigned char *out, Py_ssize_t *o_io)
{
    unsigned long long seq = *seq_io;
    Py_ssize_t o = *o_io;
    unsigned char nonce[12], aad[13];
    Py_BEGIN_ALLOW_THREADS
    while (n - pos >= 5 && p[pos] == APPLICATION_DATA) {
        Py_ssize_t length = (p[pos + 3] << 8) | p[pos + 4];
        Py_ssize_t end = pos + 5 + length;
        if (end > n || length > MAX_RECORD)
            break;
        if (self->tls13) {
            /* a tag and at least the inner content type */
            if (length < TAG + 1)
                break;
            seq_nonce(self->iv, seq, nonce);
            if (!open_record(self, nonce, p + pos, 5, p + pos + 5, (int)length, out + o))
                break;
            Py_ssize_t stop = o + length - TAG;
            if (out[stop - 1] != APPLICATION_DATA)
                break; /* padding, or a handshake message or an alert inside */
            o = stop - 1;
        } else {
            Py_ssize_t x = self->explicit_nonce, size = length - x - TAG;
            if (size < 0)
                break;
            if (x) {
                memcpy(nonce, self->iv, 4);
                memcpy(nonce + 4, p + pos + 5, 8);
            } else
                seq_nonce(self->iv, seq, nonce);
            for (int i = 0; i < 8; i++)
                aad[7 - i] = (unsigned char)(seq >> (8 * i));
            memcpy(aad + 8, p + pos, 3);
            aad[11] = (unsigned char)(size >> 8);
            aad[12] = (unsigned char)size;
            if (!open_record(self, nonce, aad, 13, p + pos + 5 + x, (int)(length - x), out + o))
                break;
            o += size;
        }
        seq++;
        pos = end;
    }
    Py_END_ALLOW_THREADS
    self->records += seq - *seq_io;
    *seq_io = seq;
    *o_io = o;
    return pos;
}

/* run(buf, pos, end, seq) -> (pos, seq, plaintext): see the top of this file. */
static PyObject *
opener_run(Opener *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run(buf, pos, end, seq)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), n = PyLong_AsSsize_t(args[2]);
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pos < 0 || n > b.len || pos > n) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "run: offsets outside the buffer");
        return NULL;
    }
    PyObject *plain = PyBytes_FromStringAndSize(NULL, n - pos);
    if (plain == NULL) {
        PyBuffer_Release(&b);
        return NULL;
    }
    Py_ssize_t o = 0;
    pos = run_records(self, b.buf, pos, n, &seq, (unsigned char *)PyBytes_AS_STRING(plain), &o);
    PyBuffer_Release(&b);
    if (_PyBytes_Resize(&plain, o) < 0)
        return NULL;
    return Py_BuildValue("(nKN)", pos, seq, plain);
}

static PyObject *
opener_counts(Opener *self, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("K", self->records);
}

static PyMethodDef opener_methods[] = {
    {"run", (PyCFunction)(void (*)(void))opener_run, METH_FASTCALL,
     "run(buf, pos, end, seq) -> (pos, seq, plaintext): the application-data records from pos on."},
    {"records", (PyCFunction)opener_counts, METH_NOARGS, "Records opened so far."},
    {NULL},
};

static PyTypeObject OpenerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kwsniff.tls._records.Opener",
    .tp_basicsize = sizeof(Opener),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Opener(cipher, key, iv, tls13): one direction's record protection, one cipher context.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)opener_init,
    .tp_dealloc = (destructor)opener_dealloc,
    .tp_methods = opener_methods,
};


/* Feeder(stream, d, drain): direction d's reassembled bytes in, as TlsStream.feed takes them. The
 * bytes are appended to the direction's buf. Until it holds its `need` bytes (a whole record at its
 * front) nothing else happens: most TCP segments of a record that spans several end there, with
 * no Python call. Then, in the common case (the direction's protection has an Opener, no gap to
 * resynchronise after, no TLS 1.3 traffic secret still to switch to, and the buffer holds whole
 * application-data records then at most the start of the next), the records are opened here and
 * the plaintext handed to stream.sinks[d], with the counters TlsStream._drain would have kept.
 * Anything else, and whatever this loop stops at, is left to drain(ts), TlsStream._drain. */
typedef struct {
    PyObject_HEAD
    PyObject *stream;
    PyObject *side;
    PyObject *drain;
    Py_ssize_t d;
    vectorcallfunc vectorcall;
} Feeder;

static PyObject *s_buf, *s_need, *s_protection, *s_opener, *s_resync, *s_app_secret, *s_seq, *s_records,
    *s_decrypted, *s_overhead, *s_sinks, *s_dirs;

static int
add_to(PyObject *obj, PyObject *name, long long by)
{
    PyObject *old = PyObject_GetAttr(obj, name);
    if (old == NULL)
        return -1;
    PyObject *inc = PyLong_FromLongLong(by);
    PyObject *sum = inc == NULL ? NULL : PyNumber_Add(old, inc);
    Py_DECREF(old);
    Py_XDECREF(inc);
    if (sum == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, name, sum);
    Py_DECREF(sum);
    return rc;
}

/* del buf[:k], as TlsStream._drain does it, but by moving the rest to the front: `del` leaves the
 * bytearray an offset at its start, and its next append then copies it into a new allocation. */
static int
drop_front(PyObject *buf, Py_ssize_t k)
{
    Py_ssize_t rest = PyByteArray_GET_SIZE(buf) - k;
    char *start = PyByteArray_AS_STRING(buf);
    memmove(start, start + k, rest);
    return PyByteArray_Resize(buf, rest);
}

/* 1: the records were read here; 0: leave them to drain(ts); -1: an error. */
static int
fast_drain(Feeder *self, PyObject *buf, PyObject *ts)
{
    int rc = 0;
    PyObject *prot = NULL, *opener = NULL, *flag = NULL, *plain = NULL, *sinks = NULL;
    prot = PyObject_GetAttr(self->side, s_protection);
    if (prot == NULL || prot == Py_None)
        goto done;
    opener = PyObject_GetAttr(prot, s_opener);
    if (opener == NULL || !Py_IS_TYPE(opener, &OpenerType))
        goto done;
    for (int i = 0; i < 2; i++) {
        Py_XSETREF(flag, PyObject_GetAttr(self->side, i ? s_app_secret : s_resync));
        if (flag == NULL)
            goto done;
        int truth = PyObject_IsTrue(flag);
        if (truth != 0) {
            rc = truth < 0 ? -1 : 0;
            goto done;
        }
    }
    const unsigned char *p = (const unsigned char *)PyByteArray_AS_STRING(buf);
    Py_ssize_t n = PyByteArray_GET_SIZE(buf), whole = 0, length = 0;
    while (n - whole >= 5 && p[whole] == APPLICATION_DATA) {
        length = (p[whole + 3] << 8) | p[whole + 4];
        if (length > MAX_RECORD || whole + 5 + length > n)
            break;
        whole += 5 + length;
    }
    /* What follows the whole records must be the start of the next one (TlsStream._drain's wait). */
    if (whole == 0
        || !(n - whole < 5
             || (p[whole] == APPLICATION_DATA && p[whole + 1] == 3 && length <= MAX_RECORD
                 && whole + 5 + length > n)))
        goto done;
    Py_XSETREF(flag, PyObject_GetAttr(prot, s_seq));
    if (flag == NULL)
        goto error;
    unsigned long long first = PyLong_AsUnsignedLongLong(flag), seq = first;
    if (PyErr_Occurred())
        goto error;
    plain = PyBytes_FromStringAndSize(NULL, whole);
    if (plain == NULL)
        goto error;
    Py_ssize_t o = 0;
    /* The loop lets other threads run: exported, the buffer cannot be resized under it. */
    Py_buffer held;
    if (PyObject_GetBuffer(buf, &held, PyBUF_SIMPLE) < 0)
        goto error;
    Py_ssize_t stop = run_records((Opener *)opener, held.buf, 0, whole, &seq,
                                  (unsigned char *)PyBytes_AS_STRING(plain), &o);
    PyBuffer_Release(&held);
    if (stop == 0)
        goto done;
    Py_XSETREF(flag, PyLong_FromUnsignedLongLong(seq));
    if (flag == NULL || PyObject_SetAttr(prot, s_seq, flag) < 0
        || add_to(self->side, s_records, (long long)(seq - first)) < 0
        || add_to(self->side, s_decrypted, o) < 0 || add_to(self->side, s_overhead, stop - o) < 0
        || drop_front(buf, stop) < 0)
        goto error;
    n -= stop;
    if (stop == whole) {
        p = (const unsigned char *)PyByteArray_AS_STRING(buf);
        Py_XSETREF(flag, PyLong_FromSsize_t(n < 5 ? 5 : 5 + ((p[3] << 8) | p[4])));
        if (flag == NULL || PyObject_SetAttr(self->side, s_need, flag) < 0)
            goto error;
    }
    if (o > 0) {
        if (_PyBytes_Resize(&plain, o) < 0)
            goto error;
        sinks = PyObject_GetAttr(self->stream, s_sinks);
        if (sinks == NULL)
            goto error;
        PyObject *sink = PySequence_GetItem(sinks, self->d);
        if (sink == NULL)
            goto error;
        PyObject *call[2] = {ts, plain};
        PyObject *r = PyObject_Vectorcall(sink, call, 2, NULL);
        Py_DECREF(sink);
        if (r == NULL)
            goto error;
        Py_DECREF(r);
    }
    rc = stop == whole; /* else a record this loop does not take: drain(ts) reads it and the rest */
    goto done;
error:
    rc = -1;
done:
    if (rc == 0 && PyErr_Occurred())
        rc = -1;
    Py_XDECREF(prot);
    Py_XDECREF(opener);
    Py_XDECREF(flag);
    Py_XDECREF(plain);
    Py_XDECREF(sinks);
    return rc;
}

static PyObject *
feeder_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Feeder *self = (Feeder *)op;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "feeder(ts, chunk)");
        return NULL;
    }
    PyObject *buf = PyObject_GetAttr(self->side, s_buf);
    if (buf == NULL)
        return NULL;
    if (!PyByteArray_CheckExact(buf)) {
        Py_DECREF(buf);
        PyErr_SetString(PyExc_TypeError, "feeder: the direction's buf is not a bytearray");
        return NULL;
    }
    Py_buffer c;
    if (PyObject_GetBuffer(args[1], &c, PyBUF_SIMPLE) < 0) {
        Py_DECREF(buf);
        return NULL;
    }
    Py_ssize_t old = PyByteArray_GET_SIZE(buf);
    int rc = PyByteArray_Resize(buf, old + c.len);
    if (rc == 0)
        memcpy(PyByteArray_AS_STRING(buf) + old, c.buf, c.len);
    PyBuffer_Release(&c);
    Py_ssize_t size = PyByteArray_GET_SIZE(buf);
    PyObject *need_o = rc < 0 ? NULL : PyObject_GetAttr(self->side, s_need);
    Py_ssize_t need = need_o == NULL ? -1 : PyLong_AsSsize_t(need_o);
    Py_XDECREF(need_o);
    if (need == -1 && PyErr_Occurred()) {
        Py_DECREF(buf);
        return NULL;
    }
    if (size < need) {
        Py_DECREF(buf);
        Py_RETURN_NONE; /* the rest of a record that began in an earlier segment */
    }
    rc = fast_drain(self, buf, args[0]);
    Py_DECREF(buf);
    if (rc < 0)
        return NULL;
    if (rc > 0)
        Py_RETURN_NONE;
    return PyObject_Vectorcall(self->drain, args, 1, NULL);
}

static int
feeder_init(Feeder *self, PyObject *args, PyObject *kwds)
{
    PyObject *stream, *drain;
    Py_ssize_t d;
    if (!PyArg_ParseTuple(args, "OnO:Feeder", &stream, &d, &drain))
        return -1;
    PyObject *dirs = PyObject_GetAttr(stream, s_dirs);
    PyObject *side = dirs == NULL ? NULL : PySequence_GetItem(dirs, d);
    Py_XDECREF(dirs);
    if (side == NULL)
        return -1;
    Py_INCREF(stream);
    Py_INCREF(drain);
    Py_XSETREF(self->stream, stream);
    Py_XSETREF(self->side, side);
    Py_XSETREF(self->drain, drain);
    self->d = d;
    self->vectorcall = feeder_vectorcall;
    return 0;
}

static int
feeder_traverse(Feeder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->stream);
    Py_VISIT(self->side);
    Py_VISIT(self->drain);
    return 0;
}

static int
feeder_clear(Feeder *self)
{
    Py_CLEAR(self->stream);
    Py_CLEAR(self->side);
    Py_CLEAR(self->drain);
    return 0;
}

static void
feeder_dealloc(Feeder *self)
{
    PyObject_GC_UnTrack(self);
    feeder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
feeder_call(PyObject *self, PyObject *args, PyObject *kwds)
{
    return PyVectorcall_Call(self, args, kwds);
}

static PyTypeObject FeederType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kwsniff.tls._records.Feeder",
    .tp_basicsize = sizeof(Feeder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Feeder(stream, d, drain): feeder(ts, chunk) is stream.feed(d, ts, chunk), compiled.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)feeder_init,
    .tp_dealloc = (destructor)feeder_dealloc,
    .tp_traverse = (traverseproc)feeder_traverse,
    .tp_clear = (inquiry)feeder_clear,
    .tp_call = feeder_call,
    .tp_vectorcall_offset = offsetof(Feeder, vectorcall),
};

static int
load_libcrypto(void)
{
    static const char *names[] = {"libcrypto.so.3", "libcrypto.so.1.1", NULL};
    void *lib = NULL;
    for (int i = 0; names[i] != NULL && lib == NULL; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        libcrypto_name = names[i];
    }
    if (lib == NULL) {
        PyErr_SetString(PyExc_ImportError, "no libcrypto.so.3 or libcrypto.so.1.1 to load");
        return -1;
    }
#define LOAD(field, symbol)                                                                          \
    if ((*(void **)&evp.field = dlsym(lib, symbol)) == NULL) {                                      \
        PyErr_Format(PyExc_ImportError, "%s has no %s", libcrypto_name, symbol);                    \
        return -1;                                                                                  \
    }
    LOAD(ctx_new, "EVP_CIPHER_CTX_new")
    LOAD(ctx_free, "EVP_CIPHER_CTX_free")
    LOAD(ctrl, "EVP_CIPHER_CTX_ctrl")
    LOAD(init, "EVP_DecryptInit_ex")
    LOAD(update, "EVP_DecryptUpdate")
    LOAD(final, "EVP_DecryptFinal_ex")
    LOAD(aes_128_gcm, "EVP_aes_128_gcm")
    LOAD(aes_256_gcm, "EVP_aes_256_gcm")
    LOAD(chacha20_poly1305, "EVP_chacha20_poly1305")
#undef LOAD
    return 0;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kwsniff.tls._records",
    "Runs of TLS application-data records decrypted with one OpenSSL cipher context.", -1, NULL,
};

PyMODINIT_FUNC
PyInit__records(void)
{
    PyObject **names[] = {&s_buf, &s_need, &s_protection, &s_opener, &s_resync, &s_app_secret, &s_seq,
                          &s_records, &s_decrypted, &s_overhead, &s_sinks, &s_dirs};
    const char *texts[] = {"buf", "need", "protection", "opener", "resync", "app_secret", "seq",
                           "records", "decrypted", "overhead", "sinks", "dirs"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i] = PyUnicode_InternFromString(texts[i])) == NULL)
            return NULL;
    if (load_libcrypto() < 0 || PyType_Ready(&OpenerType) < 0
        || PyType_Ready(&FeederType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Opener", (PyObject *)&OpenerType) < 0
        || PyModule_AddObjectRef(m, "Feeder", (PyObject *)&FeederType) < 0
        || PyModule_AddStringConstant(m, "LIBCRYPTO", libcrypto_name) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
