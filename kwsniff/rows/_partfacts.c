/* The compiled Produce and Fetch partition walker: a message body straight to the `partitions`
 * table's facts, with no decoded message in between (docs/performance.md, "Partitions, compiled").
 *
 * kwsniff/rows/compiled.py turns one message version's fields (kwsniff.protocol.message_fields)
 * into a plan: per struct, its fields in wire order, each with what the tables take from it (a root
 * value, the topic name or id, the partition, a fact column, the records field). walk() reads a body
 * by that plan and fills the same facts dicts, under the same keys, as the generated Python walker
 * (kwsniff/rows/fact_compiler.py) fills from the decoded message, with the records facts counted
 * from the magic 2 batch headers as kwsniff.records.counts_v2 counts them.
 *
 * walk() decides; it never half-answers: anything the common case does not hold -- a body the
 * Python decoder would reject or note (bad lengths, trailing bytes), a non-zero error code anywhere
 * (the errors table wants the decoded message), a tag at a Fetch request's root (its replica_state
 * says who fetches), a known tag that does not fill its size, a batch counts_v2 would not read
 * (legacy formats, unknown codecs), a fetch of the KRaft metadata log -- returns None before
 * anything is written where the caller sees it, and the caller takes the Python path, which stays
 * the single source of truth. KWSNIFF_PURE_PYTHON=1 skips this module altogether.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Field codes (kwsniff/rows/compiled.py's _CODES). */
enum {
    F_SKIP = 0, /* fixed size, nothing taken: size in `size` */
    F_INT8 = 1,
    F_INT16 = 2,
    F_INT32 = 3,
    F_INT64 = 4,
    F_UINT16 = 5,
    F_UINT32 = 6,
    F_BOOL = 7,
    F_UUID = 8,
    F_STRING = 9,
    F_BYTES = 10,
    F_RECORDS = 11,
    F_STRUCT = 12,
    F_ARRAY_STRUCT = 13,
    F_ARRAY_FIXED = 14, /* element size in `size` */
    F_ARRAY_VAR = 15,   /* strings (size 0) or bytes (size 1) */
};
/* Field flags. */
#define FL_NULLABLE 1
#define FL_ERROR 2      /* an error code: a non-zero value sends the message to the Python path */
#define FL_TOPIC_NAME 4 /* in a topic struct */
#define FL_TOPIC_ID 8   /* in a topic struct */
#define FL_PARTITION 16 /* in a partition struct: the partition number */
#define FL_ROOT 32      /* a root value: into the returned dict under `column` */
#define FL_NAMED 64     /* a node id the walker does not take (a Fetch v12+ partition's current
                         * leader): a value >= 0 sends the message to the Python path */
/* Struct roles. */
#define R_OTHER 0
#define R_ROOT 1
#define R_TOPIC 2
#define R_PARTITION 3

typedef struct Node Node;
typedef struct {
    int code;
    int flags;
    Py_ssize_t size;
    PyObject *column; /* a fact column or root value name (a str), or NULL */
    Node *child;
} Field;
struct Node {
    int role;
    Py_ssize_t nfields;
    Field *fields;
    /* Tagged fields (flexible versions): their tags, and how to read each; ntagged -1 when any tag
     * present sends the body to the Python path (a Fetch request's root). */
    Py_ssize_t ntagged;
    long *tag_numbers;
    Field *tagged;
    int has_records; /* a partition struct with a records field: its facts start from a template */
};
typedef struct {
    Node *root;
    int flexible;
    int offsets; /* records facts carry first_offset/last_offset (not Produce) */
} Plan;

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    Py_ssize_t pos;
    int flexible;
    int offsets;
    int fallback; /* set: give up, the Python path answers */
    PyObject *out;
    PyObject *root_values;
    PyObject *topic;    /* borrowed: the current topic's name, or NULL */
    PyObject *topic_id; /* borrowed: the current topic's id as text, or NULL */
    PyObject *facts;    /* the current partition's facts */
    PyObject *partition;
    PyObject *template; /* the current topic's facts of a partition with no records, or NULL */
    PyObject *plain;    /* the current topic's facts of a partition struct with no records field */
    PyObject *crc32c;
    PyObject *metadata_topic;
    const unsigned char *metadata_id;
} Walk;

static PyObject *S_topic, *S_topic_id, *S_partition, *S_record_count, *S_record_bytes, *S_batch_count,
    *S_compression, *S_crc_errors, *S_partial_bytes, *S_control_batches, *S_capped_batches,
    *S_record_errors, *S_record_error, *S_first_offset, *S_last_offset;
static PyObject *S_records, *S_past_int64, *S_error_code, *S_error_name, *S_lag, *S_high_watermark, *S_fetch_offset,
    *S_base_offset;
static PyObject *CODECS[5];
static PyObject *S_mixed;

/* ----------------------------------------------------------------------------------------- plans */

static void node_free(Node *node) {
    if (node == NULL)
        return;
    for (Py_ssize_t i = 0; i < node->nfields; i++) {
        Py_XDECREF(node->fields[i].column);
        node_free(node->fields[i].child);
    }
    for (Py_ssize_t i = 0; i < node->ntagged; i++) {
        Py_XDECREF(node->tagged[i].column);
        node_free(node->tagged[i].child);
    }
    PyMem_Free(node->fields);
    PyMem_Free(node->tagged);
    PyMem_Free(node->tag_numbers);
    PyMem_Free(node);
}

static Node *node_from(PyObject *spec);

static int field_from(PyObject *spec, Field *f) {
    PyObject *column, *child;
    if (!PyArg_ParseTuple(spec, "iinOO", &f->code, &f->flags, &f->size, &column, &child))
        return -1;
    if (column != Py_None) {
        Py_INCREF(column);
        f->column = column;
    }
    if (child != Py_None) {
        f->child = node_from(child);
        if (f->child == NULL)
            return -1;
    }
    return 0;
}

/* node: (role, (field, ...), ((tag, field), ...) or None), a field being
 * (code, flags, size, column or None, child node or None) */
static Node *node_from(PyObject *spec) {
    int role;
    PyObject *fields, *tagged;
    if (!PyArg_ParseTuple(spec, "iO!O", &role, &PyTuple_Type, &fields, &tagged))
        return NULL;
    if (tagged != Py_None && !PyTuple_Check(tagged)) {
        PyErr_SetString(PyExc_TypeError, "tagged fields: a tuple or None");
        return NULL;
    }
    Node *node = PyMem_Calloc(1, sizeof(Node));
    if (node == NULL)
        return (Node *)PyErr_NoMemory();
    node->role = role;
    node->nfields = PyTuple_GET_SIZE(fields);
    node->fields = PyMem_Calloc(node->nfields ? node->nfields : 1, sizeof(Field));
    if (node->fields == NULL) {
        PyMem_Free(node);
        return (Node *)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < node->nfields; i++) {
        if (field_from(PyTuple_GET_ITEM(fields, i), &node->fields[i]) < 0) {
            node_free(node);
            return NULL;
        }
        node->has_records |= node->fields[i].code == F_RECORDS;
    }
    node->ntagged = -1;
    if (tagged == Py_None)
        return node;
    node->ntagged = 0;
    Py_ssize_t n = PyTuple_GET_SIZE(tagged);
    node->tagged = PyMem_Calloc(n ? n : 1, sizeof(Field));
    node->tag_numbers = PyMem_Calloc(n ? n : 1, sizeof(long));
    if (node->tagged == NULL || node->tag_numbers == NULL) {
        node_free(node);
        return (Node *)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *field;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(tagged, i), "lO", &node->tag_numbers[i], &field) ||
            field_from(field, &node->tagged[i]) < 0) {
            node_free(node);
            return NULL;
        }
        node->ntagged = i + 1;
        node->has_records |= node->tagged[i].code == F_RECORDS;
    }
    return node;
}

static void plan_free(PyObject *capsule) {
    Plan *plan = PyCapsule_GetPointer(capsule, "kwsniff.partfacts.plan");
    if (plan != NULL) {
        node_free(plan->root);
        PyMem_Free(plan);
    }
}

static PyObject *make_plan(PyObject *self, PyObject *args) {
    PyObject *root;
    int flexible, offsets;
    if (!PyArg_ParseTuple(args, "Opp", &root, &flexible, &offsets))
        return NULL;
    Plan *plan = PyMem_Calloc(1, sizeof(Plan));
    if (plan == NULL)
        return PyErr_NoMemory();
    plan->root = node_from(root);
    if (plan->root == NULL) {
        PyMem_Free(plan);
        return NULL;
    }
    plan->flexible = flexible;
    plan->offsets = offsets;
    PyObject *capsule = PyCapsule_New(plan, "kwsniff.partfacts.plan", plan_free);
    if (capsule == NULL) {
        node_free(plan->root);
        PyMem_Free(plan);
    }
    return capsule;
}

/* --------------------------------------------------------------------------------------- reading */

#define NEED(w, k)                                                                                         \
    do {                                                                                                   \
        if ((w)->n - (w)->pos < (Py_ssize_t)(k)) {                                                         \
            (w)->fallback = 1;                                                                             \
            return -1;                                                                                     \
        }                                                                                                  \
    } while (0)

static inline int64_t be(const unsigned char *p, int size) {
    uint64_t v = 0;
    for (int i = 0; i < size; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

/* ------------------------------------------------------------------------------------ CRC32C */

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of magic 2 record batches
 * (KIP-98), computed here so that a batch costs no Python call (and `read` no import of the crc32c
 * package, whose version lookup scans every installed distribution). On x86-64 it runs on SSE4.2's
 * crc32 instruction, three streams at once over long buffers (the instruction's latency is three
 * times its throughput), the streams joined by the CRC's linearity: crc(A . B) = crc(A) * x^(8|B|)
 * mod P, xor crc(B) from a zero register. Elsewhere, or on a CPU without SSE4.2, crc32c_have is 0
 * and the caller uses the crc32c package instead. The crc32c package stays the oracle of the tests
 * (tests/test_partfacts.py). */
#define CRC_POLY 0x82F63B78u
#define CRC_LANE 2048 /* bytes per stream in a three-stream step */

/* a * b modulo P, both polynomials in the reflected order (bit 31 is x^0) */
static uint32_t crc_multiply(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t m = 1u << 31; m; m >>= 1) {
        if (a & m)
            product ^= b;
        b = (b & 1) ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return product;
}

static int crc32c_have = 0;
static uint32_t crc_lane_shift; /* x^(8 * CRC_LANE) mod P */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 3 * CRC_LANE) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *q = p + CRC_LANE, *r = p + 2 * CRC_LANE;
        for (size_t i = 0; i < CRC_LANE; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8);
            memcpy(&b, q + i, 8);
            memcpy(&d, r + i, 8);
            c = _mm_crc32_u64(c, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
        }
        c = crc_multiply((uint32_t)c, crc_lane_shift) ^ (uint32_t)c1;
        c = crc_multiply((uint32_t)c, crc_lane_shift) ^ (uint32_t)c2;
        p += 3 * CRC_LANE;
        n -= 3 * CRC_LANE;
    }
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c = _mm_crc32_u64(c, a);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}

static void crc_init(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("sse4.2"))
        return;
    /* x^(8 * CRC_LANE): x^1 is 0x40000000 reflected; square-and-multiply over the exponent */
    uint32_t result = 0x80000000u, base = 0x40000000u; /* 1 and x */
    for (unsigned long e = 8ul * CRC_LANE; e; e >>= 1) {
        if (e & 1)
            result = crc_multiply(result, base);
        base = crc_multiply(base, base);
    }
    crc_lane_shift = result;
    crc32c_have = 1;
}

static uint32_t crc32c_of(const unsigned char *p, size_t n) { return ~crc_hw(0xFFFFFFFFu, p, n); }
#else
static void crc_init(void) {}
static uint32_t crc32c_of(const unsigned char *p, size_t n) {
    (void)p;
    (void)n;
    return 0; /* never called: crc32c_have is 0 */
}
#endif

/* crc32c(data) -> int, the CRC32C of a bytes-like object; only where HARDWARE_CRC32C */
static PyObject *crc32c_py(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (!crc32c_have) {
        PyErr_SetString(PyExc_RuntimeError, "no hardware CRC32C here: use the crc32c package");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t value = crc32c_of(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(value);
}

/* Kafka's readUnsignedVarint: at most 5 bytes (kwsniff.protocol.wire.read_uvarint). */
static int uvarint(Walk *w, int64_t *value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        NEED(w, 1);
        unsigned char byte = w->p[w->pos++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *value = (int64_t)result;
            return 0;
        }
    }
    w->fallback = 1;
    return -1;
}

/* A length or count: classic int16 (strings) / int32, or compact uvarint minus one (KIP-482). */
static int length(Walk *w, int int32, int64_t *n) {
    if (w->flexible) {
        if (uvarint(w, n) < 0)
            return -1;
        *n -= 1;
        return 0;
    }
    int size = int32 ? 4 : 2;
    NEED(w, size);
    int64_t v = be(w->p + w->pos, size);
    *n = int32 ? (int64_t)(int32_t)v : (int64_t)(int16_t)v;
    w->pos += size;
    return 0;
}

/* A length-prefixed value: its start in *start and length in *n, -1 in *n for null. */
static int span(Walk *w, int int32, int nullable, Py_ssize_t *start, int64_t *n) {
    if (length(w, int32, n) < 0)
        return -1;
    if (*n < 0) {
        if (!nullable) {
            w->fallback = 1;
            return -1;
        }
        *n = -1;
        return 0;
    }
    if (*n > w->n - w->pos) {
        w->fallback = 1;
        return -1;
    }
    *start = w->pos;
    w->pos += *n;
    return 0;
}

static int walk_struct(Walk *w, Node *node);

static int walk_field(Walk *w, Field *f, Node *node, PyObject **held_name, PyObject **held_id);

/* The tagged fields section (KIP-482): uvarint count, then per field uvarint tag, uvarint size and
 * its data. A known tag is read, with the decoder's checks, from a window of its size and must fill
 * it exactly (compiler.py's tagged_section); none is a fact. An unknown one is skipped, as the
 * decoder keeps it raw. Where the plan has no tagged fields (a Fetch request's root, whose
 * replica_state says who fetches), any tag sends the body to the Python path. */
static int tags(Walk *w, Node *node) {
    int64_t count, tag, size;
    if (uvarint(w, &count) < 0)
        return -1;
    if (count == 0)
        return 0;
    if (node->ntagged < 0 || count * 2 > w->n - w->pos) {
        w->fallback = 1;
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        if (uvarint(w, &tag) < 0 || uvarint(w, &size) < 0)
            return -1;
        if (size > w->n - w->pos) {
            w->fallback = 1;
            return -1;
        }
        Py_ssize_t end = w->pos + size, whole = w->n;
        for (Py_ssize_t j = 0; j < node->ntagged; j++) {
            if (node->tag_numbers[j] != tag)
                continue;
            PyObject *name = NULL, *id = NULL;
            w->n = end;
            int rc = walk_field(w, &node->tagged[j], node, &name, &id);
            w->n = whole;
            Py_XDECREF(name);
            Py_XDECREF(id);
            if (rc < 0)
                return -1;
            if (w->pos != end) {
                w->fallback = 1;
                return -1;
            }
            break;
        }
        w->pos = end;
    }
    return 0;
}

static const int FIXED_SIZE[] = {0, 1, 2, 4, 8, 2, 4, 1, 16};

/* The facts of one records field, as kwsniff.rows.partitions._record_facts writes them from
 * kwsniff.records.counts_v2 (magic 2 batch headers, CRC checked). */
/* A new dict of the current topic's name and id (those it has): the facts every partition of the
 * topic starts from. */
static PyObject *topic_facts(Walk *w) {
    PyObject *t = PyDict_New();
    if (t != NULL && ((w->topic != NULL && PyDict_SetItem(t, S_topic, w->topic) < 0) ||
                      (w->topic_id != NULL && PyDict_SetItem(t, S_topic_id, w->topic_id) < 0)))
        Py_CLEAR(t);
    return t;
}

/* The facts every partition of the current topic starts from when its struct has a records field:
 * its topic and the facts of a null or empty records field (_NO_RECORDS, _NO_RECORDS_OFFSETS);
 * copying one dict is cheaper than filling a new one key by key. */
static int make_template(Walk *w) {
    PyObject *t = topic_facts(w);
    if (t == NULL)
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    int rc = zero == NULL ? -1 : 0;
    PyObject *zeros[] = {S_record_count, S_record_bytes, S_batch_count, S_crc_errors, S_partial_bytes,
                         S_control_batches, S_capped_batches, S_record_errors};
    for (size_t i = 0; rc == 0 && i < sizeof(zeros) / sizeof(zeros[0]); i++)
        rc = PyDict_SetItem(t, zeros[i], zero);
    if (rc == 0)
        rc = PyDict_SetItem(t, S_compression, Py_None);
    if (rc == 0)
        rc = PyDict_SetItem(t, S_record_error, Py_None);
    if (rc == 0 && w->offsets)
        rc = PyDict_SetItem(t, S_first_offset, Py_None) < 0 ? -1 : PyDict_SetItem(t, S_last_offset, Py_None);
    Py_XDECREF(zero);
    if (rc < 0) {
        Py_DECREF(t);
        return -1;
    }
    w->template = t;
    return 0;
}

static int record_facts(Walk *w, Py_ssize_t start, int64_t size) {
    PyObject *facts = w->facts;
    if (size <= 0)
        return 0; /* null or empty: the template's facts */
    long long count = 0, batches = 0, crc_errors = 0, control = 0, partial = 0;
    int codecs = 0, have_base = 0;
    long long base = 0, last = 0;
    const unsigned char *data = w->p + start;
    Py_ssize_t pos = 0;
    while (size > 0 && pos < size) {
        Py_ssize_t left = size - pos;
        if (left <= 16) {
            partial = left;
            break;
        }
        int32_t len = (int32_t)be(data + pos + 8, 4);
        if (data[pos + 16] != 2 || len < 49) {
            w->fallback = 1;
            return -1;
        }
        if ((int64_t)len > left - 12) {
            partial = left;
            break;
        }
        const unsigned char *h = data + pos;
        uint32_t crc = (uint32_t)be(h + 17, 4);
        int attributes = (int)(uint16_t)be(h + 21, 2);
        int32_t delta = (int32_t)be(h + 23, 4);
        int32_t records = (int32_t)be(h + 57, 4);
        long long first = (long long)be(h, 8);
        if (records < 0 || (attributes & 0x07) > 4) {
            w->fallback = 1;
            return -1;
        }
        Py_ssize_t end = pos + 12 + len;
        batches++;
        unsigned long value;
        if (crc32c_have) {
            value = crc32c_of(data + pos + 21, (size_t)(end - pos - 21));
        } else {
            PyObject *view = PyMemoryView_FromMemory((char *)(data + pos + 21), end - pos - 21, PyBUF_READ);
            if (view == NULL)
                return -1;
            PyObject *got = PyObject_CallOneArg(w->crc32c, view);
            Py_DECREF(view);
            if (got == NULL)
                return -1;
            value = PyLong_AsUnsignedLong(got);
            Py_DECREF(got);
            if (value == (unsigned long)-1 && PyErr_Occurred())
                return -1;
        }
        if (value != crc)
            crc_errors++;
        codecs |= 1 << (attributes & 0x07);
        count += records;
        if (!have_base) {
            base = first;
            have_base = 1;
        }
        /* baseOffset + lastOffsetDelta past int64 (a base near 2^63): checked before it could wrap,
         * and the Python path answers (the last offset is null there, counted as past int64) */
        if (__builtin_add_overflow(first, (long long)delta, &last)) {
            w->fallback = 1;
            return -1;
        }
        if (attributes & 0x20)
            control++;
        pos = end;
    }
    PyObject *compression = Py_None;
    if (codecs & (codecs - 1))
        compression = S_mixed;
    else if (codecs)
        for (int i = 0; i < 5; i++)
            if (codecs == (1 << i))
                compression = CODECS[i];
    PyObject *v;
#define SET_LL(key, x)                                                                                     \
    do {                                                                                                   \
        v = PyLong_FromLongLong(x);                                                                        \
        if (v == NULL || PyDict_SetItem(facts, key, v) < 0) {                                              \
            Py_XDECREF(v);                                                                                 \
            return -1;                                                                                     \
        }                                                                                                  \
        Py_DECREF(v);                                                                                      \
    } while (0)
    /* The facts start as a copy of the topic's template (make_template), which holds a null records
     * field's facts: 0 counts, no compression, no record error, no offsets. Only what differs from
     * it is written; capped_batches and record_errors stay 0 here (counts_v2 caps nothing and reads
     * no record). */
    SET_LL(S_record_bytes, size);
    if (count)
        SET_LL(S_record_count, count);
    if (batches)
        SET_LL(S_batch_count, batches);
    if (compression != Py_None && PyDict_SetItem(facts, S_compression, compression) < 0)
        return -1;
    if (crc_errors)
        SET_LL(S_crc_errors, crc_errors);
    if (partial)
        SET_LL(S_partial_bytes, partial);
    if (control)
        SET_LL(S_control_batches, control);
    if (w->offsets && have_base) {
        SET_LL(S_first_offset, base);
        SET_LL(S_last_offset, last);
    }
#undef SET_LL
    return 0;
}

/* One integer field: checked as an error code, kept as a root value, a partition or a fact. */
static int int_field(Walk *w, Field *f, Node *node) {
    int size = FIXED_SIZE[f->code];
    NEED(w, size);
    int64_t raw = be(w->p + w->pos, size);
    w->pos += size;
    long long value;
    switch (f->code) {
    case F_INT8:
        value = (int8_t)raw;
        break;
    case F_INT16:
        value = (int16_t)raw;
        break;
    case F_INT32:
        value = (int32_t)raw;
        break;
    case F_BOOL:
        value = raw != 0;
        break;
    default: /* int64, uint16, uint32 */
        value = raw;
    }
    if (((f->flags & FL_ERROR) && value != 0) || ((f->flags & FL_NAMED) && value >= 0)) {
        w->fallback = 1;
        return -1;
    }
    PyObject *target = NULL;
    if (f->flags & FL_ROOT)
        target = w->root_values;
    else if (node->role == R_PARTITION && w->facts != NULL && f->column != NULL)
        target = w->facts;
    if (target == NULL)
        return 0;
    PyObject *v = f->code == F_BOOL ? PyBool_FromLong((long)value) : PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    if (f->flags & FL_PARTITION) {
        Py_XSETREF(w->partition, v);
        return PyDict_SetItem(target, S_partition, v);
    }
    int rc = PyDict_SetItem(target, f->column, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *uuid_text(const unsigned char *b) {
    static const char hex[] = "0123456789abcdef";
    char s[36];
    int j = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            s[j++] = '-';
        s[j++] = hex[b[i] >> 4];
        s[j++] = hex[b[i] & 15];
    }
    return PyUnicode_FromStringAndSize(s, 36);
}

static int walk_field(Walk *w, Field *f, Node *node, PyObject **held_name, PyObject **held_id) {
    int64_t n;
    Py_ssize_t start = 0;
    switch (f->code) {
    case F_SKIP:
        NEED(w, f->size);
        w->pos += f->size;
        return 0;
    case F_INT8:
    case F_INT16:
    case F_INT32:
    case F_INT64:
    case F_UINT16:
    case F_UINT32:
    case F_BOOL:
        return int_field(w, f, node);
    case F_UUID:
        NEED(w, 16);
        if (f->flags & FL_TOPIC_ID) {
            const unsigned char *b = w->p + w->pos;
            int zero = 1;
            for (int i = 0; i < 16; i++)
                zero &= b[i] == 0;
            if (!zero) {
                if (w->metadata_id != NULL && memcmp(b, w->metadata_id, 16) == 0) {
                    w->fallback = 1;
                    return -1;
                }
                PyObject *text = uuid_text(b);
                if (text == NULL)
                    return -1;
                Py_XSETREF(*held_id, text);
            }
        }
        w->pos += 16;
        return 0;
    case F_STRING:
        if (span(w, 0, f->flags & FL_NULLABLE, &start, &n) < 0)
            return -1;
        if ((f->flags & FL_TOPIC_NAME) && n > 0 && *held_name == NULL) {
            PyObject *name = PyUnicode_DecodeUTF8((const char *)w->p + start, n, "replace");
            if (name == NULL)
                return -1;
            if (w->metadata_topic != Py_None) {
                int same = PyUnicode_Compare(name, w->metadata_topic) == 0;
                if (same) {
                    Py_DECREF(name);
                    w->fallback = 1;
                    return -1;
                }
            }
            *held_name = name;
        }
        return 0;
    case F_BYTES:
        return span(w, 1, f->flags & FL_NULLABLE, &start, &n);
    case F_RECORDS:
        if (span(w, 1, f->flags & FL_NULLABLE, &start, &n) < 0)
            return -1;
        if (node->role == R_PARTITION && w->facts != NULL)
            return record_facts(w, start, n);
        return 0;
    case F_STRUCT:
        if (f->flags & FL_NULLABLE) {
            NEED(w, 1);
            if ((signed char)w->p[w->pos++] < 0)
                return 0;
        }
        return walk_struct(w, f->child);
    case F_ARRAY_STRUCT:
    case F_ARRAY_FIXED:
    case F_ARRAY_VAR:
        if (length(w, 1, &n) < 0)
            return -1;
        if (n < 0) {
            if (!(f->flags & FL_NULLABLE)) {
                w->fallback = 1;
                return -1;
            }
            return 0;
        }
        if (n > w->n - w->pos) { /* every element takes at least one byte */
            w->fallback = 1;
            return -1;
        }
        if (f->code == F_ARRAY_FIXED) {
            NEED(w, n * f->size);
            w->pos += n * f->size;
            return 0;
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t each;
            if (f->code == F_ARRAY_VAR) {
                if (span(w, f->size == 1, 0, &start, &each) < 0)
                    return -1;
            } else if (walk_struct(w, f->child) < 0)
                return -1;
        }
        return 0;
    }
    w->fallback = 1;
    return -1;
}

/* The partition's facts into `out` under (None, topic id or name, partition), merged with any
 * earlier ones of the same key (fact_compiler._KEEP). */
static int keep(Walk *w) {
    PyObject *facts = w->facts;
    if (w->partition == NULL) {
        w->fallback = 1;
        return -1;
    }
    PyObject *topic = w->topic_id != NULL ? w->topic_id : w->topic;
    PyObject *key = PyTuple_Pack(3, Py_None, topic, w->partition);
    if (key == NULL)
        return -1;
    /* None, a str and an int: no cycle through it, so the garbage collector need not count it (a
     * Fetch of 1,200 partitions otherwise sets off a young collection or two) */
    PyObject_GC_UnTrack(key);
    /* one lookup: the facts go in under a new key, or update the earlier ones of that key */
    PyObject *had = PyDict_SetDefault(w->out, key, facts);
    Py_DECREF(key);
    if (had == NULL)
        return -1;
    return had == facts ? 0 : PyDict_Update(had, facts);
}

static int walk_struct(Walk *w, Node *node) {
    int rc = 0;
    PyObject *name = NULL, *id = NULL;
    if (node->role == R_TOPIC) {
        Py_CLEAR(w->template);
        Py_CLEAR(w->plain);
    }
    if (node->role == R_PARTITION && (w->topic != NULL || w->topic_id != NULL)) {
        if (node->has_records) {
            if (w->template == NULL && make_template(w) < 0)
                return -1;
            w->facts = PyDict_Copy(w->template);
            if (w->facts == NULL)
                return -1;
        } else {
            /* no records field: the topic's name and id alone, copied from a dict made once a topic */
            if (w->plain == NULL && (w->plain = topic_facts(w)) == NULL)
                return -1;
            w->facts = PyDict_Copy(w->plain);
            if (w->facts == NULL)
                return -1;
        }
    }
    for (Py_ssize_t i = 0; rc == 0 && i < node->nfields; i++) {
        Field *f = &node->fields[i];
        rc = walk_field(w, f, node, &name, &id);
        if (node->role == R_TOPIC) {
            /* the topic's name and id (read before its partitions) are their context */
            w->topic = name;
            w->topic_id = id;
        }
    }
    if (rc == 0 && w->flexible)
        rc = tags(w, node);
    if (node->role == R_PARTITION && w->facts != NULL) {
        if (rc == 0)
            rc = keep(w);
        Py_CLEAR(w->facts);
        Py_CLEAR(w->partition);
    }
    if (node->role == R_TOPIC) {
        Py_CLEAR(w->template);
        Py_CLEAR(w->plain);
        w->topic = NULL;
        w->topic_id = NULL;
        Py_XDECREF(name);
        Py_XDECREF(id);
    }
    return rc;
}

/* walk(plan, body, out, crc32c, metadata_topic, metadata_id) -> dict of root values, or None */
static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *capsule, *body, *out, *crc32c, *metadata_topic;
    const char *meta_id = NULL;
    Py_ssize_t meta_len = 0;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "OOO!OOz#", &capsule, &body, &PyDict_Type, &out, &crc32c, &metadata_topic,
                          &meta_id, &meta_len))
        return NULL;
    Plan *plan = PyCapsule_GetPointer(capsule, "kwsniff.partfacts.plan");
    if (plan == NULL)
        return NULL;
    if ((meta_id != NULL && meta_len != 16) || (metadata_topic != Py_None && !PyUnicode_Check(metadata_topic))) {
        PyErr_SetString(PyExc_ValueError, "metadata topic: a str or None; its id: 16 bytes or None");
        return NULL;
    }
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Walk w;
    memset(&w, 0, sizeof(w));
    w.p = view.buf;
    w.n = view.len;
    w.flexible = plan->flexible;
    w.offsets = plan->offsets;
    w.crc32c = crc32c;
    w.metadata_topic = metadata_topic;
    w.metadata_id = (const unsigned char *)meta_id;
    /* The caller's dict is filled directly when it is empty (as request_info and response_info pass
     * it), and emptied again if the walker gives up; else a dict of its own is merged in at the end. */
    int direct = PyDict_GET_SIZE(out) == 0;
    w.out = direct ? Py_NewRef(out) : PyDict_New();
    w.root_values = PyDict_New();
    PyObject *result = NULL;
    if (w.out != NULL && w.root_values != NULL) {
        int rc = walk_struct(&w, plan->root);
        if (rc == 0 && w.pos != w.n)
            w.fallback = 1; /* trailing bytes: the Python path notes them */
        if (rc == 0 && !w.fallback) {
            if (direct || PyDict_Update(out, w.out) == 0) {
                result = w.root_values;
                w.root_values = NULL;
            }
        } else if (w.fallback && !PyErr_Occurred()) {
            result = Py_NewRef(Py_None);
        }
    }
    if (direct && (result == NULL || result == Py_None))
        PyDict_Clear(out);
    Py_XDECREF(w.facts);
    Py_XDECREF(w.partition);
    Py_XDECREF(w.template);
    Py_XDECREF(w.plain);
    Py_XDECREF(w.out);
    Py_XDECREF(w.root_values);
    PyBuffer_Release(&view);
    return result;
}


/* ----------------------------------------------------------------------------------- merged rows */

static int slot(PyObject *index, PyObject *name) {
    PyObject *i = PyDict_GetItemWithError(index, name);
    return i == NULL ? -1 : (int)PyLong_AsLong(i);
}

static void put(PyObject *row, int i, PyObject *v) {
    if (i < 0)
        return;
    Py_INCREF(v);
    Py_SETREF(PyTuple_GET_ITEM(row, i), v);
}

/* One merged row as a tuple in schema order, or Py_None when it needs the Python path (records
 * kept, record damage to count, an error code, a topic id without a name yet). New reference. */
/* Positions of the columns merge_one computes, looked up once per exchange (-1: not in the table). */
typedef struct {
    int topic, error_name, first_offset, last_offset, lag;
} Slots;

/* Column positions of the fact names met in one merge_rows call, by the names' addresses: the same
 * few names (interned by the plan) come back in every partition's facts, and a pointer probe costs
 * a fraction of a dict lookup. The names are the facts dicts' keys, alive for the whole call. */
#define SLOT_CACHE 128
/* What merge_one reads of a fact besides its column: RO_NONE, or one of these (the names the Python
 * function looks up). */
enum {
    RO_NONE,
    RO_RECORDS,
    RO_PAST_INT64,
    RO_CRC_ERRORS,
    RO_CAPPED_BATCHES,
    RO_RECORD_ERRORS,
    RO_ERROR_CODE,
    RO_TOPIC,
    RO_TOPIC_ID,
    RO_RECORD_COUNT,
    RO_BASE_OFFSET,
    RO_HIGH_WATERMARK,
    RO_FETCH_OFFSET,
    RO_COUNT
};
typedef struct {
    PyObject *index;
    struct {
        PyObject *key;
        int slot;
        int role;
    } e[SLOT_CACHE];
} SlotCache;

/* A fact name's role (by equality, as the dict lookups it replaces compare): RO_*, or -1 error set. */
static int key_role(PyObject *key) {
    PyObject *names[RO_COUNT] = {NULL,          S_records,      S_past_int64,     S_crc_errors, S_capped_batches,
                                 S_record_errors, S_error_code, S_topic,          S_topic_id,   S_record_count,
                                 S_base_offset,   S_high_watermark, S_fetch_offset};
    for (int r = 1; r < RO_COUNT; r++) {
        int eq = key == names[r] ? 1 : PyObject_RichCompareBool(key, names[r], Py_EQ);
        if (eq != 0)
            return eq < 0 ? -1 : r;
    }
    return RO_NONE;
}

/* The column position of a fact name (-1: none) and its role in *role; -1 with an error set on
 * failure. */
static int cached_slot(SlotCache *cache, PyObject *key, int *role) {
    size_t h = ((uintptr_t)key >> 4) & (SLOT_CACHE - 1);
    for (int probe = 0; probe < SLOT_CACHE; probe++) {
        size_t at = (h + probe) & (SLOT_CACHE - 1);
        if (cache->e[at].key == key) {
            *role = cache->e[at].role;
            return cache->e[at].slot;
        }
        if (cache->e[at].key == NULL) {
            int i = slot(cache->index, key);
            if (i < 0 && PyErr_Occurred())
                return -1;
            int r = key_role(key);
            if (r < 0)
                return -1;
            cache->e[at].key = key;
            cache->e[at].slot = i;
            cache->e[at].role = *role = r;
            return i;
        }
    }
    int i = slot(cache->index, key);
    if (i < 0 && PyErr_Occurred())
        return -1;
    *role = key_role(key);
    return *role < 0 ? -1 : i;
}

/* The value of an int fact as a long long in *x: 1, or 0 (no error set) where it is not an exact int
 * of int64's range. */
static int int64_fact(PyObject *v, long long *x) {
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    *x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* A fact's value as the Python function looks it up: the response's over the request's (found[] holds
 * that already), else the context's (ctx may be NULL); NULL if none has it. Borrowed. */
static PyObject *found_or(PyObject *const *found, int role, PyObject *ctx, PyObject *name) {
    if (found[role] != NULL || ctx == NULL)
        return found[role];
    return PyDict_GetItemWithError(ctx, name);
}

static int truthy(PyObject *v) { return v != NULL && v != Py_None && PyObject_IsTrue(v) == 1; }

static PyObject *merge_one(SlotCache *index, const Slots *slots, PyObject *base, PyObject *ctx, PyObject *rq,
                           PyObject *rs, int produce, PyObject *names, PyObject *none_name) {
    Py_ssize_t n = PyTuple_GET_SIZE(base);
    PyObject *row = PyTuple_New(n);
    if (row == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(row, i, Py_NewRef(PyTuple_GET_ITEM(base, i)));
    /* One pass over the facts: each into its column (the response's after the request's, so over
     * them, as {**context, **request, **response}), and the values the row's checks and derived
     * columns read, by role, where the Python function looks each up. */
    PyObject *found[RO_COUNT] = {NULL};
    PyObject *parts[2] = {rq, rs};
    for (int j = 0; j < 2; j++) {
        if (parts[j] == NULL)
            continue;
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(parts[j], &pos, &k, &v)) {
            int role = RO_NONE;
            int i = cached_slot(index, k, &role);
            if (i < 0 && PyErr_Occurred())
                goto fail;
            if (role == RO_RECORDS || role == RO_PAST_INT64)
                goto python; /* records kept, or a value past int64 to count */
            found[role] = v;
            put(row, i, v);
        }
    }
    if (truthy(found[RO_CRC_ERRORS]) || truthy(found[RO_CAPPED_BATCHES]) || truthy(found[RO_RECORD_ERRORS]))
        goto python; /* record damage to count */
    PyObject *code = found_or(found, RO_ERROR_CODE, ctx, S_error_code);
    int code_zero = 0;
    if (code != NULL && code != Py_None) {
        if (!PyLong_CheckExact(code) || PyLong_AsLong(code) != 0)
            goto python;
        code_zero = 1;
    }
    PyObject *topic = found_or(found, RO_TOPIC, ctx, S_topic);
    if (topic == NULL || topic == Py_None) {
        PyObject *tid = found_or(found, RO_TOPIC_ID, ctx, S_topic_id);
        if (tid != NULL && tid != Py_None) {
            PyObject *named = PyDict_GetItemWithError(names, tid);
            if (named == NULL)
                goto python; /* a topic id not named yet (or an error) */
            put(row, slots->topic, named);
        }
    }
    put(row, slots->error_name, code_zero ? none_name : Py_None);
    /* The derived columns are computed in long long, each sum checked before it could wrap: one past
     * int64 (or a value that is not an int64) sends the row to the Python path, which leaves it null
     * and counts it (partitions._derived). */
    if (produce && found[RO_RECORD_COUNT] != NULL) {
        PyObject *first = found_or(found, RO_BASE_OFFSET, ctx, S_base_offset);
        long long first_v, count_v, last_v;
        if (code_zero && first != NULL && first != Py_None) {
            if (!int64_fact(first, &first_v))
                goto python;
        }
        if (code_zero && first != NULL && first != Py_None && first_v >= 0) {
            PyObject *count = found[RO_RECORD_COUNT];
            put(row, slots->first_offset, first);
            if (count != Py_None && PyObject_IsTrue(count) == 1) {
                if (!int64_fact(count, &count_v) || __builtin_add_overflow(first_v, count_v - 1, &last_v))
                    goto python;
                PyObject *last = PyLong_FromLongLong(last_v);
                if (last == NULL)
                    goto fail;
                put(row, slots->last_offset, last);
                Py_DECREF(last);
            } else
                put(row, slots->last_offset, Py_None);
        }
    }
    PyObject *hw = found_or(found, RO_HIGH_WATERMARK, ctx, S_high_watermark);
    PyObject *fo = hw == NULL ? NULL : found_or(found, RO_FETCH_OFFSET, ctx, S_fetch_offset);
    if (hw != NULL && fo != NULL && (hw == Py_None || fo == Py_None))
        put(row, slots->lag, Py_None); /* a value a snap length cut hid: the lag is unknown too */
    else if (hw != NULL && fo != NULL) {
        long long hw_v, fo_v, lag_v;
        if (!int64_fact(hw, &hw_v) || !int64_fact(fo, &fo_v) || __builtin_sub_overflow(hw_v, fo_v, &lag_v))
            goto python;
        PyObject *lag = PyLong_FromLongLong(lag_v);
        if (lag == NULL)
            goto fail;
        put(row, slots->lag, lag);
        Py_DECREF(lag);
    }
    if (PyErr_Occurred())
        goto fail;
    /* A row of ints, strings and None holds no reference cycle: untracked, the garbage collector
     * does not walk the 10,000 rows a table buffers at every collection (CPython untracks such
     * tuples itself, but only once a collection has visited them). */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(row, i);
        /* ints, strings, floats and None are of no GC type: a flag test, not a call */
        if (PyType_IS_GC(Py_TYPE(item)) && PyObject_GC_IsTracked(item))
            return row;
    }
    PyObject_GC_UnTrack(row);
    return row;
python:
    Py_DECREF(row);
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
fail:
    Py_DECREF(row);
    return NULL;
}

/* 1 where both dicts hold equal keys in the same order (the response's partitions are the
 * request's), 0 where not, -1 with an error set. */
static int same_keys(PyObject *req, PyObject *resp) {
    if (PyDict_GET_SIZE(req) != PyDict_GET_SIZE(resp) || PyDict_GET_SIZE(req) == 0)
        return 0;
    Py_ssize_t pos = 0, at = 0;
    PyObject *k1, *k2, *v;
    while (PyDict_Next(req, &pos, &k1, &v)) {
        if (!PyDict_Next(resp, &at, &k2, &v))
            return 0;
        int eq = PyObject_RichCompareBool(k1, k2, Py_EQ);
        if (eq != 1)
            return eq;
    }
    return 1;
}

/* merged_rows' rows of one exchange's request and response parts, in its order: a new list of row
 * tuples (Py_None where the Python path must build the row), or NULL with an error set. */

/* Append a merged row (NULL: the merge failed) to ``out``, giving up the row's reference; -1 on
 * failure with the exception set. */
static int append_row(PyObject *out, PyObject *row) {
    if (row == NULL)
        return -1;
    int appended = PyList_Append(out, row);
    Py_DECREF(row);
    return appended;
}

static PyObject *merge_parts(SlotCache *cache, const Slots *slots, PyObject *base, PyObject *ctx, PyObject *req,
                             PyObject *resp, int produce, PyObject *names, PyObject *none_name) {
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    switch (same_keys(req, resp)) {
    case -1:
        Py_DECREF(out);
        return NULL;
    case 1: {
        /* A response names the request's partitions in the request's order (the common case): each
         * pair merged as it comes, with no lookup of one dict's key in the other. */
        Py_ssize_t pos = 0, at = 0;
        PyObject *key, *rq, *rs, *k2;
        while (PyDict_Next(req, &pos, &key, &rq) && PyDict_Next(resp, &at, &k2, &rs)) {
            if (!PyDict_Check(rq) || !PyDict_Check(rs)) {
                PyErr_SetString(PyExc_TypeError, "facts must be dicts");
                Py_DECREF(out);
                return NULL;
            }
            if (append_row(out, merge_one(cache, slots, base, ctx, rq, rs, produce, names, none_name)) < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
        return out;
    }
    }
    for (int side = 0; side < 2; side++) {
        PyObject *keys = side == 0 ? req : resp;
        Py_ssize_t pos = 0;
        PyObject *key, *facts;
        while (PyDict_Next(keys, &pos, &key, &facts)) {
            PyObject *rq, *rs;
            if (side == 0) {
                rq = facts;
                rs = PyDict_GetItemWithError(resp, key);
            } else {
                if (PyDict_Contains(req, key))
                    continue; /* merged with the request's, above */
                rq = NULL;
                rs = facts;
            }
            if (PyErr_Occurred() || !PyDict_Check(rq != NULL ? rq : rs) || (rs != NULL && !PyDict_Check(rs))) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "facts must be dicts");
                Py_DECREF(out);
                return NULL;
            }
            if (append_row(out, merge_one(cache, slots, base, ctx, rq, rs, produce, names, none_name)) < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
    }
    return out;
}

/* merge_rows(index, base, context, request parts, response parts, produce, topic names, "NONE")
 *   -> [row tuple, or None where the Python path must build the row], in merged_rows' order */
static PyObject *merge_rows(PyObject *self, PyObject *args) {
    PyObject *index, *base, *ctx, *req, *resp, *names, *none_name;
    int produce;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!pO!U", &PyDict_Type, &index, &PyTuple_Type, &base, &PyDict_Type, &ctx,
                          &PyDict_Type, &req, &PyDict_Type, &resp, &produce, &PyDict_Type, &names, &none_name))
        return NULL;
    Slots slots = {slot(index, S_topic), slot(index, S_error_name), slot(index, S_first_offset),
                   slot(index, S_last_offset), slot(index, S_lag)};
    if (PyErr_Occurred())
        return NULL;
    SlotCache cache;
    memset(&cache, 0, sizeof cache);
    cache.index = index;
    return merge_parts(&cache, &slots, base, ctx, req, resp, produce, names, none_name);
}

/* 1 and the value in *x where v is an exact int within +-2^53 (where sums stay exact as the Python
 * function's), else 0 with no error set: that function answers. */
static int small_int(PyObject *v, long long *x) {
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    *x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*x == -1 && PyErr_Occurred()) || *x > (1LL << 53) || *x < -(1LL << 53)) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* record_totals(info, parts) -> True once info holds partitions.record_totals' answer (the sums of
 * the partitions' record_count and record_bytes, or None for both where a count was cut), False where
 * a value is not a small int or None: the Python function answers. */
static PyObject *record_totals(PyObject *self, PyObject *args) {
    PyObject *info, *parts;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &info, &PyDict_Type, &parts))
        return NULL;
    long long count = 0, bytes = 0;
    int counted = 0, cut = 0;
    Py_ssize_t pos = 0;
    PyObject *key, *facts;
    while (PyDict_Next(parts, &pos, &key, &facts)) {
        if (!PyDict_CheckExact(facts))
            Py_RETURN_FALSE;
        PyObject *c = PyDict_GetItemWithError(facts, S_record_count);
        if (c == NULL) {
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        counted = 1;
        if (c == Py_None) {
            cut = 1;
            continue;
        }
        long long x;
        if (!small_int(c, &x))
            Py_RETURN_FALSE;
        count += x;
    }
    if (!counted)
        Py_RETURN_TRUE;
    if (cut) {
        if (PyDict_SetItem(info, S_record_count, Py_None) < 0 || PyDict_SetItem(info, S_record_bytes, Py_None) < 0)
            return NULL;
        Py_RETURN_TRUE;
    }
    pos = 0;
    while (PyDict_Next(parts, &pos, &key, &facts)) {
        PyObject *b = PyDict_GetItemWithError(facts, S_record_bytes);
        if (b == NULL) {
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        long long x;
        if (!small_int(b, &x))
            Py_RETURN_FALSE;
        bytes += x;
    }
    PyObject *total = PyLong_FromLongLong(count);
    if (total == NULL || PyDict_SetItem(info, S_record_count, total) < 0) {
        Py_XDECREF(total);
        return NULL;
    }
    Py_DECREF(total);
    total = PyLong_FromLongLong(bytes);
    if (total == NULL || PyDict_SetItem(info, S_record_bytes, total) < 0) {
        Py_XDECREF(total);
        return NULL;
    }
    Py_DECREF(total);
    Py_RETURN_TRUE;
}

/* --------------------------------------------------------------------------------- exchange rows */

/* The rows of one Produce or Fetch exchange in the common case, as kwsniff.rows.builder's
 * ExchangeRows.exchange writes them (its _requests_row, _context, _exchange, _who, _broker and
 * _partition_values): the `requests` row and the `partitions` rows as value tuples in the sink's
 * column order, with no row dict. Where a column's value comes from is the plan's (compiled.py's
 * REQUESTS_SOURCES, one code per column); the Python methods stay the statement of each rule and
 * tests/test_partfacts.py compares both paths' tables. exchange_rows() answers None, before anything
 * is written, wherever the exchange is not the common case: a reason (an error, a cut, a note), a
 * group, a broker with no node id yet (its rows are held), an error code, a `partitions` row the
 * Python path builds. */
enum {
    X_NONE, /* a column the exchange leaves null */
    X_CAPTURE,
    X_CONN_ID,
    X_CORRELATION_ID,
    X_API_KEY,
    X_API_NAME,
    X_API_VERSION,
    X_CLIENT_ID,
    X_CLIENT_IP,
    X_TS_REQUEST,
    X_TS_RESPONSE,
    X_LATENCY_MS,
    X_BROKER_IP,
    X_BROKER_PORT,
    X_BROKER_ID,
    X_REQUEST_BYTES,
    X_RESPONSE_BYTES,
    X_ERROR_NAME,
    X_STATUS,
    X_REASON,
    X_REMOVED_IN,
    X_FIXED_COUNT,
    X_REQUEST = X_FIXED_COUNT, /* the request summary's value under the column's key */
    X_RESPONSE,                /* the response summary's */
    X_EITHER,                  /* the request's, else the response's */
    X_CODES
};

typedef struct {
    Py_ssize_t n_requests, n_partitions;
    int *codes;       /* the requests columns' sources, then the partitions columns' */
    PyObject **keys;  /* the summary key of an X_REQUEST, X_RESPONSE or X_EITHER column, else NULL */
    PyObject *index;  /* partitions column -> position */
    Slots slots;
    PyObject *names;  /* {(api key, version): (api_name, removed_in)}, from the Python functions */
    PyObject *api_name, *removed_in;
    PyObject *none_name, *ok;
} ExchangePlan;

static PyObject *S_api_key, *S_api_version, *S_correlation_id, *S_client_id, *S_ts_last, *S_ts_first, *S_size,
    *S_error, *S_cut, *S_note, *S_group, *S_group_id, *S_member_epoch, *S_partitions, *S_broker_ip,
    *S_broker_port, *S_broker_id;

static void exchange_plan_free(PyObject *capsule) {
    ExchangePlan *plan = PyCapsule_GetPointer(capsule, "kwsniff.partfacts.exchange");
    if (plan == NULL)
        return;
    for (Py_ssize_t i = 0; plan->keys != NULL && i < plan->n_requests + plan->n_partitions; i++)
        Py_XDECREF(plan->keys[i]);
    PyMem_Free(plan->codes);
    PyMem_Free(plan->keys);
    Py_XDECREF(plan->index);
    Py_XDECREF(plan->names);
    Py_XDECREF(plan->api_name);
    Py_XDECREF(plan->removed_in);
    Py_XDECREF(plan->none_name);
    Py_XDECREF(plan->ok);
    PyMem_Free(plan);
}

/* exchange_plan(requests sources, partitions sources, partitions index, api_name, removed_in, "NONE",
 * "ok"): each sources a tuple of (code, key or None), one per column in the sink's order */
static PyObject *exchange_plan(PyObject *self, PyObject *args) {
    PyObject *req_src, *part_src, *index, *api_name_fn, *removed_in_fn, *none_name, *ok;
    if (!PyArg_ParseTuple(args, "O!O!O!OOUU", &PyTuple_Type, &req_src, &PyTuple_Type, &part_src, &PyDict_Type,
                          &index, &api_name_fn, &removed_in_fn, &none_name, &ok))
        return NULL;
    ExchangePlan *plan = PyMem_Calloc(1, sizeof(ExchangePlan));
    if (plan == NULL)
        return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(plan, "kwsniff.partfacts.exchange", exchange_plan_free);
    if (capsule == NULL) {
        PyMem_Free(plan);
        return NULL;
    }
    plan->n_requests = PyTuple_GET_SIZE(req_src);
    plan->n_partitions = PyTuple_GET_SIZE(part_src);
    Py_ssize_t n = plan->n_requests + plan->n_partitions;
    plan->codes = PyMem_Calloc(n ? n : 1, sizeof(int));
    plan->keys = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    if (plan->codes == NULL || plan->keys == NULL) {
        Py_DECREF(capsule);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyTuple_GET_ITEM(i < plan->n_requests ? req_src : part_src,
                                          i < plan->n_requests ? i : i - plan->n_requests);
        PyObject *key;
        if (!PyArg_ParseTuple(spec, "iO", &plan->codes[i], &key)) {
            Py_DECREF(capsule);
            return NULL;
        }
        int code = plan->codes[i];
        int keyed = code >= X_REQUEST && code < X_CODES;
        if (code < 0 || code >= X_CODES || keyed != PyUnicode_Check(key) || (!keyed && key != Py_None) ||
            (i >= plan->n_requests && code != X_REQUEST && code >= X_REQUEST_BYTES)) {
            PyErr_Format(PyExc_ValueError, "column %zd: source (%d, %R)", i, code, key);
            Py_DECREF(capsule);
            return NULL;
        }
        if (keyed) {
            Py_INCREF(key);
            PyUnicode_InternInPlace(&key);
            plan->keys[i] = key;
        }
    }
    plan->slots = (Slots){slot(index, S_topic), slot(index, S_error_name), slot(index, S_first_offset),
                          slot(index, S_last_offset), slot(index, S_lag)};
    plan->names = PyDict_New();
    if (PyErr_Occurred() || plan->names == NULL) {
        Py_DECREF(capsule);
        return NULL;
    }
    plan->index = Py_NewRef(index);
    plan->api_name = Py_NewRef(api_name_fn);
    plan->removed_in = Py_NewRef(removed_in_fn);
    plan->none_name = Py_NewRef(none_name);
    plan->ok = Py_NewRef(ok);
    return capsule;
}

/* (api_name, removed_in) of an api key and version, borrowed; NULL with an error set. */
static PyObject *api_names(ExchangePlan *plan, PyObject *key, PyObject *version) {
    PyObject *pair = PyTuple_Pack(2, key, version);
    if (pair == NULL)
        return NULL;
    PyObject *names = PyDict_GetItemWithError(plan->names, pair);
    if (names == NULL && !PyErr_Occurred()) {
        PyObject *name = PyObject_CallOneArg(plan->api_name, key);
        PyObject *removed = name == NULL ? NULL : PyObject_CallFunctionObjArgs(plan->removed_in, key, version, NULL);
        PyObject *both = removed == NULL ? NULL : PyTuple_Pack(2, name, removed);
        Py_XDECREF(name);
        Py_XDECREF(removed);
        if (both != NULL && PyDict_SetItem(plan->names, pair, both) == 0)
            names = both; /* the dict holds it */
        Py_XDECREF(both);
    }
    Py_DECREF(pair);
    return names;
}

/* A tuple of ints, strings, floats and None holds no reference cycle: untracked, the garbage
 * collector does not walk the rows a table buffers (as merge_one's). */
static void untrack_plain(PyObject *row) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(row); i++) {
        PyObject *item = PyTuple_GET_ITEM(row, i);
        if (PyType_IS_GC(Py_TYPE(item)) && PyObject_GC_IsTracked(item))
            return;
    }
    PyObject_GC_UnTrack(row);
}

/* One column's value from its source (borrowed; NULL: null). */
static PyObject *source_value(int code, PyObject *key, PyObject *const *fixed, PyObject *reqi, PyObject *respi) {
    PyObject *v;
    switch (code) {
    case X_REQUEST:
        return PyDict_GetItemWithError(reqi, key);
    case X_RESPONSE:
        return PyDict_GetItemWithError(respi, key);
    case X_EITHER:
        v = PyDict_GetItemWithError(reqi, key);
        return v != NULL || PyErr_Occurred() ? v : PyDict_GetItemWithError(respi, key);
    default:
        return fixed[code];
    }
}

/* exchange_rows(plan, (capture, conn_id, client_ip), broker fields, request, response, request summary,
 * response summary, topic names) -> (requests row, [partitions rows] or None), or None: the Python
 * path writes this exchange */
static PyObject *exchange_rows(PyObject *self, PyObject *args) {
    PyObject *capsule, *handler, *broker, *req, *resp, *reqi, *respi, *topic_names;
    if (!PyArg_ParseTuple(args, "OO!O!OOO!O!O!", &capsule, &PyTuple_Type, &handler, &PyDict_Type, &broker, &req,
                          &resp, &PyDict_Type, &reqi, &PyDict_Type, &respi, &PyDict_Type, &topic_names))
        return NULL;
    ExchangePlan *plan = PyCapsule_GetPointer(capsule, "kwsniff.partfacts.exchange");
    if (plan == NULL)
        return NULL;
    if (PyTuple_GET_SIZE(handler) != 3) {
        PyErr_SetString(PyExc_TypeError, "exchange_rows: (capture, conn_id, client_ip)");
        return NULL;
    }
    PyObject *result = NULL, *row = NULL, *rows = NULL, *base = NULL;
    PyObject *owned[X_FIXED_COUNT] = {NULL}; /* new references among fixed[] */
    PyObject *fixed[X_FIXED_COUNT] = {NULL};
    static PyObject **const attrs[] = {&S_api_key, &S_api_version, &S_correlation_id, &S_client_id, &S_ts_last,
                                       &S_size, &S_error, &S_cut};
    static const int attr_codes[] = {X_API_KEY, X_API_VERSION, X_CORRELATION_ID, X_CLIENT_ID, X_TS_REQUEST,
                                     X_REQUEST_BYTES, -1, -1};
    static PyObject **const resp_attrs[] = {&S_ts_first, &S_size, &S_error, &S_cut};
    static const int resp_codes[] = {X_TS_RESPONSE, X_RESPONSE_BYTES, -1, -1};
    for (int side = 0; side < 2; side++) {
        int count = side == 0 ? 8 : 4;
        for (int i = 0; i < count; i++) {
            PyObject *v = PyObject_GetAttr(side == 0 ? req : resp, *(side == 0 ? attrs : resp_attrs)[i]);
            if (v == NULL)
                goto done;
            int code = (side == 0 ? attr_codes : resp_codes)[i];
            if (code < 0) {
                int clear = v == Py_None;
                Py_DECREF(v);
                if (!clear)
                    goto python; /* req.error, resp.error, req.cut or resp.cut: a reason */
                continue;
            }
            owned[code] = fixed[code] = v;
        }
    }
    /* Produce or Fetch, whose summaries the walker or the decoder made; no group, no note: reason null */
    PyObject *key = fixed[X_API_KEY];
    long api_key = PyLong_CheckExact(key) ? PyLong_AsLong(key) : -1;
    if (api_key != 0 && api_key != 1) {
        PyErr_Clear();
        goto python;
    }
    PyObject *const absent[] = {S_group, S_group_id, S_member_epoch, S_note};
    for (int i = 0; i < 4; i++) {
        int has = PyDict_Contains(reqi, absent[i]);
        if (has == 0 && i == 3)
            has = PyDict_Contains(respi, absent[i]);
        if (has != 0) {
            if (has < 0)
                goto done;
            goto python;
        }
    }
    fixed[X_CAPTURE] = PyTuple_GET_ITEM(handler, 0);
    fixed[X_CONN_ID] = PyTuple_GET_ITEM(handler, 1);
    fixed[X_CLIENT_IP] = PyTuple_GET_ITEM(handler, 2);
    fixed[X_BROKER_IP] = PyDict_GetItemWithError(broker, S_broker_ip);
    fixed[X_BROKER_PORT] = fixed[X_BROKER_IP] == NULL ? NULL : PyDict_GetItemWithError(broker, S_broker_port);
    fixed[X_BROKER_ID] = fixed[X_BROKER_PORT] == NULL ? NULL : PyDict_GetItemWithError(broker, S_broker_id);
    if (PyErr_Occurred())
        goto done;
    if (fixed[X_BROKER_ID] == NULL || fixed[X_BROKER_ID] == Py_None)
        goto python; /* the broker has no node id yet: BrokerIds holds the rows */
    fixed[X_STATUS] = plan->ok;
    /* latency_ms: (ts_first - ts_last) / 1000.0, exact where both are ints within 2^53 */
    {
        long long first, last;
        if (!small_int(fixed[X_TS_RESPONSE], &first) || !small_int(fixed[X_TS_REQUEST], &last) ||
            !PyLong_CheckExact(fixed[X_CORRELATION_ID]))
            goto python;
        owned[X_LATENCY_MS] = fixed[X_LATENCY_MS] = PyFloat_FromDouble((double)(first - last) / 1000.0);
        if (fixed[X_LATENCY_MS] == NULL)
            goto done;
    }
    PyObject *code = PyDict_GetItemWithError(respi, S_error_code);
    if (code == NULL && PyErr_Occurred())
        goto done;
    if (code != NULL && code != Py_None) {
        if (!PyLong_CheckExact(code) || PyLong_AsLong(code) != 0) {
            PyErr_Clear();
            goto python; /* an error code: its name and the errors rows are the Python path's */
        }
        fixed[X_ERROR_NAME] = plan->none_name;
    }
    PyObject *names = api_names(plan, key, fixed[X_API_VERSION]);
    if (names == NULL)
        goto done;
    fixed[X_API_NAME] = PyTuple_GET_ITEM(names, 0);
    fixed[X_REMOVED_IN] = PyTuple_GET_ITEM(names, 1);
    for (int i = 0; i < X_FIXED_COUNT; i++)
        if (fixed[i] == Py_None)
            fixed[i] = NULL;

    /* the `partitions` rows first: one the Python path must build sends the whole exchange there */
    PyObject *rq = PyDict_GetItemWithError(reqi, S_partitions);
    PyObject *rs = rq == NULL && PyErr_Occurred() ? NULL : PyDict_GetItemWithError(respi, S_partitions);
    if (PyErr_Occurred())
        goto done;
    int rq_some = rq != NULL && PyObject_IsTrue(rq) == 1, rs_some = rs != NULL && PyObject_IsTrue(rs) == 1;
    if (PyErr_Occurred())
        goto done;
    if (rq_some || rs_some) {
        static PyObject *empty;
        if (empty == NULL && (empty = PyDict_New()) == NULL)
            goto done;
        if ((rq_some && !PyDict_CheckExact(rq)) || (rs_some && !PyDict_CheckExact(rs)))
            goto python;
        base = PyTuple_New(plan->n_partitions);
        if (base == NULL)
            goto done;
        for (Py_ssize_t i = 0; i < plan->n_partitions; i++) {
            int at = (int)(plan->n_requests + i);
            PyObject *v = source_value(plan->codes[at], plan->keys[at], fixed, reqi, respi);
            if (v == NULL && PyErr_Occurred())
                goto done;
            PyTuple_SET_ITEM(base, i, Py_NewRef(v != NULL ? v : Py_None));
        }
        SlotCache cache;
        memset(&cache, 0, sizeof cache);
        cache.index = plan->index;
        rows = merge_parts(&cache, &plan->slots, base, NULL, rq_some ? rq : empty, rs_some ? rs : empty,
                           api_key == 0, topic_names, plan->none_name);
        if (rows == NULL)
            goto done;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++)
            if (PyList_GET_ITEM(rows, i) == Py_None)
                goto python;
    }
    row = PyTuple_New(plan->n_requests);
    if (row == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < plan->n_requests; i++) {
        PyObject *v = source_value(plan->codes[i], plan->keys[i], fixed, reqi, respi);
        if (v == NULL && PyErr_Occurred())
            goto done;
        PyTuple_SET_ITEM(row, i, Py_NewRef(v != NULL ? v : Py_None));
    }
    untrack_plain(row);
    result = PyTuple_Pack(2, row, rows != NULL ? rows : Py_None);
    goto done;
python:
    if (!PyErr_Occurred())
        result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < X_FIXED_COUNT; i++)
        Py_XDECREF(owned[i]);
    Py_XDECREF(row);
    Py_XDECREF(rows);
    Py_XDECREF(base);
    return result;
}

static PyMethodDef methods[] = {
    {"make_plan", make_plan, METH_VARARGS, "make_plan(root node, flexible, offsets) -> plan"},
    {"walk", walk, METH_VARARGS,
     "walk(plan, body, out, crc32c, metadata_topic, metadata_id) -> root values, or None: the Python "
     "path must answer"},
    {"merge_rows", merge_rows, METH_VARARGS,
     "merge_rows(index, base, context, request parts, response parts, produce, topic names, 'NONE') -> "
     "[row tuple in schema order, or None: the Python path builds that row]"},
    {"exchange_plan", exchange_plan, METH_VARARGS,
     "exchange_plan(requests sources, partitions sources, partitions index, api_name, removed_in, 'NONE', "
     "'ok') -> plan of exchange_rows"},
    {"exchange_rows", exchange_rows, METH_VARARGS,
     "exchange_rows(plan, (capture, conn_id, client_ip), broker fields, request, response, request summary, "
     "response summary, topic names) -> (requests row, [partitions rows] or None), or None: the Python path "
     "writes the exchange"},
    {"record_totals", record_totals, METH_VARARGS,
     "record_totals(info, parts) -> True once info holds the partitions' record totals, False: the Python "
     "function answers"},
    {"crc32c", crc32c_py, METH_O,
     "crc32c(data) -> the CRC32C of a bytes-like object, on the CPU's crc32 instruction; only where "
     "HARDWARE_CRC32C"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_partfacts", NULL, -1, methods};

PyMODINIT_FUNC PyInit__partfacts(void) {
    static const char *codecs[] = {"none", "gzip", "snappy", "lz4", "zstd"};
#define INTERN(var, text)                                                                                  \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                                                  \
        return NULL;
    INTERN(S_topic, "topic");
    INTERN(S_topic_id, "topic_id");
    INTERN(S_partition, "partition");
    INTERN(S_record_count, "record_count");
    INTERN(S_record_bytes, "record_bytes");
    INTERN(S_batch_count, "batch_count");
    INTERN(S_compression, "compression");
    INTERN(S_crc_errors, "crc_errors");
    INTERN(S_partial_bytes, "partial_bytes");
    INTERN(S_control_batches, "control_batches");
    INTERN(S_capped_batches, "capped_batches");
    INTERN(S_record_errors, "record_errors");
    INTERN(S_record_error, "record_error");
    INTERN(S_first_offset, "first_offset");
    INTERN(S_last_offset, "last_offset");
    INTERN(S_mixed, "mixed");
    INTERN(S_records, "_records");
    INTERN(S_past_int64, "_past_int64");
    INTERN(S_error_code, "error_code");
    INTERN(S_error_name, "error_name");
    INTERN(S_lag, "lag");
    INTERN(S_high_watermark, "high_watermark");
    INTERN(S_fetch_offset, "fetch_offset");
    INTERN(S_base_offset, "base_offset");
    INTERN(S_api_key, "api_key");
    INTERN(S_api_version, "api_version");
    INTERN(S_correlation_id, "correlation_id");
    INTERN(S_client_id, "client_id");
    INTERN(S_ts_last, "ts_last");
    INTERN(S_ts_first, "ts_first");
    INTERN(S_size, "size");
    INTERN(S_error, "error");
    INTERN(S_cut, "cut");
    INTERN(S_note, "note");
    INTERN(S_group, "group");
    INTERN(S_group_id, "group_id");
    INTERN(S_member_epoch, "member_epoch");
    INTERN(S_partitions, "partitions");
    INTERN(S_broker_ip, "broker_ip");
    INTERN(S_broker_port, "broker_port");
    INTERN(S_broker_id, "broker_id");
    for (int i = 0; i < 5; i++)
        INTERN(CODECS[i], codecs[i]);
#undef INTERN
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "HARDWARE_CRC32C", crc32c_have) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
