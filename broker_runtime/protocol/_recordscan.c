/* Walk the records of a v2 record batch body: the compiled form of `records._scan_records`.
 *
 * The produce path must check that a batch carries exactly the records its header declares, that every
 * record's fields add up to its length (as Kafka's DefaultRecord.readFrom does), and, where a topic asks
 * for it, which records lack a key or carry a timestamp out of bounds. In Python that walk costs ~150 ns a
 * record; here it costs a few, which keeps per-record work off the produce path's Python budget.
 *
 * scan(data, pos, end, max_records, first_index, keys_required, base_timestamp, min_timestamp, max_timestamp)
 *   -> (records, pos, need, keyless, untimely)
 *
 * Parses at most `max_records` complete records of data[pos:end], the first being record `first_index` of
 * its batch. Returns how many it parsed, where the next record starts, `need` (0, or the number of bytes
 * from that position that the next, incomplete, record needs), and the batch indexes of records without a
 * key (only if keys_required) and of records whose timestamp is outside [min_timestamp, max_timestamp]
 * (-1, no timestamp, passes). A malformed record raises ValueError naming its index. Pure: no I/O, and the
 * GIL is released while walking large buffers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#define RELEASE_GIL_ABOVE (64 * 1024)

typedef struct {
    int64_t *items;
    Py_ssize_t len, cap;
} IndexList;

static int index_list_add(IndexList *list, int64_t value) {
    if (list->len == list->cap) {
        Py_ssize_t cap = list->cap ? list->cap * 2 : 16;
        int64_t *items = realloc(list->items, (size_t)cap * sizeof(int64_t));
        if (items == NULL) return -1;
        list->items = items;
        list->cap = cap;
    }
    list->items[list->len++] = value;
    return 0;
}

static PyObject *index_list_to_python(const IndexList *list) {
    PyObject *out = PyList_New(list->len);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < list->len; i++) {
        PyObject *n = PyLong_FromLongLong(list->items[i]);
        if (n == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, n);
    }
    return out;
}

enum { VARINT_OK = 0, VARINT_TRUNCATED = 1, VARINT_TOO_LONG = 2 };

/* A zigzag varint of at most max_bytes bytes from p (< end). */
static int read_varint(const uint8_t **p, const uint8_t *end, int max_bytes, int64_t *value) {
    uint64_t raw = 0;
    const uint8_t *q = *p;
    for (int i = 0; i < max_bytes; i++) {
        if (q >= end) return VARINT_TRUNCATED;
        uint8_t byte = *q++;
        raw |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            *p = q;
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return VARINT_OK;
        }
    }
    return VARINT_TOO_LONG;
}

typedef struct {
    Py_ssize_t records, pos, need;
    const char *error; /* NULL, or what is wrong with record `records` */
    int out_of_memory;
} ScanState;

#define FAIL(message)           \
    do {                        \
        state->error = message; \
        return;                 \
    } while (0)

#define FIELD(ptr, limit, bytes, out, what)                                         \
    do {                                                                            \
        int rc_ = read_varint(&(ptr), (limit), (bytes), &(out));                    \
        if (rc_ == VARINT_TOO_LONG) FAIL(what " is a varint longer than allowed");  \
        if (rc_ == VARINT_TRUNCATED) FAIL(what " runs past the end of the record"); \
    } while (0)

static void scan(const uint8_t *data, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_records,
                 Py_ssize_t first_index, int keys_required, int64_t base_timestamp, int64_t min_timestamp, int64_t max_timestamp,
                 IndexList *keyless, IndexList *untimely, ScanState *state) {
    const uint8_t *limit = data + end;
    state->records = 0;
    state->need = 0;
    while (state->records < max_records && pos < end) {
        const uint8_t *p = data + pos;
        int64_t length;
        int rc = read_varint(&p, limit, 5, &length);
        if (rc == VARINT_TRUNCATED) {
            state->need = end - pos + 1;
            break;
        }
        if (rc == VARINT_TOO_LONG) FAIL("record length is a varint longer than 5 bytes");
        if (length < 0 || length > INT32_MAX) FAIL("record length is negative or too large");
        Py_ssize_t header_bytes = (Py_ssize_t)(p - (data + pos));
        if (length > limit - p) {
            state->need = header_bytes + (Py_ssize_t)length;
            break;
        }
        const uint8_t *record_end = p + length;
        int64_t timestamp_delta, offset_delta, key_size, value_size, header_count, size;
        if (p >= record_end) FAIL("record has no attributes byte");
        p++; /* attributes: unused in v2 */
        FIELD(p, record_end, 10, timestamp_delta, "timestamp delta");
        FIELD(p, record_end, 5, offset_delta, "offset delta");
        (void)offset_delta;
        FIELD(p, record_end, 5, key_size, "key length");
        if (key_size >= 0) {
            if (key_size > record_end - p) FAIL("key runs past the end of the record");
            p += key_size;
        } else if (keys_required && index_list_add(keyless, first_index + state->records) < 0) {
            state->out_of_memory = 1;
            return;
        }
        FIELD(p, record_end, 5, value_size, "value length");
        if (value_size >= 0) {
            if (value_size > record_end - p) FAIL("value runs past the end of the record");
            p += value_size;
        }
        FIELD(p, record_end, 5, header_count, "header count");
        if (header_count < 0) FAIL("header count is negative");
        for (int64_t h = 0; h < header_count; h++) {
            FIELD(p, record_end, 5, size, "header key length");
            if (size < 0) FAIL("header key length is negative");
            if (size > record_end - p) FAIL("header key runs past the end of the record");
            p += size;
            FIELD(p, record_end, 5, size, "header value length");
            if (size >= 0) {
                if (size > record_end - p) FAIL("header value runs past the end of the record");
                p += size;
            }
        }
        if (p != record_end) FAIL("record fields do not add up to its length");
        int64_t timestamp = (int64_t)((uint64_t)base_timestamp + (uint64_t)timestamp_delta);
        if (timestamp != -1 && (timestamp < min_timestamp || timestamp > max_timestamp) &&
            index_list_add(untimely, first_index + state->records) < 0) {
            state->out_of_memory = 1;
            return;
        }
        pos = (Py_ssize_t)(record_end - data);
        state->records++;
    }
    state->pos = pos;
}

static PyObject *scan_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, max_records, first_index;
    int keys_required;
    long long base_timestamp, min_timestamp, max_timestamp;
    if (!PyArg_ParseTuple(args, "y*nnnnpLLL", &view, &pos, &end, &max_records, &first_index, &keys_required,
                          &base_timestamp, &min_timestamp, &max_timestamp))
        return NULL;
    PyObject *result = NULL;
    IndexList keyless = {0}, untimely = {0};
    ScanState state = {0};
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_IndexError, "scan range outside the buffer");
        goto done;
    }
    if (end - pos > RELEASE_GIL_ABOVE) {
        Py_BEGIN_ALLOW_THREADS
        scan(view.buf, pos, end, max_records, first_index, keys_required, base_timestamp, min_timestamp,
             max_timestamp, &keyless, &untimely, &state);
        Py_END_ALLOW_THREADS
    } else {
        scan(view.buf, pos, end, max_records, first_index, keys_required, base_timestamp, min_timestamp,
             max_timestamp, &keyless, &untimely, &state);
    }
    if (state.out_of_memory) {
        PyErr_NoMemory();
        goto done;
    }
    if (state.error != NULL) {
        PyErr_Format(PyExc_ValueError, "record %zd: %s", first_index + state.records, state.error);
        goto done;
    }
    PyObject *keyless_list = index_list_to_python(&keyless);
    PyObject *untimely_list = keyless_list ? index_list_to_python(&untimely) : NULL;
    if (untimely_list != NULL)
        result = Py_BuildValue("nnnNN", state.records, state.pos, state.need, keyless_list, untimely_list);
    else
        Py_XDECREF(keyless_list);
done:
    free(keyless.items);
    free(untimely.items);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan_records, METH_VARARGS, "Walk the records of a v2 batch body (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_recordscan", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__recordscan(void) { return PyModule_Create(&module); }
