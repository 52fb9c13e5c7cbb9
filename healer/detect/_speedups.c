/* Native fast paths of the detection engine: the two per-alert steps that cost the most
 * Python work when a log is full of failures.
 *
 *   parse_iso(line)   -> float | None | False
 *       What healer.detect._timestamps.parse_ts_cached returns for a line whose head holds an
 *       RFC 3339 / ISO 8601 stamp (the same float to the bit); False when the head holds none
 *       (klog and epoch forms are left to Python).
 *   json_lines(alerts, fragments, fallback) -> str
 *       "".join(a.to_json() + "\n" for a in alerts), with the per-pattern-and-source parts from
 *       fragments(alert) -> (prefix, suffix) and every alert this code does not
 *       render itself (labels, no pattern, an unusual timestamp) from fallback(alert) -> str.
 *       fragments(alert) is asked once per pattern and source in a call.
 *   Collector()
 *       A Hyperscan match handler that keeps (offset, pattern) pairs in C; confirm_lines
 *       reads it in place of a sorted list of pairs (Engine.scan_block's pass 1).
 *   view_line(line, document=None)
 *       healer.detect.lines.view_fields: prefixes, levels and the commonest transcript
 *       events here, other JSON documents by document(body, source) (lines.view_document);
 *       judge_lines views lines with it.
 *
 * All are held to their Python originals by tests/detect/test_detect_native.py; the engine
 * uses the originals when this module is not built (healer.detect._native).
 */
#define _GNU_SOURCE  /* memrchr */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NATIVE_VERSION 9
#define HEAD_BYTES 160

/* ---------------------------------------------------------------------------------------- */
/* Timestamps                                                                                 */

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_space(unsigned char c) {  /* \s of a bytes regex */
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static int two(const unsigned char *p) { return (p[0] - '0') * 10 + (p[1] - '0'); }

static long long floor_div(long long a, long long b) {
    long long q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/* Days since 1970-01-01 of a proleptic Gregorian date; 0 in *ok when there is no such day.
 * (The same days_from_civil as _timestamps.epoch_day.) */
static long long epoch_day(long long y, int mo, int d, int *ok) {
    static const int month_days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0) && (y % 100 != 0 || y % 400 == 0);
    *ok = 0;
    if (mo < 1 || mo > 12 || d < 1 || d > month_days[mo - 1] + (mo == 2 && leap)) return 0;
    *ok = 1;
    y -= mo <= 2;
    long long era = floor_div(y, 400);
    long long yoe = y - era * 400;
    long long doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Where the stamp `\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}` starts in s[0:n], leftmost; -1. */
static Py_ssize_t find_stamp(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t p = 0; p + 19 <= n; p++) {
        const unsigned char *q = s + p;
        if (is_digit(q[0]) && is_digit(q[1]) && is_digit(q[2]) && is_digit(q[3]) && q[4] == '-' &&
            is_digit(q[5]) && is_digit(q[6]) && q[7] == '-' && is_digit(q[8]) && is_digit(q[9]) &&
            (q[10] == 'T' || q[10] == ' ') && is_digit(q[11]) && is_digit(q[12]) && q[13] == ':' &&
            is_digit(q[14]) && is_digit(q[15]) && q[16] == ':' && is_digit(q[17]) &&
            is_digit(q[18]))
            return p;
    }
    return -1;
}

/* 0: no stamp; 1: *out holds the time; 2: a stamp that names no real time (None). */
static int iso_time(const unsigned char *s, Py_ssize_t len, double *out) {
    Py_ssize_t n = len < HEAD_BYTES ? len : HEAD_BYTES;
    Py_ssize_t p = find_stamp(s, n);
    if (p < 0) return 0;
    const unsigned char *q = s + p;
    Py_ssize_t end = p + 19;  /* after the whole seconds */
    /* (?:[.,]\d{1,9})? */
    if (end < n && (s[end] == '.' || s[end] == ',') && end + 1 < n && is_digit(s[end + 1])) {
        Py_ssize_t k = end + 1;
        while (k < n && k - (end + 1) < 9 && is_digit(s[k])) k++;
        end = k;
    }
    /* The seconds as digits / 10 ** decimals: at most 11 digits, an integer a double holds
     * exactly, divided by an exact power of ten, is the correctly rounded value of the
     * decimal, which is what float() of it gives (strtod's own fast path). */
    static const double POW10[10] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
    long long digits = two(q + 17);
    int decimals = 0;
    for (Py_ssize_t k = p + 20; k < end; k++, decimals++) digits = digits * 10 + (s[k] - '0');
    /* \s?(Z|z|UTC|[+-]\d{2}:?\d{2})? */
    Py_ssize_t z = end;
    if (z < n && is_space(s[z])) z++;
    long shift = 0;
    if (z < n && (s[z] == '+' || s[z] == '-') && z + 2 < n && is_digit(s[z + 1]) &&
        is_digit(s[z + 2])) {
        Py_ssize_t m = z + 3;
        int found = 0;
        if (m < n && s[m] == ':' && m + 2 < n && is_digit(s[m + 1]) && is_digit(s[m + 2])) {
            m += 1;
            found = 1;
        } else if (m + 1 < n && is_digit(s[m]) && is_digit(s[m + 1])) {
            found = 1;
        }
        if (found) {
            long offset = two(s + z + 1) * 3600L + two(s + m) * 60L;
            shift = s[z] == '+' ? offset : -offset;
        }
    }
    int ok;
    long long day = epoch_day((q[0] - '0') * 1000 + (q[1] - '0') * 100 + two(q + 2),
                              two(q + 5), two(q + 8), &ok);
    int hh = two(q + 11), mm = two(q + 14);
    if (!ok || hh > 23 || mm > 59) return 2;
    double ss = (double)digits / POW10[decimals];
    if (ss >= 61) return 2;
    double base = (double)day * 86400.0 + (double)(hh * 3600) + (double)(mm * 60);
    double ts = base + ss;
    if (shift) ts -= (double)shift;
    *out = ts;
    return 1;
}

/* A line's bytes: bytes or bytearray, else a TypeError. */
static int line_data(PyObject *line, const unsigned char **data, Py_ssize_t *len) {
    if (PyBytes_Check(line)) {
        *data = (const unsigned char *)PyBytes_AS_STRING(line);
        *len = PyBytes_GET_SIZE(line);
        return 0;
    }
    if (PyByteArray_Check(line)) {
        *data = (const unsigned char *)PyByteArray_AS_STRING(line);
        *len = PyByteArray_GET_SIZE(line);
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "lines must be bytes or bytearray");
    return -1;
}

/* Any bytes-like object's bytes; 1 when a buffer view is held (release it), -1 on error. */
static int read_bytes(PyObject *obj, const unsigned char **data, Py_ssize_t *len,
                      Py_buffer *view) {
    if (PyBytes_Check(obj) || PyByteArray_Check(obj)) return line_data(obj, data, len);
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    *data = view->buf;
    *len = view->len;
    return 1;
}

static PyObject *parse_iso(PyObject *self, PyObject *line) {
    const unsigned char *data;
    Py_ssize_t len;
    Py_buffer view;
    int held = read_bytes(line, &data, &len, &view);
    if (held < 0) return NULL;
    double ts = 0;
    int got = iso_time(data, len, &ts);
    if (held) PyBuffer_Release(&view);
    if (got == 0) Py_RETURN_FALSE;
    if (got == 2) Py_RETURN_NONE;
    return PyFloat_FromDouble(ts);
}

/* ---------------------------------------------------------------------------------------- */
/* JSON lines                                                                                 */

/* The text is written into a bytes object grown in place (a big one is realloc'ed by the
 * kernel moving its pages: nothing copied, no page touched twice), which json_lines(...,
 * True) returns as it is: a scan's megabytes of JSON are written once, not copied into a str
 * and encoded again. */
typedef struct {
    char *buf;
    Py_ssize_t len, cap;
    PyObject *obj;  /* the bytes object buf points into, or NULL */
} Out;

static int out_reserve(Out *o, Py_ssize_t more) {
    if (o->len + more <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->len + more) cap *= 2;
    if (o->obj == NULL) {
        o->obj = PyBytes_FromStringAndSize(NULL, cap);
        if (o->obj == NULL) return -1;
    } else if (_PyBytes_Resize(&o->obj, cap) < 0) {  /* (it freed the old one) */
        o->buf = NULL;
        o->cap = o->len = 0;
        return -1;
    }
    o->buf = PyBytes_AS_STRING(o->obj);
    o->cap = cap;
    return 0;
}

static int out_ascii(Out *o, PyObject *text) {  /* an ASCII str, as is */
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (out_reserve(o, n) < 0) return -1;
    memcpy(o->buf + o->len, PyUnicode_DATA(text), (size_t)n);
    o->len += n;
    return 0;
}

static const char HEX[] = "0123456789abcdef";

static void put_u(char *w, Py_UCS4 c) {
    w[0] = '\\';
    w[1] = 'u';
    w[2] = HEX[(c >> 12) & 15];
    w[3] = HEX[(c >> 8) & 15];
    w[4] = HEX[(c >> 4) & 15];
    w[5] = HEX[c & 15];
}

/* c (below 0x10000) escaped as json writes it: "\\n" and the like, else "\\u00XX"; where the
 * escape ends. */
static char *put_escaped(char *w, Py_UCS4 c) {
    char e;
    switch (c) {
        case '\\': e = '\\'; break;
        case '"': e = '"'; break;
        case '\b': e = 'b'; break;
        case '\f': e = 'f'; break;
        case '\n': e = 'n'; break;
        case '\r': e = 'r'; break;
        case '\t': e = 't'; break;
        default:
            put_u(w, c);
            return w + 6;
    }
    w[0] = '\\';
    w[1] = e;
    return w + 2;
}

/* Whether an ASCII byte goes into JSON as it is (printable, not a quote or backslash). */
static unsigned char JSON_PLAIN[128];

static void init_json_plain(void) {
    for (int c = ' '; c <= '~'; c++) JSON_PLAIN[c] = c != '"' && c != '\\';
}

/* json.encoder.encode_basestring_ascii(text), quotes included. */
static int out_quoted(Out *o, PyObject *text) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (PyUnicode_IS_ASCII(text)) {  /* most log lines: runs of plain bytes, copied whole */
        const unsigned char *t = PyUnicode_1BYTE_DATA(text);
        if (out_reserve(o, n * 6 + 2) < 0) return -1;
        char *w = o->buf + o->len;
        *w++ = '"';
        Py_ssize_t i = 0;
        while (i < n) {
            Py_ssize_t j = i;
            while (j < n && JSON_PLAIN[t[j]]) j++;
            memcpy(w, t + i, (size_t)(j - i));
            w += j - i;
            if (j == n) break;
            w = put_escaped(w, t[j]);
            i = j + 1;
        }
        *w++ = '"';
        o->len = w - o->buf;
        return 0;
    }
    if (out_reserve(o, n * 12 + 2) < 0) return -1;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    char *w = o->buf + o->len;
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"') {
            *w++ = (char)c;
            continue;
        }
        if (c >= 0x10000) {  /* a UTF-16 surrogate pair, as json writes it */
            Py_UCS4 v = c - 0x10000;
            put_u(w, 0xd800 | ((v >> 10) & 0x3ff));
            w += 6;
            c = 0xdc00 | (v & 0x3ff);
        }
        w = put_escaped(w, c);
    }
    *w++ = '"';
    o->len = w - o->buf;
    return 0;
}

/* The proleptic Gregorian date of a day since 1970-01-01 (Howard Hinnant's
 * civil_from_days, the inverse of epoch_day): what gmtime gives, without its lock and time
 * zone work, which cost more than the rest of an alert's JSON. */
static void civil_from_days(long long z, long long *y, int *m, int *d) {
    z += 719468;
    long long era = floor_div(z, 146097);
    long long doe = z - era * 146097;
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long long mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static char *put_digits(char *w, long long v, int width) {  /* zero-padded, v >= 0 */
    for (int k = width - 1; k >= 0; k--) {
        w[k] = (char)('0' + v % 10);
        v /= 10;
    }
    return w + width;
}

/* `"2024-05-01T10:00:00.123Z"` as _timestamps.iso makes it; 0 when this code does not
 * render that time (before 1970 or after 9999: the fallback does). */
static int out_stamp(Out *o, double ts) {
    if (!(ts >= 0.0 && ts < 253402300800.0)) return 0;
    double r = nearbyint(ts * 1000.0);  /* round half to even, as Python's round() */
    long long total = (long long)r;
    long long minute = total / 60000;
    long long in_minute = total % 60000;
    long long day = minute / 1440, in_day = minute % 1440, y;
    int mo, d;
    civil_from_days(day, &y, &mo, &d);
    if (y > 9999) return 0;
    if (out_reserve(o, 32) < 0) return -1;
    char *w = o->buf + o->len;
    *w++ = '"';
    w = put_digits(w, y, 4);
    *w++ = '-';
    w = put_digits(w, mo, 2);
    *w++ = '-';
    w = put_digits(w, d, 2);
    *w++ = 'T';
    w = put_digits(w, in_day / 60, 2);
    *w++ = ':';
    w = put_digits(w, in_day % 60, 2);
    *w++ = ':';
    w = put_digits(w, in_minute / 1000, 2);
    *w++ = '.';
    w = put_digits(w, in_minute % 1000, 3);
    *w++ = 'Z';
    *w++ = '"';
    o->len = w - o->buf;
    return 1;
}

static int out_raw(Out *o, const char *s, Py_ssize_t n) {
    if (out_reserve(o, n) < 0) return -1;
    memcpy(o->buf + o->len, s, (size_t)n);
    o->len += n;
    return 0;
}

/* A per-call cache of fragments(alert), keyed on the alert's pattern and source objects. */
#define SLOTS 256
typedef struct {
    PyObject *pattern, *source, *prefix, *suffix;
} Slot;

/* Alert's fields, by position (healer.detect.alert.Alert). */
enum { F_SOURCE = 4, F_LINE_NO = 5, F_LINE = 6, F_TS = 7, F_LABELS = 8, F_PATTERN = 9, F_N = 12 };

static int render_one(Out *o, PyObject *a, Slot *slots, PyObject *fragments) {
    if (!PyTuple_Check(a) || PyTuple_GET_SIZE(a) < F_N) return 0;
    PyObject *pattern = PyTuple_GET_ITEM(a, F_PATTERN);
    PyObject *source = PyTuple_GET_ITEM(a, F_SOURCE);
    PyObject *labels = PyTuple_GET_ITEM(a, F_LABELS);
    PyObject *line = PyTuple_GET_ITEM(a, F_LINE);
    PyObject *line_no = PyTuple_GET_ITEM(a, F_LINE_NO);
    PyObject *ts = PyTuple_GET_ITEM(a, F_TS);
    if (pattern == Py_None || !PyUnicode_Check(line) || !PyUnicode_Check(source) ||
        !PyLong_CheckExact(line_no) || (ts != Py_None && !PyFloat_CheckExact(ts)))
        return 0;
    int has_labels = PyObject_IsTrue(labels);
    if (has_labels != 0) return has_labels < 0 ? -1 : 0;
    size_t h = (((size_t)pattern >> 4) ^ ((size_t)source >> 4) * 31) % SLOTS;
    Slot *slot = &slots[h];
    if (slot->pattern != pattern || slot->source != source) {
        PyObject *parts = PyObject_CallOneArg(fragments, a);
        if (parts == NULL) return -1;
        if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) != 2 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(parts, 0)) ||
            !PyUnicode_Check(PyTuple_GET_ITEM(parts, 1)) ||
            !PyUnicode_IS_ASCII(PyTuple_GET_ITEM(parts, 0)) ||
            !PyUnicode_IS_ASCII(PyTuple_GET_ITEM(parts, 1))) {
            Py_DECREF(parts);
            PyErr_SetString(PyExc_TypeError, "fragments() must return two ASCII strings");
            return -1;
        }
        Py_XDECREF(slot->pattern);
        Py_XDECREF(slot->source);
        Py_XDECREF(slot->prefix);
        Py_XDECREF(slot->suffix);
        Py_INCREF(pattern);
        Py_INCREF(source);
        slot->pattern = pattern;
        slot->source = source;
        slot->prefix = PyTuple_GET_ITEM(parts, 0);
        slot->suffix = PyTuple_GET_ITEM(parts, 1);
        Py_INCREF(slot->prefix);
        Py_INCREF(slot->suffix);
        Py_DECREF(parts);
    }
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(line_no, &overflow);
    if (overflow || (n == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t mark = o->len;
    char digits[32];
    int nd = 0;
    if (n < 0) return 0;  /* (a line number is never negative: the fallback renders it) */
    do {
        digits[nd++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    for (int i = 0, j = nd - 1; i < j; i++, j--) {
        char c = digits[i];
        digits[i] = digits[j];
        digits[j] = c;
    }
    memcpy(digits + nd, ",\"ts\":", 6);
    nd += 6;
    if (out_ascii(o, slot->prefix) < 0 || out_raw(o, digits, nd) < 0) return -1;
    if (ts == Py_None) {
        if (out_raw(o, "null", 4) < 0) return -1;
    } else {
        int done = out_stamp(o, PyFloat_AS_DOUBLE(ts));
        if (done < 0) return -1;
        if (done == 0) {
            o->len = mark;
            return 0;
        }
    }
    if (out_raw(o, ",\"line\":", 8) < 0 || out_quoted(o, line) < 0 ||
        out_ascii(o, slot->suffix) < 0 || out_raw(o, "}\n", 2) < 0)
        return -1;
    return 1;
}

static PyObject *json_lines(PyObject *self, PyObject *args) {
    PyObject *alerts, *fragments, *fallback;
    int as_bytes = 0;
    if (!PyArg_ParseTuple(args, "OOO|p:json_lines", &alerts, &fragments, &fallback, &as_bytes))
        return NULL;
    PyObject *seq = PySequence_Tuple(alerts);  /* a copy: the callbacks cannot change it */
    if (seq == NULL) return NULL;
    Slot *slots = PyMem_Calloc(SLOTS, sizeof(Slot));
    Out o = {NULL, 0, 0, NULL};
    PyObject *result = NULL;
    if (slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        int done = render_one(&o, item, slots, fragments);
        if (done < 0) goto done;
        if (done == 0) {
            PyObject *text = PyObject_CallOneArg(fallback, item);
            if (text == NULL) goto done;
            if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) {
                Py_DECREF(text);
                PyErr_SetString(PyExc_TypeError, "fallback() must return an ASCII string");
                goto done;
            }
            int bad = out_ascii(&o, text) < 0 || out_raw(&o, "\n", 1) < 0;
            Py_DECREF(text);
            if (bad) goto done;
        }
    }
    if (as_bytes) {
        if (o.obj == NULL) {
            result = PyBytes_FromStringAndSize(NULL, 0);
        } else if (_PyBytes_Resize(&o.obj, o.len) == 0) {
            result = o.obj;
            o.obj = NULL;
        }
    } else {
        result = PyUnicode_New(o.len, 127);
        if (result != NULL && o.len) memcpy(PyUnicode_DATA(result), o.buf, (size_t)o.len);
    }
done:
    if (slots != NULL) {
        for (int k = 0; k < SLOTS; k++) {
            Py_XDECREF(slots[k].pattern);
            Py_XDECREF(slots[k].source);
            Py_XDECREF(slots[k].prefix);
            Py_XDECREF(slots[k].suffix);
        }
        PyMem_Free(slots);
    }
    Py_XDECREF(o.obj);
    Py_DECREF(seq);
    return result;
}



/* ---------------------------------------------------------------------------------------- */
/* Hyperscan's matches, collected without Python                                             */

/* Collector(): a match_event_handler for hyperscan.Database.scan that keeps each match's
 * (end offset + shift, pattern index) in a C array, instead of a Python function making a
 * tuple per match; confirm_lines takes it in place of the candidate list. */
typedef struct {
    long long off, idx;
} Cand;

typedef struct {
    PyObject_HEAD
    Cand *items;
    Py_ssize_t len, cap;
    long long shift;
} Collector;

/* -1 when out of memory, with no Python error set: it runs without the GIL too (libhs's
 * match handler, below). */
static int collector_add(Collector *c, long long off, long long idx) {
    if (c->len == c->cap) {
        Py_ssize_t cap = c->cap ? c->cap * 2 : 4096;
        Cand *grown = PyMem_RawRealloc(c->items, (size_t)cap * sizeof(Cand));
        if (grown == NULL) return -1;
        c->items = grown;
        c->cap = cap;
    }
    c->items[c->len].off = off;
    c->items[c->len].idx = idx;
    c->len++;
    return 0;
}

static int collector_push(Collector *c, long long off, long long idx) {
    if (collector_add(c, off, idx) == 0) return 0;
    PyErr_NoMemory();
    return -1;
}

/* (id, from, to, flags, context): Hyperscan's end offsets are exclusive and within the view;
 * shift makes them offsets into the buffer (HyperscanMatcher.candidates' on_match). */
static PyObject *collector_call(PyObject *self, PyObject *args, PyObject *kw) {
    Collector *c = (Collector *)self;
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) < 3) {
        PyErr_SetString(PyExc_TypeError, "Collector(id, from, to, flags, context)");
        return NULL;
    }
    long long idx = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 0));
    long long to = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 2));
    if ((idx == -1 || to == -1) && PyErr_Occurred()) return NULL;
    if (collector_push(c, to + c->shift, idx) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *collector_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Collector *c = (Collector *)type->tp_alloc(type, 0);
    if (c != NULL) {
        c->items = NULL;
        c->len = c->cap = 0;
        c->shift = 0;
    }
    return (PyObject *)c;
}

static void collector_dealloc(PyObject *self) {
    PyMem_RawFree(((Collector *)self)->items);
    Py_TYPE(self)->tp_free(self);
}

/* reset(shift): empty, the next scan's offsets shifted by shift. */
static PyObject *collector_reset(PyObject *self, PyObject *arg) {
    Collector *c = (Collector *)self;
    long long shift = PyLong_AsLongLong(arg);
    if (shift == -1 && PyErr_Occurred()) return NULL;
    c->len = 0;
    c->shift = shift;
    Py_RETURN_NONE;
}

/* extend(pairs): (offset, index) pairs found elsewhere (another matcher, ANSI lines). */
static PyObject *collector_extend(PyObject *self, PyObject *pairs) {
    PyObject *seq = PySequence_Fast(pairs, "extend() takes (offset, index) pairs");
    if (seq == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "extend() takes (offset, index) pairs");
            return NULL;
        }
        long long off = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        long long idx = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
        if (((off == -1 || idx == -1) && PyErr_Occurred()) ||
            collector_push((Collector *)self, off, idx) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static int cmp_cand(const void *x, const void *y) {
    const Cand *a = x, *b = y;
    if (a->off != b->off) return (a->off > b->off) - (a->off < b->off);
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* pairs() -> the (offset, index) pairs, sorted (what the Python loop takes). */
static PyObject *collector_pairs(PyObject *self, PyObject *unused) {
    Collector *c = (Collector *)self;
    qsort(c->items, (size_t)c->len, sizeof(Cand), cmp_cand);
    PyObject *out = PyList_New(c->len);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < c->len; i++) {
        PyObject *pair = Py_BuildValue("(LL)", c->items[i].off, c->items[i].idx);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    return out;
}

static Py_ssize_t collector_len(PyObject *self) { return ((Collector *)self)->len; }

static PyObject *collector_rebase(PyObject *self, PyObject *arg) {
    Collector *c = (Collector *)self;
    long long shift = PyLong_AsLongLong(arg);
    if (shift == -1 && PyErr_Occurred()) return NULL;
    c->shift = shift;
    Py_RETURN_NONE;
}

static PyMethodDef collector_methods[] = {
    {"reset", collector_reset, METH_O, "reset(shift): empty; the next offsets shifted."},
    {"rebase", collector_rebase, METH_O,
     "rebase(shift): the next offsets shifted so; the pairs kept (a scan in two parts)."},
    {"extend", collector_extend, METH_O, "extend(pairs): add (offset, index) pairs."},
    {"pairs", collector_pairs, METH_NOARGS, "pairs() -> the (offset, index) pairs, sorted."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods collector_seq = {.sq_length = collector_len};

static PyTypeObject CollectorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "healer.detect._speedups.Collector",
    .tp_basicsize = sizeof(Collector),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A Hyperscan match handler that collects (offset, index) pairs in C.",
    .tp_new = collector_new,
    .tp_dealloc = collector_dealloc,
    .tp_call = collector_call,
    .tp_methods = collector_methods,
    .tp_as_sequence = &collector_seq,
};

/* ---------------------------------------------------------------------------------------- */
/* Hyperscan through the system's libhs                                                      */

/* HsDatabase: a block-mode Hyperscan database compiled and scanned by the system's libhs
 * (libhs.so.5, found with dlopen when first asked: no build-time dependency), whose matches go
 * straight into a Collector. The Python binding calls a Python object per match, which costs
 * more than the scan itself on a log full of failures; and the distribution's libhs, compiled
 * for the portable target, scans ~15 % faster than the binding's bundled one here. Only the
 * library's stable C ABI is used: the declarations below are hs.h's. */
typedef int hs_error_t;
typedef struct hs_database hs_database_t;
typedef struct hs_scratch hs_scratch_t;
typedef struct {
    char *message;
    int expression;
} hs_compile_error_t;
typedef struct {
    unsigned int tune;
    unsigned long long cpu_features, reserved1, reserved2;
} hs_platform_info_t;
typedef int (*hs_match_t)(unsigned int, unsigned long long, unsigned long long, unsigned int,
                          void *);

#define HS_SUCCESS 0
#define HS_MODE_BLOCK 1

static struct {
    int tried, compiler_tried;
    const char *version;
    hs_error_t (*compile_multi)(const char *const *, const unsigned int *, const unsigned int *,
                                unsigned int, unsigned int, const hs_platform_info_t *,
                                hs_database_t **, hs_compile_error_t **);
    hs_error_t (*free_compile_error)(hs_compile_error_t *);
    hs_error_t (*free_database)(hs_database_t *);
    hs_error_t (*alloc_scratch)(const hs_database_t *, hs_scratch_t **);
    hs_error_t (*free_scratch)(hs_scratch_t *);
    hs_error_t (*scan)(const hs_database_t *, const char *, unsigned int, unsigned int,
                       hs_scratch_t *, hs_match_t, void *);
    hs_error_t (*serialize)(const hs_database_t *, char **, size_t *);
    hs_error_t (*deserialize)(const char *, size_t, hs_database_t **);
} HS;

static const char *(*hs_version_of(void *lib))(void) {
    return (const char *(*)(void))dlsym(lib, "hs_version");
}

/* 1 when libhs's scanning half is loaded (once per process), else 0.
 *
 * The runtime library (libhs_runtime.so.5, in the same package as libhs.so.5) scans, loads and
 * dumps databases in plain C; libhs.so.5 adds the compiler, which is C++ and brings libstdc++:
 * ~1 ms of every scan's start-up. A cached database needs no compiler, so libhs.so.5 is loaded
 * only to compile (libhs_compiler). Where there is no runtime library, libhs.so.5 does both. */
static int libhs_open(void) {
    if (HS.tried) return HS.version != NULL;
    HS.tried = 1;
    /* (lazy: every scan's start pays the load; resolving all of its symbols now cost ~0.5 ms) */
    void *lib = dlopen("libhs_runtime.so.5", RTLD_LAZY | RTLD_LOCAL);
    if (lib == NULL) lib = dlopen("libhs.so.5", RTLD_LAZY | RTLD_LOCAL);
    if (lib == NULL) return 0;
    const char *(*version)(void) = hs_version_of(lib);
    *(void **)&HS.free_database = dlsym(lib, "hs_free_database");
    *(void **)&HS.alloc_scratch = dlsym(lib, "hs_alloc_scratch");
    *(void **)&HS.free_scratch = dlsym(lib, "hs_free_scratch");
    *(void **)&HS.scan = dlsym(lib, "hs_scan");
    *(void **)&HS.serialize = dlsym(lib, "hs_serialize_database");
    *(void **)&HS.deserialize = dlsym(lib, "hs_deserialize_database");
    if (version == NULL || HS.free_database == NULL || HS.alloc_scratch == NULL ||
        HS.free_scratch == NULL || HS.scan == NULL || HS.serialize == NULL ||
        HS.deserialize == NULL) {
        dlclose(lib);
        return 0;
    }
    HS.version = version();
    return 1;
}

/* 1 when libhs.so.5's compiler is loaded too, of the runtime's very version (a database is
 * compiled by one and scanned by the other); else 0 with a RuntimeError set. */
static int libhs_compiler(void) {
    if (!libhs_open()) {
        PyErr_SetString(PyExc_RuntimeError, "libhs is not available");
        return 0;
    }
    if (!HS.compiler_tried) {
        HS.compiler_tried = 1;
        void *lib = dlopen("libhs.so.5", RTLD_LAZY | RTLD_LOCAL);
        const char *(*version)(void) = lib == NULL ? NULL : hs_version_of(lib);
        if (version != NULL && strcmp(version(), HS.version) == 0) {
            *(void **)&HS.compile_multi = dlsym(lib, "hs_compile_multi");
            *(void **)&HS.free_compile_error = dlsym(lib, "hs_free_compile_error");
        }
        if (HS.compile_multi == NULL || HS.free_compile_error == NULL) {
            HS.compile_multi = NULL;
            if (lib != NULL) dlclose(lib);
        }
    }
    if (HS.compile_multi == NULL) {
        PyErr_Format(PyExc_RuntimeError, "libhs.so.5 (the compiler of libhs %s) is not "
                     "available", HS.version);
        return 0;
    }
    return 1;
}

/* libhs_version() -> the loaded libhs's version, or None where there is none. */
static PyObject *libhs_version(PyObject *self, PyObject *unused) {
    if (!libhs_open()) Py_RETURN_NONE;
    return PyUnicode_FromString(HS.version);
}

typedef struct {
    PyObject_HEAD
    hs_database_t *db;
    hs_scratch_t *scratch;  /* NULL while a scan uses it: that scan's own is made */
} HsDatabase;

static PyTypeObject HsDatabaseType;

static PyObject *hsdb_wrap(hs_database_t *db) {
    HsDatabase *d = PyObject_New(HsDatabase, &HsDatabaseType);
    if (d == NULL) {
        HS.free_database(db);
        return NULL;
    }
    d->db = db;
    d->scratch = NULL;
    if (HS.alloc_scratch(db, &d->scratch) != HS_SUCCESS) {
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    return (PyObject *)d;
}

static void hsdb_dealloc(PyObject *self) {
    HsDatabase *d = (HsDatabase *)self;
    if (d->scratch != NULL) HS.free_scratch(d->scratch);
    if (d->db != NULL) HS.free_database(d->db);
    PyObject_Free(self);
}

static int uint_list(PyObject *list, Py_ssize_t n, unsigned int *out, const char *what) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        PyErr_Format(PyExc_ValueError, "libhs_compile: %s must be a list as long as the "
                     "expressions", what);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PyList_GET_ITEM(list, i));
        if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
        if (v > UINT_MAX) {
            PyErr_Format(PyExc_ValueError, "libhs_compile: %s out of range", what);
            return -1;
        }
        out[i] = (unsigned int)v;
    }
    return 0;
}

/* libhs_compile(expressions, flags, ids) -> HsDatabase, for the portable target (the same
 * database on every x86-64 CPU: it can be cached and moved, and it scanned these logs faster
 * than the AVX2 and AVX-512 ones on the machines measured). ValueError(message, index) when
 * an expression does not compile (index -1: not one expression's fault). */
static PyObject *libhs_compile(PyObject *self, PyObject *args) {
    PyObject *exprs, *flags, *ids;
    if (!PyArg_ParseTuple(args, "O!OO:libhs_compile", &PyList_Type, &exprs, &flags, &ids))
        return NULL;
    if (!libhs_compiler()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(exprs);
    if (n == 0 || n > UINT_MAX) {
        PyErr_SetString(PyExc_ValueError, "libhs_compile: no expressions");
        return NULL;
    }
    const char **texts = PyMem_Malloc((size_t)n * sizeof(char *));
    unsigned int *fl = PyMem_Malloc((size_t)n * sizeof(unsigned int));
    unsigned int *id = PyMem_Malloc((size_t)n * sizeof(unsigned int));
    PyObject *out = NULL;
    if (texts == NULL || fl == NULL || id == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(exprs, i);
        if (!PyBytes_Check(e) || memchr(PyBytes_AS_STRING(e), 0, PyBytes_GET_SIZE(e))) {
            PyErr_SetString(PyExc_ValueError, "libhs_compile: expressions are bytes without NUL");
            goto done;
        }
        texts[i] = PyBytes_AS_STRING(e);
    }
    if (uint_list(flags, n, fl, "flags") < 0 || uint_list(ids, n, id, "ids") < 0) goto done;
    hs_platform_info_t portable = {0, 0, 0, 0};
    hs_database_t *db = NULL;
    hs_compile_error_t *err = NULL;
    hs_error_t rc;
    Py_BEGIN_ALLOW_THREADS
    rc = HS.compile_multi(texts, fl, id, (unsigned int)n, HS_MODE_BLOCK, &portable, &db, &err);
    Py_END_ALLOW_THREADS
    if (rc != HS_SUCCESS) {
        if (err != NULL) {
            PyObject *e = Py_BuildValue("(si)", err->message, err->expression);
            if (e != NULL) PyErr_SetObject(PyExc_ValueError, e);
            Py_XDECREF(e);
            HS.free_compile_error(err);
        } else {
            PyErr_Format(PyExc_ValueError, "libhs_compile: error %d", rc);
        }
        goto done;
    }
    out = hsdb_wrap(db);
done:
    PyMem_Free(texts);
    PyMem_Free(fl);
    PyMem_Free(id);
    return out;
}

/* libhs_load(blob) -> HsDatabase from HsDatabase.dump(); ValueError when libhs refuses it
 * (another version or platform: compile it again). */
static PyObject *libhs_load_db(PyObject *self, PyObject *arg) {
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "libhs_load: a bytes blob");
        return NULL;
    }
    if (!libhs_open()) {
        PyErr_SetString(PyExc_RuntimeError, "libhs is not available");
        return NULL;
    }
    hs_database_t *db = NULL;
    hs_error_t rc = HS.deserialize(PyBytes_AS_STRING(arg), (size_t)PyBytes_GET_SIZE(arg), &db);
    if (rc != HS_SUCCESS) {
        PyErr_Format(PyExc_ValueError, "libhs_load: not a database for this libhs (error %d)",
                     rc);
        return NULL;
    }
    return hsdb_wrap(db);
}

static PyObject *hsdb_dump(PyObject *self, PyObject *unused) {
    char *bytes = NULL;
    size_t len = 0;
    if (HS.serialize(((HsDatabase *)self)->db, &bytes, &len) != HS_SUCCESS)
        return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(bytes, (Py_ssize_t)len);
    free(bytes);  /* libhs's default allocator */
    return out;
}

static int hsdb_on_match(unsigned int id, unsigned long long from, unsigned long long to,
                         unsigned int flags, void *ctx) {
    Collector *c = ctx;
    return collector_add(c, (long long)to + c->shift, (long long)id) < 0;  /* 1 stops it */
}

/* scan(buf, lo, hi, collector): every match in buf[lo:hi] into collector, at its end offset
 * plus the collector's shift (as Hyperscan reports it to a Collector through the binding). */
static PyObject *hsdb_scan(PyObject *self, PyObject *args) {
    HsDatabase *d = (HsDatabase *)self;
    PyObject *buf, *col;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "OnnO!:scan", &buf, &lo, &hi, &CollectorType, &col))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (lo < 0 || hi < lo || hi > view.len || hi - lo > (Py_ssize_t)UINT_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: bad bounds");
        return NULL;
    }
    hs_scratch_t *scratch = d->scratch;
    d->scratch = NULL;  /* this scan's (the GIL is let go below: another may start) */
    if (scratch == NULL && HS.alloc_scratch(d->db, &scratch) != HS_SUCCESS) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    hs_error_t rc;
    Py_INCREF(col);  /* (the Collector is the caller's, one scan at a time) */
    Py_BEGIN_ALLOW_THREADS
    rc = HS.scan(d->db, (const char *)view.buf + lo, (unsigned int)(hi - lo), 0, scratch,
                 hsdb_on_match, col);
    Py_END_ALLOW_THREADS
    Py_DECREF(col);
    PyBuffer_Release(&view);
    if (d->scratch == NULL)
        d->scratch = scratch;
    else
        HS.free_scratch(scratch);
    if (rc == HS_SUCCESS) Py_RETURN_NONE;
    if (rc == -3) return PyErr_NoMemory();  /* HS_SCAN_TERMINATED: the collector could not grow */
    PyErr_Format(PyExc_RuntimeError, "libhs scan failed (error %d)", rc);
    return NULL;
}

static PyMethodDef hsdb_methods[] = {
    {"scan", hsdb_scan, METH_VARARGS,
     "scan(buf, lo, hi, collector): the matches in buf[lo:hi], into collector."},
    {"dump", hsdb_dump, METH_NOARGS, "dump() -> bytes for libhs_load (a cache)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HsDatabaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "healer.detect._speedups.HsDatabase",
    .tp_basicsize = sizeof(HsDatabase),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A block-mode Hyperscan database of the system's libhs (libhs_compile).",
    .tp_dealloc = hsdb_dealloc,
    .tp_methods = hsdb_methods,
};

/* ---------------------------------------------------------------------------------------- */
/* Reading ahead on a native thread                                                           */

/* Prefetch(fd, hi, db=None): a thread of its own (not Python's) that reads the next part of
 * a file region ending at hi into a buffer while the caller scans the part before: with db (an
 * HsDatabase), it then runs Hyperscan over the part's whole lines into a Collector, a slice
 * of PREFETCH_SLICE bytes (to a line's end) at a time, until the caller asks for the result:
 * the caller scans what is left. So neither waits for the other: the thread scans for as long
 * as the caller is busy with the part before, whatever that costs (measured: at 0.1 % failure
 * lines a quarter of each part's Hyperscan pass, at 5 % four fifths). A Python thread waited for
 * the GIL, which the scanning caller holds for milliseconds at a time; this one never takes
 * it, and the buffer is held (its size fixed) from start() to result(). close() joins the
 * thread: none runs once a scan has returned (scans fork). */
#define PREFETCH_SLICE (128 * 1024)
typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int has_thread;
    int state;  /* 0 idle, 1 a job waits or runs, 2 its result waits, 3 the thread must end */
    int fd;
    long long hi;
    HsDatabase *db;
    hs_scratch_t *scratch;  /* the thread's own: the database's may be in use meanwhile */
    /* the job */
    Py_buffer view;
    Py_ssize_t at, want;
    long long off;
    Collector *col;
    int stop;  /* set by result(): the scan takes over (read and written atomically) */
    /* its result */
    Py_ssize_t got, cut, upto;
    int err;
    hs_error_t rc;
} Prefetch;

static PyTypeObject PrefetchType;

static void prefetch_job(Prefetch *p) {
    char *base = p->view.buf;
    ssize_t n;
    do {
        n = pread(p->fd, base + p->at, (size_t)p->want, (off_t)p->off);
    } while (n < 0 && errno == EINTR);
    p->cut = p->upto = -1;
    p->rc = HS_SUCCESS;
    if (n < 0) {
        p->err = errno;
        p->got = 0;
        return;
    }
    p->got = n;
    if (p->col == NULL || n == 0) return;
    /* the part's whole lines, as scan_region cuts them */
    Py_ssize_t fill = p->at + n, cut = fill;
    if (p->off + n < p->hi) {
        const char *nl = memrchr(base, '\n', (size_t)fill);
        cut = nl == NULL ? 0 : nl - base + 1;
    }
    if (cut <= 0 || cut > (Py_ssize_t)UINT_MAX) return;
    p->col->len = 0;
    Py_ssize_t upto = 0;
    while (upto < cut && !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        Py_ssize_t end = upto + PREFETCH_SLICE;
        if (end >= cut) {
            end = cut;
        } else {  /* to the end of the line the slice ends in */
            const char *nl = memchr(base + end - 1, '\n', (size_t)(cut - end + 1));
            end = nl == NULL ? cut : nl - base + 1;
        }
        p->col->shift = upto - 1;  /* Collector.reset(lo - 1): offsets into the buffer */
        p->rc = HS.scan(p->db->db, base + upto, (unsigned int)(end - upto), 0, p->scratch,
                        hsdb_on_match, p->col);
        if (p->rc != HS_SUCCESS) break;
        upto = end;
    }
    p->cut = cut;
    p->upto = upto;
}

static void *prefetch_thread(void *arg) {
    Prefetch *p = arg;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "healer-prefetch");  /* (ps, top, and the tests) */
#endif
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->state == 0 || p->state == 2) pthread_cond_wait(&p->cv, &p->mu);
        if (p->state == 3) break;
        pthread_mutex_unlock(&p->mu);
        prefetch_job(p);
        pthread_mutex_lock(&p->mu);
        p->state = 2;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static PyObject *prefetch_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"fd", "hi", "db", NULL};
    int fd;
    long long hi;
    PyObject *db = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iL|O:Prefetch", names, &fd, &hi, &db))
        return NULL;
    if (db != Py_None && !PyObject_TypeCheck(db, &HsDatabaseType)) {
        PyErr_SetString(PyExc_TypeError, "Prefetch: db is an HsDatabase or None");
        return NULL;
    }
    Prefetch *p = (Prefetch *)type->tp_alloc(type, 0);
    if (p == NULL) return NULL;
    p->fd = fd;
    p->hi = hi;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (db != Py_None) {
        p->db = (HsDatabase *)Py_NewRef(db);
        if (HS.alloc_scratch(p->db->db, &p->scratch) != HS_SUCCESS) {
            Py_DECREF(p);
            return PyErr_NoMemory();
        }
    }
    return (PyObject *)p;
}

/* Waits (without the GIL) for the job's end, stopping its scan at the slice under way unless
 * it is to finish; 0, or -1 with the job's error set. The buffer and the collector are let
 * go either way. */
static int prefetch_wait(Prefetch *p, int finish) {
    if (!finish) __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&p->mu);
    while (p->state == 1) pthread_cond_wait(&p->cv, &p->mu);
    p->state = 0;
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS
    __atomic_store_n(&p->stop, 0, __ATOMIC_RELAXED);
    PyBuffer_Release(&p->view);
    Py_CLEAR(p->col);
    if (p->err) {
        errno = p->err;
        p->err = 0;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    if (p->rc != HS_SUCCESS) {
        if (p->rc == -3) PyErr_NoMemory();  /* HS_SCAN_TERMINATED: the collector could not grow */
        else PyErr_Format(PyExc_RuntimeError, "libhs scan failed (error %d)", p->rc);
        return -1;
    }
    return 0;
}

/* start(buf, at, left, off, collector=None): read up to left bytes of the file from off into
 * buf[at:] (and, with a collector and a database, scan the whole lines then in buf). */
static PyObject *prefetch_start(PyObject *self, PyObject *args) {
    Prefetch *p = (Prefetch *)self;
    PyObject *buf, *col = Py_None;
    Py_ssize_t at, left;
    long long off;
    if (!PyArg_ParseTuple(args, "OnnL|O:start", &buf, &at, &left, &off, &col)) return NULL;
    if (p->state != 0) {
        PyErr_SetString(PyExc_RuntimeError, "Prefetch.start: the last job's result is not taken");
        return NULL;
    }
    if (col != Py_None && (!PyObject_TypeCheck(col, &CollectorType) || p->db == NULL)) {
        PyErr_SetString(PyExc_TypeError, "Prefetch.start: a Collector needs a database");
        return NULL;
    }
    if (PyObject_GetBuffer(buf, &p->view, PyBUF_WRITABLE) < 0) return NULL;
    if (at < 0 || left < 0 || off < 0 || at > p->view.len) {
        PyBuffer_Release(&p->view);
        PyErr_SetString(PyExc_ValueError, "Prefetch.start: bad bounds");
        return NULL;
    }
    p->at = at;
    p->want = p->view.len - at < left ? p->view.len - at : left;
    p->off = off;
    p->col = col == Py_None ? NULL : (Collector *)Py_NewRef(col);
    pthread_mutex_lock(&p->mu);
    p->state = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (!p->has_thread) {
        /* Signals stay with Python's main thread: the new one starts with all blocked. */
        sigset_t all, before;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &before);
        int rc = pthread_create(&p->thread, NULL, prefetch_thread, p);
        pthread_sigmask(SIG_SETMASK, &before, NULL);
        if (rc != 0) {  /* do the job here: slower, but the same */
            prefetch_job(p);
            p->state = 2;
        } else {
            p->has_thread = 1;
        }
    }
    Py_RETURN_NONE;
}

/* result(finish=False) -> (bytes read, end of the part's whole lines, end of those scanned);
 * both ends are -1 when it had none to scan. The scan stops at the slice under way, unless
 * finish. */
static PyObject *prefetch_result(PyObject *self, PyObject *args) {
    Prefetch *p = (Prefetch *)self;
    int finish = 0;
    if (!PyArg_ParseTuple(args, "|p:result", &finish)) return NULL;
    if (p->state == 0) {
        PyErr_SetString(PyExc_RuntimeError, "Prefetch.result: no job was started");
        return NULL;
    }
    if (prefetch_wait(p, finish) < 0) return NULL;
    return Py_BuildValue("(nnn)", p->got, p->cut, p->upto);
}

static void prefetch_stop(Prefetch *p) {
    if (p->state != 0) {
        if (prefetch_wait(p, 0) < 0) PyErr_Clear();  /* (nobody asked for it) */
    }
    if (p->has_thread) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&p->mu);
        p->state = 3;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
        Py_END_ALLOW_THREADS
        p->has_thread = 0;
        p->state = 0;
    }
}

/* close(): waits for a job still running, and ends the thread. */
static PyObject *prefetch_close(PyObject *self, PyObject *unused) {
    prefetch_stop((Prefetch *)self);
    Py_RETURN_NONE;
}

static void prefetch_dealloc(PyObject *self) {
    Prefetch *p = (Prefetch *)self;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);  /* (an exception may be on its way out) */
    prefetch_stop(p);
    PyErr_Restore(type, value, traceback);
    if (p->scratch != NULL) HS.free_scratch(p->scratch);
    Py_XDECREF(p->db);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef prefetch_methods[] = {
    {"start", prefetch_start, METH_VARARGS,
     "start(buf, at, left, off, collector=None): read on the thread, then scan the whole "
     "lines read, a slice at a time, until result() is asked for."},
    {"result", prefetch_result, METH_VARARGS,
     "result(finish=False) -> (read, cut, upto): bytes read, the end of their whole lines and "
     "of those scanned (-1: none); the scan stops at the slice under way unless finish."},
    {"close", prefetch_close, METH_NOARGS, "close(): wait for the job, end the thread."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PrefetchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "healer.detect._speedups.Prefetch",
    .tp_basicsize = sizeof(Prefetch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Prefetch(fd, hi, db=None): reads (and Hyperscans) a file's next part on a "
              "native thread.",
    .tp_new = prefetch_new,
    .tp_dealloc = prefetch_dealloc,
    .tp_methods = prefetch_methods,
};

/* ---------------------------------------------------------------------------------------- */
/* Candidate lines                                                                            */

#define CLEANED (1LL << 40)  /* engine._CLEANED */
#define MAX_IDXS 64

/* Newlines in s[a:b]: byte counters a block at a time, which the compiler vectorizes (three
 * times memchr's speed on log lines). It reads every byte of a scanned file: on x86-64 a copy
 * compiled for AVX2 (32 bytes a step instead of 16) runs where the CPU has it. */
static inline __attribute__((always_inline)) Py_ssize_t count_nl_body(
        const char *s, Py_ssize_t a, Py_ssize_t b) {
    Py_ssize_t n = 0, i = a;
    while (i + 32 <= b) {
        Py_ssize_t rounds = (b - i) / 32;
        if (rounds > 255) rounds = 255;  /* a byte counter cannot overflow */
        unsigned char acc[32] = {0};
        for (Py_ssize_t k = 0; k < rounds; k++)
            for (int j = 0; j < 32; j++) acc[j] += s[i + k * 32 + j] == '\n';
        for (int j = 0; j < 32; j++) n += acc[j];
        i += rounds * 32;
    }
    for (; i < b; i++) n += s[i] == '\n';
    return n;
}

__attribute__((optimize("O3")))
static Py_ssize_t count_nl_plain(const char *s, Py_ssize_t a, Py_ssize_t b) {
    return count_nl_body(s, a, b);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3"), target("avx2")))
static Py_ssize_t count_nl_avx2(const char *s, Py_ssize_t a, Py_ssize_t b) {
    return count_nl_body(s, a, b);
}
#endif

static Py_ssize_t (*count_nl)(const char *, Py_ssize_t, Py_ssize_t) = count_nl_plain;

static void init_count_nl(void) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) count_nl = count_nl_avx2;
#endif
}

static Py_ssize_t rfind_nl(const char *s, Py_ssize_t a, Py_ssize_t b) {
    const char *p = memrchr(s + a, '\n', (size_t)(b > a ? b - a : 0));
    return p ? p - s : -1;
}

static Py_ssize_t find_nl(const char *s, Py_ssize_t a, Py_ssize_t b) {
    const char *p = memchr(s + a, '\n', (size_t)(b > a ? b - a : 0));
    return p ? p - s : -1;
}

/* Interned strings: the line model's levels and parts; set up by the module's init. */
static PyObject *LV_TRACE, *LV_DEBUG, *LV_INFO, *LV_WARN, *LV_ERROR, *LV_FATAL, *LV_NONE,
    *PART_LOG, *PART_SPEECH;

typedef struct {
    PyObject *buf, *confirm, *trusted, *cleaned, *found;
    const char *data;
    int is_bytes;
    /* With the line model's ranks (confirm_lines' optional rank and min_rank): a candidate
     * line that judge_lines would drop whatever its patterns confirm is dropped here, before
     * any Python object is made for it (most candidate lines of a real log: info and debug
     * lines, the agent's own words). */
    int judge;
    long ranks[6];  /* lines.RANK of trace … fatal */
    long *min_rank;
    Py_ssize_t npats;
} Pass;

/* What view_native finds of a line: its level and part (both borrowed), where its body lies
 * (s[b:e]) and where the source its prefix names does (src: 0 none; 1 kubectl, pod/A/B with
 * A = s[a1:a1+n1], B = s[a2:a2+n2]; 2 compose, s[a1:a1+n1]), without making any object. */
typedef struct {
    PyObject *level, *part;
    Py_ssize_t b, e;
    int src;
    Py_ssize_t a1, n1, a2, n2;
} View;

static int needs_view(const unsigned char *s, Py_ssize_t len);
enum { VIEW_PYTHON, VIEW_DONE, VIEW_DOCUMENT };  /* what quick_view could read */
static int quick_view(const unsigned char *s, Py_ssize_t n, View *v);
static PyObject *view_body(PyObject *line, const unsigned char *s, Py_ssize_t n,
                           const View *v);
static PyObject *view_source(const unsigned char *s, const View *v);
static int judged_away(const Pass *ps, const View *v, const long long *idxs, int k);
static PyObject *judged_row(const Pass *ps, Py_ssize_t line_idx, Py_ssize_t ls,
                            PyObject *line, PyObject *matched, int viewed, const View *v);

/* One candidate line: its patterns confirmed, added to found when any matches. */
static int flush_line(Pass *ps, Py_ssize_t line_idx, Py_ssize_t ls, Py_ssize_t le,
                      long long *idxs, int n) {
    PyObject *line = NULL;
    /* cleaned holds the text of the block's lines that hold ESC (ansi_lines), by their
     * start: a line without ESC is not looked up (no int object made per line). */
    if (PyDict_GET_SIZE(ps->cleaned) && memchr(ps->data + ls, 0x1b, (size_t)(le - ls))) {
        PyObject *key = PyLong_FromSsize_t(ls);
        if (key == NULL) return -1;
        line = PyDict_GetItemWithError(ps->cleaned, key);
        Py_DECREF(key);
        if (line == NULL && PyErr_Occurred()) return -1;
        if (line != NULL) {  /* an ANSI line: only the candidates of its cleaned text count */
            Py_INCREF(line);
            int k = 0;
            for (int i = 0; i < n; i++)
                if (idxs[i] >= CLEANED) idxs[k++] = idxs[i] - CLEANED;
            n = k;
        }
    }
    if (n == 0) {
        Py_XDECREF(line);
        return 0;
    }
    /* With the line model's ranks, the line is viewed here, once: a line judge_lines would
     * drop is dropped before it becomes objects, and a kept one leaves as judge_lines' row
     * (judged_row). viewed: 1 v holds its view, 0 it needs none, -1 Python decides. */
    int ansi = line != NULL, viewed = -1;
    View v;
    if (!ansi && ps->judge) {
        const unsigned char *at = (const unsigned char *)ps->data + ls;
        if (!needs_view(at, le - ls)) viewed = 0;
        else viewed = quick_view(at, le - ls, &v) == VIEW_DONE ? 1 : -1;
        if (viewed == 1 && judged_away(ps, &v, idxs, n)) return 0;
    }
    if (line == NULL) {
        line = ps->is_bytes ? PyBytes_FromStringAndSize(ps->data + ls, le - ls)
                            : PyByteArray_FromStringAndSize(ps->data + ls, le - ls);
        if (line == NULL) return -1;
    }
    Py_ssize_t npats = PyList_GET_SIZE(ps->confirm);
    for (int i = 1; i < n; i++) {  /* a handful at most: insertion sort */
        long long v = idxs[i];
        int k = i;
        for (; k > 0 && idxs[k - 1] > v; k--) idxs[k] = idxs[k - 1];
        idxs[k] = v;
    }
    PyObject *matched = PyList_New(0);
    if (matched == NULL) goto fail;
    for (int i = 0; i < n; i++) {
        long long idx = idxs[i];
        if (idx < 0 || idx >= npats) {
            PyErr_SetString(PyExc_IndexError, "candidate pattern index out of range");
            goto fail;
        }
        int ok;
        if (n == 1 && PyObject_IsTrue(PyList_GET_ITEM(ps->trusted, idx)) == 1) {
            ok = 1;
        } else {
            PyObject *r = PyObject_CallOneArg(PyList_GET_ITEM(ps->confirm, idx), line);
            if (r == NULL) goto fail;
            ok = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (ok < 0) goto fail;
        }
        if (ok) {
            PyObject *v = PyLong_FromLongLong(idx);
            if (v == NULL || PyList_Append(matched, v) < 0) {
                Py_XDECREF(v);
                goto fail;
            }
            Py_DECREF(v);
        }
    }
    if (PyList_GET_SIZE(matched)) {
        PyObject *row = viewed >= 0 ? judged_row(ps, line_idx, ls, line, matched, viewed, &v)
                                    : NULL;
        if (row == NULL && PyErr_Occurred()) goto fail;
        if (row == NULL) {  /* the engine's row for judge_lines */
            row = PyTuple_New(4);
            if (row == NULL) goto fail;
            PyObject *li = PyLong_FromSsize_t(line_idx), *start = PyLong_FromSsize_t(ls);
            PyTuple_SET_ITEM(row, 0, li);
            PyTuple_SET_ITEM(row, 1, start);
            Py_INCREF(line);
            PyTuple_SET_ITEM(row, 2, line);
            Py_INCREF(matched);
            PyTuple_SET_ITEM(row, 3, matched);
            if (li == NULL || start == NULL) {
                Py_DECREF(row);
                goto fail;
            }
        }
        if (row != Py_None && PyList_Append(ps->found, row) < 0) {
            Py_DECREF(row);
            goto fail;
        }
        Py_DECREF(row);
    }
    Py_DECREF(matched);
    Py_DECREF(line);
    return 0;
fail:
    Py_XDECREF(matched);
    Py_XDECREF(line);
    return -1;
}

/* Orders a collector's candidates by offset (the order of the patterns at one offset does
 * not matter: a line's are sorted when it is flushed). One database reports its matches by
 * end offset, and what is added after them (the candidates of ANSI lines' text) is a second
 * run, short and mostly in order itself: it is sorted on its own and merged, not the whole
 * block's candidates sorted again. */
static int sort_by_offset(Collector *col) {
    Cand *items = col->items;
    Py_ssize_t len = col->len, k = 1;
    while (k < len && items[k - 1].off <= items[k].off) k++;
    if (k >= len) return 0;
    Py_ssize_t tail = len - k;
    qsort(items + k, (size_t)tail, sizeof(Cand), cmp_cand);
    Cand *second = PyMem_Malloc((size_t)tail * sizeof(Cand));
    if (second == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(second, items + k, (size_t)tail * sizeof(Cand));
    /* merged from the back: the free slots are at the end */
    Py_ssize_t a = k - 1, b = tail - 1, w = len - 1;
    while (b >= 0) {
        if (a >= 0 && items[a].off > second[b].off) items[w--] = items[a--];
        else items[w--] = second[b--];
    }
    PyMem_Free(second);
    return 0;
}

/* Engine.scan_block's pass 1 (candidates → confirmed lines); NotImplemented for a buffer
 * that is neither bytes nor bytearray or a line with too many candidates. */
static PyObject *confirm_pass(Pass *psp, PyObject *cands, Py_ssize_t lo, Py_ssize_t hi,
                              Py_ssize_t first);

static PyObject *confirm_lines(PyObject *self, PyObject *args) {
    Pass ps;
    PyObject *cands, *rank = NULL, *min_rank = NULL;
    Py_ssize_t lo, hi, first;
    if (!PyArg_ParseTuple(args, "OnnOnO!O!O!|O!O!:confirm_lines", &ps.buf, &lo, &hi, &cands,
                          &first, &PyDict_Type, &ps.cleaned, &PyList_Type, &ps.confirm,
                          &PyList_Type, &ps.trusted, &PyDict_Type, &rank, &PyList_Type,
                          &min_rank))
        return NULL;
    ps.judge = 0;
    ps.min_rank = NULL;
    ps.npats = 0;
    if (rank != NULL && min_rank != NULL) {
        PyObject *levels[6] = {LV_TRACE, LV_DEBUG, LV_INFO, LV_WARN, LV_ERROR, LV_FATAL};
        ps.judge = 1;
        for (int k = 0; k < 6 && ps.judge; k++) {
            PyObject *r = PyDict_GetItemWithError(rank, levels[k]);
            if (r == NULL && PyErr_Occurred()) return NULL;
            ps.ranks[k] = r != NULL ? PyLong_AsLong(r) : -1;
            if (r == NULL || (ps.ranks[k] == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                ps.judge = 0;  /* ranks this code does not know: judge_lines decides */
            }
        }
        ps.npats = PyList_GET_SIZE(min_rank);
        ps.min_rank = ps.judge && ps.npats ? PyMem_Malloc(sizeof(long) * ps.npats) : NULL;
        if (ps.judge && ps.npats && ps.min_rank == NULL) return PyErr_NoMemory();
        for (Py_ssize_t i = 0; ps.judge && i < ps.npats; i++) {
            ps.min_rank[i] = PyLong_AsLong(PyList_GET_ITEM(min_rank, i));
            if (ps.min_rank[i] == -1 && PyErr_Occurred()) {
                PyMem_Free(ps.min_rank);
                return NULL;
            }
        }
        if (ps.npats == 0) ps.judge = 0;
    }
    PyObject *out = confirm_pass(&ps, cands, lo, hi, first);
    PyMem_Free(ps.min_rank);
    return out;
}

static PyObject *confirm_pass(Pass *psp, PyObject *cands, Py_ssize_t lo, Py_ssize_t hi,
                              Py_ssize_t first) {
    Pass ps = *psp;
    Collector *col = NULL;
    if (PyObject_TypeCheck(cands, &CollectorType)) {
        col = (Collector *)cands;
    } else if (!PyList_Check(cands)) {
        PyErr_SetString(PyExc_TypeError, "candidates: a list or a Collector");
        return NULL;
    }
    if (PyBytes_CheckExact(ps.buf)) {
        ps.is_bytes = 1;
        ps.data = PyBytes_AS_STRING(ps.buf);
        if (hi > PyBytes_GET_SIZE(ps.buf)) hi = -1;
    } else if (PyByteArray_CheckExact(ps.buf)) {
        ps.is_bytes = 0;
        ps.data = PyByteArray_AS_STRING(ps.buf);
        if (hi > PyByteArray_GET_SIZE(ps.buf)) hi = -1;
    } else {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (lo < 0 || hi < lo || PyList_GET_SIZE(ps.trusted) != PyList_GET_SIZE(ps.confirm)) {
        PyErr_SetString(PyExc_ValueError, "confirm_lines: bad bounds or pattern lists");
        return NULL;
    }
    ps.found = PyList_New(0);
    if (ps.found == NULL) return NULL;
    long long idxs[MAX_IDXS];
    int n = 0;
    Py_ssize_t line_idx = first, counted = lo, ls = -1, le = -1;
    Py_ssize_t count;
    if (col != NULL) {  /* sorted here, as the engine sorts a list before it calls */
        if (sort_by_offset(col) < 0) goto fail;
        count = col->len;
    } else {
        count = PyList_GET_SIZE(cands);
    }
    for (Py_ssize_t c = 0; c < count; c++) {
        Py_ssize_t off;
        long long idx;
        if (col != NULL) {
            off = (Py_ssize_t)col->items[c].off;
            idx = col->items[c].idx;
        } else {
            PyObject *item = PyList_GET_ITEM(cands, c);
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
                PyErr_SetString(PyExc_TypeError, "candidates must be (offset, index) pairs");
                goto fail;
            }
            off = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
            idx = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
            if ((off == -1 || idx == -1) && PyErr_Occurred()) goto fail;
        }
        if (off <= le) {
            int seen = 0;
            for (int i = 0; i < n; i++) seen |= idxs[i] == idx;
            if (!seen) {
                if (n == MAX_IDXS) {
                    Py_DECREF(ps.found);
                    Py_RETURN_NOTIMPLEMENTED;
                }
                idxs[n++] = idx;
            }
            continue;
        }
        if (n && flush_line(&ps, line_idx, ls, le, idxs, n) < 0) goto fail;
        if (off < lo || off > hi) {
            PyErr_SetString(PyExc_ValueError, "candidate offset outside the block");
            goto fail;
        }
        ls = rfind_nl(ps.data, lo, off) + 1;
        if (ls == 0) ls = lo;
        le = find_nl(ps.data, off, hi);
        if (le < 0) le = hi;
        line_idx += count_nl(ps.data, counted, ls);
        counted = ls;
        idxs[0] = idx;
        n = 1;
    }
    if (n && flush_line(&ps, line_idx, ls, le, idxs, n) < 0) goto fail;
    Py_ssize_t newlines = line_idx - first + count_nl(ps.data, counted, hi);
    PyObject *out = Py_BuildValue("(nN)", newlines, ps.found);
    return out;
fail:
    Py_DECREF(ps.found);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Judging and timing confirmed lines (Engine._hits)                                         */

static int lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int word_at(const unsigned char *s, Py_ssize_t n, Py_ssize_t p, const char *rest) {
    for (Py_ssize_t k = 0; rest[k]; k++)
        if (p + 1 + k >= n || lower(s[p + 1 + k]) != (unsigned char)rest[k]) return 0;
    return 1;
}

/* What needs_view looks for at a byte: 1 for '{' and ESC (found on their own), else the
 * lower-case byte that must follow it ('|' then ' ', 'i' then 'n' …); 0 for the rest. */
static unsigned char VIEW_NEXT[256];

static void init_view_next(void) {
    VIEW_NEXT['{'] = VIEW_NEXT[0x1b] = 1;
    VIEW_NEXT['|'] = ' ';
    VIEW_NEXT['i'] = VIEW_NEXT['I'] = 'n';
    VIEW_NEXT['d'] = VIEW_NEXT['D'] = 'e';
    VIEW_NEXT['t'] = VIEW_NEXT['T'] = 'r';
    VIEW_NEXT['n'] = VIEW_NEXT['N'] = 'o';
}

#if defined(__GNUC__) || defined(__clang__)
typedef unsigned char v16 __attribute__((vector_size(16)));

/* Whether s[0:16] or s[1:17] may hold a place needs_view stops at: the pairs of VIEW_NEXT
 * ("in", "de", "tr", "no" in any case, "| ") and '{' or ESC, tested 16 bytes at a time (a
 * log line's letters are a quarter i, d, t or n: the pairs are five times rarer). */
static int view_pairs16(const unsigned char *s) {
    v16 a, b;
    memcpy(&a, s, 16);
    memcpy(&b, s + 1, 16);
    v16 la = a | 0x20, lb = b | 0x20;  /* letters in lower case (other bytes: may hit more) */
    v16 hit = (a == '{') | (a == 0x1b) | ((a == '|') & (b == ' ')) |
              ((la == 'i') & (lb == 'n')) | ((la == 'd') & (lb == 'e')) |
              ((la == 't') & (lb == 'r')) | ((la == 'n') & (lb == 'o'));
    unsigned long long w[2];
    memcpy(w, &hit, 16);
    return (w[0] | w[1]) != 0;
}
#endif

/* healer.detect.lines.needs_view: a prefix, JSON, escape codes or a low level word (ASCII
 * caseless: info, debug, trace, notice) in the first 160 bytes. */
static int needs_view(const unsigned char *s, Py_ssize_t len) {
    Py_ssize_t n = len < 160 ? len : 160;
    if (len >= 5 && memcmp(s, "[pod/", 5) == 0) return 1;
    if (len >= 1 && s[0] == '<') return 1;
    Py_ssize_t i = 0;
    while (i < n) {
#if defined(__GNUC__) || defined(__clang__)
        /* Skip 16 bytes where no pair starts (s[i + 16] is read only inside the line). */
        if (i + 17 <= n && !view_pairs16(s + i)) {
            i += 16;
            continue;
        }
#endif
        Py_ssize_t stop = i + 16 < n ? i + 16 : n;
        for (; i < stop; i++) {
            unsigned char next = VIEW_NEXT[s[i]];
            if (next == 0) continue;
            if (next == 1) return 1;
            if (i + 1 >= n || lower(s[i + 1]) != next) continue;
            switch (next) {
                case ' ': return 1;
                case 'n': if (word_at(s, n, i, "nfo")) return 1; break;
                case 'e': if (word_at(s, n, i, "ebug")) return 1; break;
                case 'r': if (word_at(s, n, i, "race")) return 1; break;
                case 'o': if (word_at(s, n, i, "otice")) return 1; break;
                default: break;
            }
        }
    }
    return 0;
}


/* ---------------------------------------------------------------------------------------- */
/* The line model (healer.detect.lines.view_fields), for the lines it can be sure of         */

static int is_ws(unsigned char c) { return is_space(c); }
static int is_alpha(unsigned char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }
static int is_alnum(unsigned char c) { return is_alpha(c) || is_digit(c); }
static int is_word(unsigned char c) { return is_alnum(c) || c == '_'; }

/* Caseless: does s[p:] start with the lower-case word w (within n)? */
static int starts_ci(const unsigned char *s, Py_ssize_t n, Py_ssize_t p, const char *w) {
    Py_ssize_t k = 0;
    for (; w[k]; k++)
        if (p + k >= n || lower(s[p + k]) != (unsigned char)w[k]) return 0;
    return 1;
}

static int starts_cs(const unsigned char *s, Py_ssize_t n, Py_ssize_t p, const char *w) {
    size_t k = strlen(w);
    return p + (Py_ssize_t)k <= n && memcmp(s + p, w, k) == 0;
}

/* lines._WORDS[word.lower()], or "" (LV_NONE). */
static PyObject *level_word(const unsigned char *w, Py_ssize_t len) {
    static const struct { const char *word; int level; } words[] = {
        {"trace", 0}, {"debug", 1}, {"info", 2}, {"information", 2}, {"notice", 2},
        {"warn", 3}, {"warning", 3}, {"error", 4}, {"err", 4}, {"fatal", 5},
        {"critical", 5}, {"crit", 5}, {"panic", 5}, {"emerg", 5}, {"alert", 5},
        {"dpanic", 5}, {"severe", 4}, {"i", 2}, {"w", 3}, {"e", 4}, {"f", 5}, {"d", 1},
        {"t", 0}, {NULL, 0}};
    PyObject *levels[6] = {LV_TRACE, LV_DEBUG, LV_INFO, LV_WARN, LV_ERROR, LV_FATAL};
    for (int i = 0; words[i].word; i++) {
        if ((Py_ssize_t)strlen(words[i].word) == len && starts_ci(w, len, 0, words[i].word))
            return levels[words[i].level];
    }
    return LV_NONE;
}

/* lines._level_word(int): pino/bunyan and Python numbers. */
static PyObject *level_number(long v) {
    if (v >= 60) return LV_FATAL;
    if (v >= 50) return LV_ERROR;
    if (v >= 40) return LV_WARN;
    if (v >= 30) return LV_INFO;
    if (v >= 20) return LV_DEBUG;
    return LV_TRACE;
}

/* lines._KUBECTL.match: the prefix's length, 0 when none; the two names' spans. */
/* The bytes a kubectl prefix's pod name stops at ('/', ']' or a space: 1), and its
 * container name (']' or a space: 2); both bits for ']' and spaces. */
static unsigned char POD_STOP[256];

static void init_pod_stop(void) {
    for (int c = 0; c < 256; c++) POD_STOP[c] = is_ws((unsigned char)c) ? 3 : 0;
    POD_STOP['/'] = 1;
    POD_STOP[']'] = 3;
}

static Py_ssize_t kubectl_prefix(const unsigned char *s, Py_ssize_t n, Py_ssize_t *a1,
                                 Py_ssize_t *n1, Py_ssize_t *a2, Py_ssize_t *n2) {
    if (n < 5 || memcmp(s, "[pod/", 5) != 0) return 0;
    Py_ssize_t p = 5;
    while (p < n && !(POD_STOP[s[p]] & 1)) p++;
    if (p - 5 < 1 || p - 5 > 253 || p >= n || s[p] != '/') return 0;
    *a1 = 5;
    *n1 = p - 5;
    Py_ssize_t q = ++p;
    while (q < n && !(POD_STOP[s[q]] & 2)) q++;
    if (q - p < 1 || q - p > 63 || q + 1 >= n || s[q] != ']' || s[q + 1] != ' ') return 0;
    *a2 = p;
    *n2 = q - p;
    return q + 2;
}

/* lines._STAMP.match: its length, 0 when none. */
static Py_ssize_t stamp_prefix(const unsigned char *s, Py_ssize_t n) {
    if (n < 20 || find_stamp(s, 19) != 0) return 0;
    Py_ssize_t p = 19;
    if (p + 1 < n && (s[p] == '.' || s[p] == ',') && is_digit(s[p + 1])) {
        Py_ssize_t k = p + 1;
        while (k < n && is_digit(s[k])) k++;
        if (k - (p + 1) > 9) return 0;  /* a tenth digit: neither a zone nor the space */
        p = k;
    }
    if (p < n && s[p] == ' ') return p + 1;
    if (p < n && (s[p] == 'Z' || s[p] == 'z')) {
        p++;
    } else if (p + 2 < n && (s[p] == '+' || s[p] == '-') && is_digit(s[p + 1]) &&
               is_digit(s[p + 2])) {
        p += 3;
        if (p < n && s[p] == ':') p++;
        if (!(p + 1 < n && is_digit(s[p]) && is_digit(s[p + 1]))) return 0;
        p += 2;
    } else {
        return 0;
    }
    return p < n && s[p] == ' ' ? p + 1 : 0;
}

static int compose_char(unsigned char c) { return is_alnum(c) || c == '_' || c == '.' || c == '-'; }

/* lines._COMPOSE.match: its length, 0 when none; the name's length in *name. */
static Py_ssize_t compose_prefix(const unsigned char *s, Py_ssize_t n, Py_ssize_t *name) {
    if (n < 1 || !is_alnum(s[0])) return 0;
    Py_ssize_t p = 1;
    while (p < n && compose_char(s[p])) p++;
    if (p > 63) return 0;
    *name = p;
    Py_ssize_t q = p;
    while (q < n && is_ws(s[q])) q++;
    if (q - p > 40) return 0;
    return q + 1 < n && s[q] == '|' && s[q + 1] == ' ' ? q + 2 : 0;
}

/* lines._JSON_LEVEL.search over s[0:n]: the level, or NULL when it finds none. */
static PyObject *json_level(const unsigned char *s, Py_ssize_t n) {
    static const char *keys[] = {"level\"", "severity\"", "lvl\"", "levelname\"", "log.level\"",
                                 "loglevel\"", NULL};
    const unsigned char *end = s + n, *at = s;
    while ((at = memchr(at, '"', (size_t)(end - at))) != NULL) {
        Py_ssize_t p = at - s;
        at++;
        if (at == end || (*at != 'l' && *at != 's')) continue;  /* what every key starts with */
        for (int k = 0; keys[k]; k++) {
            if (!starts_cs(s, n, p + 1, keys[k])) continue;
            Py_ssize_t q = p + 1 + (Py_ssize_t)strlen(keys[k]);
            while (q < n && is_ws(s[q])) q++;
            if (q >= n || s[q] != ':') break;
            q++;
            while (q < n && is_ws(s[q])) q++;
            if (q < n && s[q] == '"') {
                Py_ssize_t a = q + 1, e = a;
                while (e < n && is_alpha(s[e])) e++;
                if (e - a >= 1 && e - a <= 12 && e < n && s[e] == '"')
                    return level_word(s + a, e - a);
            } else if (q < n && is_digit(s[q])) {
                Py_ssize_t e = q;
                long v = 0;
                while (e < n && is_digit(s[e])) {
                    if (e - q < 3) v = v * 10 + (s[e] - '0');
                    e++;
                }
                if (e - q <= 3 && (e >= n || !is_word(s[e]))) return level_number(v);
            }
            break;  /* the keys exclude each other: no other can match here */
        }
    }
    return NULL;
}

/* _ANY_LEVEL's first two alternatives and its third one, at p; NULL when none matches. */
static PyObject *any_level_at(const unsigned char *s, Py_ssize_t n, Py_ssize_t p) {
    static const char *keys[] = {"level=", "lvl=", "severity=", "loglevel=", NULL};
    static const char *bracketed[] = {"trace", "debug", "info", "information", "notice", "warn",
                                      "warning", "error", "err", "fatal", "critical", "crit",
                                      "panic", "emerg", "alert", NULL};
    static const char *upper[] = {"TRACE", "DEBUG", "INFO", "NOTICE", "WARN", "WARNING",
                                  "ERROR", "ERR", "FATAL", "CRITICAL", "PANIC", "Info",
                                  "Warning", "Error", "Critical", "Debug", NULL};
    /* (?i:(?:^|\s)(?:level|lvl|severity|loglevel)="?([a-z]{3,8})\b) */
    for (int branch = 0; branch < 2; branch++) {
        Py_ssize_t at;
        if (branch == 0) {
            if (p != 0) continue;
            at = p;
        } else {
            if (!is_ws(s[p])) continue;
            at = p + 1;
        }
        if (at >= n || (lower(s[at]) != 'l' && lower(s[at]) != 's')) continue;
        for (int k = 0; keys[k]; k++) {
            if (!starts_ci(s, n, at, keys[k])) continue;
            Py_ssize_t q = at + (Py_ssize_t)strlen(keys[k]);
            if (q < n && s[q] == '"') q++;
            Py_ssize_t e = q;
            while (e < n && is_alpha(s[e])) e++;
            if (e - q >= 3 && e - q <= 8 && (e >= n || !is_word(s[e])))
                return level_word(s + q, e - q);
        }
    }
    /* (?i:[\[<(]\s?(words)\s?[\]>)]) */
    if (s[p] == '[' || s[p] == '<' || s[p] == '(') {
        Py_ssize_t at = p + 1;
        if (at < n && is_ws(s[at])) at++;
        for (int k = 0; bracketed[k]; k++) {
            if (!starts_ci(s, n, at, bracketed[k])) continue;
            Py_ssize_t len = (Py_ssize_t)strlen(bracketed[k]), q = at + len;
            if (q < n && is_ws(s[q])) q++;
            if (q < n && (s[q] == ']' || s[q] == '>' || s[q] == ')'))
                return level_word(s + at, len);
        }
    }
    /* (?:^|[\s:|\-\[])(WORDS)(?=[\s:\]|\-]|$) */
    for (int branch = 0; branch < 2; branch++) {
        Py_ssize_t at;
        if (branch == 0) {
            if (p != 0) continue;
            at = p;
        } else {
            unsigned char c = s[p];
            if (!(is_ws(c) || c == ':' || c == '|' || c == '-' || c == '[')) continue;
            at = p + 1;
        }
        if (at >= n || strchr("TDINWEFCP", s[at]) == NULL || s[at] == '\0') continue;
        for (int k = 0; upper[k]; k++) {
            if (!starts_cs(s, n, at, upper[k])) continue;
            Py_ssize_t q = at + (Py_ssize_t)strlen(upper[k]);
            int end = q == n || (q == n - 1 && s[q] == '\n');
            if (end || (q < n && (is_ws(s[q]) || s[q] == ':' || s[q] == ']' || s[q] == '|' ||
                                  s[q] == '-')))
                return level_word(s + at, q - at);
        }
    }
    return NULL;
}

/* The bytes after which any_level_at may match (is_ws, and the brackets and separators of
 * its alternatives). */
static unsigned char LEVEL_LEAD[256];

static void init_level_lead(void) {
    for (int c = 0; c < 256; c++) LEVEL_LEAD[c] = is_ws((unsigned char)c);
    for (const char *c = "[<(:|-"; *c; c++) LEVEL_LEAD[(unsigned char)*c] = 1;
}

/* lines._level_of(body[:96]). */
static PyObject *text_level(const unsigned char *s, Py_ssize_t n) {
    if (n > 96) n = 96;
    if (n >= 1 && s[0] == '<') {
        Py_ssize_t e = 1;
        long v = 0;
        while (e < n && is_digit(s[e]) && e <= 3) v = v * 10 + (s[e++] - '0');
        if (e > 1 && e < n && s[e] == '>' && v < 192) {
            static const int sys[8] = {5, 5, 5, 4, 3, 2, 2, 1};
            PyObject *levels[6] = {LV_TRACE, LV_DEBUG, LV_INFO, LV_WARN, LV_ERROR, LV_FATAL};
            return levels[sys[v & 7]];
        }
    } else if (n >= 1 && (s[0] == 'I' || s[0] == 'W' || s[0] == 'E' || s[0] == 'F')) {
        /* ([IWEF])\d{4} \d{2}:\d{2}:\d{2} */
        if (n >= 14 && is_digit(s[1]) && is_digit(s[2]) && is_digit(s[3]) && is_digit(s[4]) &&
            s[5] == ' ' && is_digit(s[6]) && is_digit(s[7]) && s[8] == ':' && is_digit(s[9]) &&
            is_digit(s[10]) && s[11] == ':' && is_digit(s[12]) && is_digit(s[13]))
            return s[0] == 'I' ? LV_INFO : s[0] == 'W' ? LV_WARN : s[0] == 'E' ? LV_ERROR
                                                                               : LV_FATAL;
    }
    for (Py_ssize_t p = 0; p < n; p++) {
        /* Past the start, every alternative of any_level_at begins at a space or one of
         * "[<(:|-": the other bytes are passed over here. */
        if (p && !LEVEL_LEAD[s[p]]) continue;
        PyObject *found = any_level_at(s, n, p);
        if (found != NULL) return found;
    }
    return LV_NONE;
}

/* Whether the JSON body may be a transcript event (lines._TRANSCRIPT: "type" or "msg": {). */
static int transcript_marker(const unsigned char *s, Py_ssize_t n) {
    const unsigned char *end = s + n, *q = s;
    while ((q = memchr(q, '"', (size_t)(end - q))) != NULL) {
        Py_ssize_t p = q - s;
        q++;
        if (q < end && *q == 't' && starts_cs(s, n, p, "\"type\"")) return 1;
        if (q < end && *q == 'm' && starts_cs(s, n, p, "\"msg\":")) {
            Py_ssize_t r = p + 6;
            if (r < n && s[r] == ' ') r++;
            if (r < n && s[r] == '{') return 1;
        }
    }
    return 0;
}

/* ---- Transcript events read in C: a strict JSON validator that notes the few keys
 * lines._structured reads first. Whatever it does not accept (NaN, deep nesting, escapes in
 * the keys or values it reads, anything Python's json might read differently) goes to
 * lines.view_document: accepting less than json does is always safe. */

typedef struct {
    const unsigned char *s;
    Py_ssize_t n, p;
    int has_msg;                        /* a top-level "msg" key */
    Py_ssize_t type_at, type_len;       /* the last top-level "type" string (-1: none) */
    int type_bad;                       /* ... the last one was no plain string */
    int item_object;                    /* the last top-level "item" value is an object */
    Py_ssize_t item_type_at, item_type_len;  /* that object's last "type" string (-1: none) */
    int item_type_bad;
    /* The last top-level "subtype": 0 none, 1 a plain string (at sub_at), 2 a string with
     * escapes, 3 a number, true, false or null, 4 an object or array. */
    int sub_kind;
    Py_ssize_t sub_at, sub_len;
    int is_error;                       /* the last top-level "is_error" is true */
    int message_object;                 /* the last top-level "message" is an object */
    int content_list;                   /* ... whose last "content" is an array */
    int content_error;                  /* ... holding a tool_result part with is_error true */
    int part_tool_result, part_is_error;  /* the content part being read */
} Json;

/* What j_object and j_value are reading, for the keys transcript_event looks at. */
enum { R_ANY, R_TOP, R_ITEM, R_MESSAGE, R_CONTENT, R_PART };

static void j_ws(Json *j) {
    while (j->p < j->n && (j->s[j->p] == ' ' || j->s[j->p] == '\t' || j->s[j->p] == '\n' ||
                           j->s[j->p] == '\r'))
        j->p++;
}

static int hexdig(unsigned char c) { return is_digit(c) || ((c | 32) >= 'a' && (c | 32) <= 'f'); }

/* A string at p (on its quote): 1 and its content's span, with *plain when it holds no
 * escape; 0 when not valid (or not plainly UTF-8). */
static int j_string(Json *j, Py_ssize_t *at, Py_ssize_t *len, int *plain) {
    const unsigned char *s = j->s;
    Py_ssize_t p = j->p + 1, n = j->n;
    *plain = 1;
    *at = p;
    while (p < n) {
        unsigned char c = s[p];
        if (c == '"') {
            *len = p - *at;
            j->p = p + 1;
            return 1;
        }
        if (c < 0x20) return 0;
        if (c == '\\') {
            *plain = 0;
            if (p + 1 >= n) return 0;
            unsigned char e = s[p + 1];
            if (e == 'u') {
                if (p + 5 >= n || !hexdig(s[p + 2]) || !hexdig(s[p + 3]) || !hexdig(s[p + 4]) ||
                    !hexdig(s[p + 5]))
                    return 0;
                p += 6;
            } else if (strchr("\"\\/bfnrt", e) != NULL && e != 0) {
                p += 2;
            } else {
                return 0;
            }
            continue;
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        /* UTF-8, without the surrogates surrogatepass would let through */
        int more;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c == 0xE0) { more = 2; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) more = 2;
        else if (c == 0xED) { more = 2; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) more = 2;
        else if (c == 0xF0) { more = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) more = 3;
        else if (c == 0xF4) { more = 3; hi = 0x8F; }
        else return 0;
        if (p + more >= n || s[p + 1] < lo || s[p + 1] > hi) return 0;
        for (int k = 2; k <= more; k++)
            if (s[p + k] < 0x80 || s[p + k] > 0xBF) return 0;
        p += more + 1;
    }
    return 0;
}

static int j_value(Json *j, int depth, int role);

/* role: 0 anywhere, 1 the top-level object, 2 the top-level "item" object */
static int j_object(Json *j, int depth, int role) {
    j->p++;  /* { */
    j_ws(j);
    if (role == R_PART) j->part_tool_result = j->part_is_error = 0;
    if (j->p < j->n && j->s[j->p] == '}') {
        j->p++;
        return 1;
    }
    for (;;) {
        if (j->p >= j->n || j->s[j->p] != '"') return 0;
        Py_ssize_t kat, klen;
        int kplain;
        if (!j_string(j, &kat, &klen, &kplain)) return 0;
        if (role && !kplain) return 0;  /* an escaped key might be one that is read */
        j_ws(j);
        if (j->p >= j->n || j->s[j->p] != ':') return 0;
        j->p++;
        j_ws(j);
        if (j->p >= j->n) return 0;
        const unsigned char *k = j->s + kat;
        unsigned char first = j->s[j->p];
        int is_type = klen == 4 && memcmp(k, "type", 4) == 0;
        int is_error_key = klen == 8 && memcmp(k, "is_error", 8) == 0;
        int child = R_ANY;
        if (role == R_TOP && klen == 3 && memcmp(k, "msg", 3) == 0) j->has_msg = 1;
        if (role == R_TOP && klen == 4 && memcmp(k, "item", 4) == 0) {
            j->item_object = first == '{';
            j->item_type_at = -1;
            j->item_type_bad = 0;
            child = j->item_object ? R_ITEM : R_ANY;
        }
        if (role == R_TOP && klen == 7 && memcmp(k, "message", 7) == 0) {
            j->message_object = first == '{';
            j->content_list = j->content_error = 0;
            child = j->message_object ? R_MESSAGE : R_ANY;
        }
        if (role == R_MESSAGE && klen == 7 && memcmp(k, "content", 7) == 0) {
            j->content_list = first == '[';
            j->content_error = 0;
            child = j->content_list ? R_CONTENT : R_ANY;
        }
        if ((role == R_TOP || role == R_PART) && is_error_key) {
            int yes = starts_cs(j->s, j->n, j->p, "true");
            if (role == R_TOP) j->is_error = yes;
            else j->part_is_error = yes;
        }
        if (role == R_TOP && klen == 7 && memcmp(k, "subtype", 7) == 0) {
            if (first == '"') {
                int plain;
                if (!j_string(j, &j->sub_at, &j->sub_len, &plain)) return 0;
                j->sub_kind = plain ? 1 : 2;
            } else {
                j->sub_kind = first == '{' || first == '[' ? 4 : 3;
                if (!j_value(j, depth + 1, R_ANY)) return 0;
            }
        } else if (is_type && role == R_PART) {
            if (first == '"') {
                Py_ssize_t at, len;
                int plain;
                if (!j_string(j, &at, &len, &plain)) return 0;
                if (!plain) return 0;  /* it might spell tool_result: Python reads it */
                j->part_tool_result = len == 11 && memcmp(j->s + at, "tool_result", 11) == 0;
            } else {
                j->part_tool_result = 0;
                if (!j_value(j, depth + 1, R_ANY)) return 0;
            }
        } else if (is_type && (role == R_TOP || role == R_ITEM)) {
            Py_ssize_t *at = role == R_TOP ? &j->type_at : &j->item_type_at;
            Py_ssize_t *len = role == R_TOP ? &j->type_len : &j->item_type_len;
            int *bad = role == R_TOP ? &j->type_bad : &j->item_type_bad;
            if (j->s[j->p] == '"') {
                int plain;
                if (!j_string(j, at, len, &plain)) return 0;
                *bad = !plain;
            } else {
                *at = -1;
                *bad = 1;
                if (!j_value(j, depth + 1, 0)) return 0;
            }
        } else if (!j_value(j, depth + 1, child)) {
            return 0;
        }
        j_ws(j);
        if (j->p >= j->n) return 0;
        if (j->s[j->p] == '}') {
            j->p++;
            if (role == R_PART && j->part_tool_result && j->part_is_error)
                j->content_error = 1;
            return 1;
        }
        if (j->s[j->p] != ',') return 0;
        j->p++;
        j_ws(j);
    }
}

static int j_value(Json *j, int depth, int role) {
    if (depth > 64 || j->p >= j->n) return 0;
    const unsigned char *s = j->s;
    unsigned char c = s[j->p];
    if (c == '{') return j_object(j, depth, role);
    if (c == '[') {
        j->p++;
        j_ws(j);
        if (j->p < j->n && s[j->p] == ']') {
            j->p++;
            return 1;
        }
        for (;;) {  /* (a content array's objects are its parts) */
            if (!j_value(j, depth + 1, role == R_CONTENT ? R_PART : R_ANY)) return 0;
            j_ws(j);
            if (j->p >= j->n) return 0;
            if (s[j->p] == ']') {
                j->p++;
                return 1;
            }
            if (s[j->p] != ',') return 0;
            j->p++;
            j_ws(j);
        }
    }
    if (c == '"') {
        Py_ssize_t at, len;
        int plain;
        return j_string(j, &at, &len, &plain);
    }
    if (c == 't') return starts_cs(s, j->n, j->p, "true") ? (j->p += 4, 1) : 0;
    if (c == 'f') return starts_cs(s, j->n, j->p, "false") ? (j->p += 5, 1) : 0;
    if (c == 'n') return starts_cs(s, j->n, j->p, "null") ? (j->p += 4, 1) : 0;
    /* -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)? — and nothing json reads otherwise (NaN ...) */
    Py_ssize_t p = j->p, n = j->n;
    if (s[p] == '-') p++;
    if (p >= n || !is_digit(s[p])) return 0;
    Py_ssize_t first = p;
    if (s[p] == '0') p++;
    else while (p < n && is_digit(s[p])) p++;
    if (p - first > 100) return 0;  /* int() refuses very long numbers */
    if (p < n && s[p] == '.') {
        p++;
        if (p >= n || !is_digit(s[p])) return 0;
        while (p < n && is_digit(s[p])) p++;
    }
    if (p < n && (s[p] == 'e' || s[p] == 'E')) {
        p++;
        if (p < n && (s[p] == '+' || s[p] == '-')) p++;
        if (p >= n || !is_digit(s[p])) return 0;
        while (p < n && is_digit(s[p])) p++;
    }
    j->p = p;
    return 1;
}

static int span_is(const unsigned char *s, Py_ssize_t at, Py_ssize_t len, const char *word) {
    return at >= 0 && (size_t)len == strlen(word) && memcmp(s + at, word, (size_t)len) == 0;
}

/* lines._structured's (level, part) for the commonest transcript events — Claude Code's
 * assistant, user, result, system and error events, a Codex item event — of the JSON
 * document s[0:n]; 0 when Python must read it. */
static int transcript_event(const unsigned char *s, Py_ssize_t n, PyObject **level,
                            PyObject **part) {
    Json j = {s, n, 0, 0, -1, 0, 0, 0, -1, 0, 0};
    j.sub_kind = 0;
    j.sub_at = j.sub_len = 0;
    j.is_error = j.message_object = j.content_list = j.content_error = 0;
    j.part_tool_result = j.part_is_error = 0;
    j_ws(&j);
    if (j.p >= n || s[j.p] != '{' || !j_object(&j, 0, R_TOP)) return 0;
    j_ws(&j);
    if (j.p != n || j.type_bad || j.type_at < 0) return 0;
    if (span_is(s, j.type_at, j.type_len, "assistant")) {
        *level = LV_INFO;
        *part = PART_SPEECH;
        return 1;
    }
    /* _claude_event's user, result, system and error events */
    if (span_is(s, j.type_at, j.type_len, "user")) {
        int failed = j.message_object && j.content_list && j.content_error;
        *level = failed ? LV_ERROR : LV_INFO;
        *part = failed ? PART_LOG : PART_SPEECH;
        return 1;
    }
    if (span_is(s, j.type_at, j.type_len, "error")) {
        *level = LV_ERROR;
        *part = PART_LOG;
        return 1;
    }
    int result = span_is(s, j.type_at, j.type_len, "result");
    if (result || span_is(s, j.type_at, j.type_len, "system")) {
        /* str(subtype): a string with escapes is Python's to read, and so, for "error" in
         * it, is an object or array; a number, true, false or null never says error */
        if (j.sub_kind == 2 || (!result && j.sub_kind == 4)) return 0;
        const unsigned char *sub = s + j.sub_at;
        int says = 0;
        if (j.sub_kind == 1 && result)
            says = j.sub_len >= 5 && memcmp(sub, "error", 5) == 0;
        else if (j.sub_kind == 1)
            says = memmem(sub, (size_t)j.sub_len, "error", 5) != NULL;
        int failed = says || (result && j.is_error);
        *level = failed ? LV_ERROR : LV_INFO;
        *part = PART_LOG;
        return 1;
    }
    if (!(span_is(s, j.type_at, j.type_len, "item.started") ||
          span_is(s, j.type_at, j.type_len, "item.updated") ||
          span_is(s, j.type_at, j.type_len, "item.completed")))
        return 0;
    /* _claude_event knows no item event; a "msg" would be read before it: let Python */
    if (j.has_msg || !j.item_object || j.item_type_bad || j.item_type_at < 0) return 0;
    Py_ssize_t at = j.item_type_at, len = j.item_type_len;
    if (span_is(s, at, len, "agent_message") || span_is(s, at, len, "reasoning") ||
        span_is(s, at, len, "todo_list") || span_is(s, at, len, "file_change")) {
        *level = LV_INFO;
        *part = PART_SPEECH;
    } else if (span_is(s, at, len, "command_execution")) {
        return 0;
    } else if (span_is(s, at, len, "error")) {
        *level = LV_ERROR;
        *part = PART_LOG;
    } else {
        *level = LV_INFO;
        *part = PART_LOG;
    }
    return 1;
}

/* view_fields(line): the prefixes, plain-text levels and JSON records with a level field
 * here; a JSON document to read (a transcript event, a record without a level field) by
 * document(body, source) (lines.view_document) when it is given. NULL without an error when
 * the Python original must decide: escape codes, or a document and no document(). */
static PyObject *view_native(PyObject *line, PyObject *document) {
    if (!PyBytes_CheckExact(line) && !PyByteArray_CheckExact(line)) return NULL;
    const unsigned char *s;
    Py_ssize_t n;
    if (line_data(line, &s, &n) < 0) return NULL;
    View v;
    int got = quick_view(s, n, &v);
    if (got == VIEW_PYTHON || (got == VIEW_DOCUMENT && (document == NULL || document == Py_None)))
        return NULL;
    PyObject *body = view_body(line, s, n, &v);
    if (body == NULL) return NULL;
    PyObject *source = view_source(s, &v);
    if (source == NULL) {
        Py_DECREF(body);
        return NULL;
    }
    if (got == VIEW_DOCUMENT) {  /* a document to read: Python's json decides */
        PyObject *doc = PyObject_CallFunctionObjArgs(document, body, source, NULL);
        Py_DECREF(body);
        Py_DECREF(source);
        return doc;
    }
    return Py_BuildValue("(NONO)", body, v.level, source, v.part);
}

/* view_line(line, document=None) -> (body, level, source, part) | None: view_native, for the
 * tests. */
/* The line model's reading of s into v, without making any object: VIEW_DONE; or
 * VIEW_DOCUMENT, a JSON document its readers do not take (level NULL, the spans set: Python's
 * json reads the body); or VIEW_PYTHON, escape codes (Python's view_fields decides). */
static int quick_view(const unsigned char *s, Py_ssize_t n, View *v) {
    Py_ssize_t b = 0, e = n;
    if (e > b && s[e - 1] == '\n') e--;
    if (e > b && s[e - 1] == '\r') e--;
    if (memchr(s, 0x1b, (size_t)e) != NULL) return VIEW_PYTHON;
    v->src = 0;
    if (!(e > b && s[b] == '{')) {
        for (int round = 0; round < 3; round++) {
            Py_ssize_t len = e - b;
            const unsigned char *at = s + b;
            if (len >= 1 && at[0] == '[') {
                Py_ssize_t a1, n1, a2, n2;
                Py_ssize_t got = kubectl_prefix(at, len, &a1, &n1, &a2, &n2);
                if (got) {
                    v->src = 1;
                    v->a1 = b + a1;
                    v->n1 = n1;
                    v->a2 = b + a2;
                    v->n2 = n2;
                    b += got;
                    continue;
                }
            }
            if (len >= 1 && is_digit(at[0])) {
                Py_ssize_t got = stamp_prefix(at, len);
                if (got) {
                    b += got;
                    continue;
                }
            }
            if (!v->src && len >= 1 && is_alnum(at[0]) &&
                memmem(at, (size_t)(len < 110 ? len : 110), "| ", 2) != NULL) {
                Py_ssize_t name;
                Py_ssize_t got = compose_prefix(at, len, &name);
                if (got) {
                    v->src = 2;
                    v->a1 = b;
                    v->n1 = name;
                    b += got;
                    continue;
                }
            }
            break;
        }
    }
    v->b = b;
    v->e = e;
    Py_ssize_t j = b;
    if (j < e && s[j] == ' ')
        while (j < e && is_ws(s[j])) j++;
    v->part = PART_LOG;
    if (j < e && s[j] == '{') {
        PyObject *found = NULL;
        if (!transcript_marker(s + b, e - b)) found = json_level(s + b, e - b);
        else if (!transcript_event(s + b, e - b, &found, &v->part)) found = NULL;
        v->level = found;
        return found != NULL ? VIEW_DONE : VIEW_DOCUMENT;
    }
    v->level = text_level(s + b, e - b);
    return VIEW_DONE;
}

/* A view's body (a new reference): the line itself when nothing was cut off, else a slice of
 * the same type, as in Python. */
static PyObject *view_body(PyObject *line, const unsigned char *s, Py_ssize_t n,
                           const View *v) {
    if (v->b == 0 && v->e == n) {
        Py_INCREF(line);
        return line;
    }
    return PyBytes_CheckExact(line)
               ? PyBytes_FromStringAndSize((const char *)s + v->b, v->e - v->b)
               : PyByteArray_FromStringAndSize((const char *)s + v->b, v->e - v->b);
}

/* The source a view found (a new reference): view_native's, "" for none. */
static PyObject *view_source(const unsigned char *s, const View *v) {
    if (v->src == 2) return PyUnicode_DecodeASCII((const char *)s + v->a1, v->n1, "replace");
    if (v->src == 1) {
        char name[4 + 253 + 1 + 63];
        memcpy(name, "pod/", 4);
        memcpy(name + 4, s + v->a1, (size_t)v->n1);
        name[4 + v->n1] = '/';
        memcpy(name + 5 + v->n1, s + v->a2, (size_t)v->n2);
        return PyUnicode_DecodeASCII(name, 5 + v->n1 + v->n2, "replace");
    }
    Py_INCREF(LV_NONE);
    return LV_NONE;
}

/* A level's rank from the line model (ps->ranks), or -1 for no level ("" keeps every
 * pattern) and -2 for one this code does not know. */
static long level_rank(const Pass *ps, PyObject *level) {
    PyObject *levels[6] = {LV_TRACE, LV_DEBUG, LV_INFO, LV_WARN, LV_ERROR, LV_FATAL};
    for (int i = 0; i < 6; i++)
        if (level == levels[i]) return ps->ranks[i];
    return level == LV_NONE ? -1 : -2;
}

/* Whether judge_lines would drop this candidate line whatever its patterns (idxs) confirm:
 * it needs viewing, and it is the agent's speech or states a level below every pattern's
 * min_level. 0 when unsure (the line then takes the usual way). */
static int judged_away(const Pass *ps, const View *v, const long long *idxs, int k) {
    if (v->part == PART_SPEECH) return 1;
    long rank = level_rank(ps, v->level);
    if (rank < 0) return 0;  /* no level stated ("" keeps every pattern), or not known */
    for (int i = 0; i < k; i++) {
        if (idxs[i] < 0 || idxs[i] >= ps->npats) return 0;  /* the usual way reports it */
        if (rank >= ps->min_rank[idxs[i]]) return 0;
    }
    return 1;
}

/* The row judge_lines makes of a confirmed line (li, start, line, matched, body, source,
 * level), from pass 1's view of it (viewed 1: v; 0: it needs none); Py_None when the line's
 * level leaves none of its patterns (judge_lines drops it); NULL without an error where
 * judge_lines must decide (a level this code does not rank), NULL with one on failure. */
static PyObject *judged_row(const Pass *ps, Py_ssize_t line_idx, Py_ssize_t ls,
                            PyObject *line, PyObject *matched, int viewed, const View *v) {
    PyObject *kept = matched, *body = line, *source = LV_NONE, *level = LV_NONE, *row = NULL;
    Py_INCREF(kept);
    Py_INCREF(body);
    Py_INCREF(source);
    if (viewed) {
        long rank = level_rank(ps, v->level);
        if (rank == -2) goto done;  /* (row NULL, no error) */
        level = v->level;
        if (rank >= 0) {
            Py_DECREF(kept);
            kept = PyList_New(0);
            if (kept == NULL) goto done;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(matched); i++) {
                PyObject *pi = PyList_GET_ITEM(matched, i);
                Py_ssize_t idx = PyLong_AsSsize_t(pi);
                if (idx < 0 || idx >= ps->npats) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_IndexError, "pattern index out of range");
                    goto done;
                }
                if (rank >= ps->min_rank[idx] && PyList_Append(kept, pi) < 0) goto done;
            }
            if (PyList_GET_SIZE(kept) == 0) {
                row = Py_None;
                Py_INCREF(row);
                goto done;
            }
        }
        const unsigned char *s = (const unsigned char *)ps->data + ls;
        Py_DECREF(body);
        body = view_body(line, s, PyBytes_Check(line) ? PyBytes_GET_SIZE(line)
                                                        : PyByteArray_GET_SIZE(line), v);
        if (body == NULL) goto done;
        Py_DECREF(source);
        source = view_source(s, v);
        if (source == NULL) goto done;
    }
    PyObject *li = PyLong_FromSsize_t(line_idx), *start = PyLong_FromSsize_t(ls);
    if (li != NULL && start != NULL)
        row = PyTuple_Pack(7, li, start, line, kept, body, source, level);
    Py_XDECREF(li);
    Py_XDECREF(start);
done:
    Py_XDECREF(kept);
    Py_XDECREF(body);
    Py_XDECREF(source);
    return row;
}

static PyObject *view_line(PyObject *self, PyObject *args) {
    PyObject *line, *document = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:view_line", &line, &document)) return NULL;
    PyObject *got = view_native(line, document);
    if (got == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return got;
}


/* A pattern index from Python, checked against the catalog's size; -1 with an error set. */
static Py_ssize_t pattern_index(PyObject *obj, Py_ssize_t npats) {
    Py_ssize_t i = PyLong_AsSsize_t(obj);
    if (i >= 0 && i < npats) return i;
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "pattern index out of range");
    return -1;
}

/* judge_lines(found, view_fields, speech, rank, min_rank, document=None) -> (judged, bodies):
 * the first loop of Engine._hits; lines are viewed by view_native (with document), else by
 * view_fields. */
static PyObject *judge_lines(PyObject *self, PyObject *args) {
    PyObject *found, *view_fields, *speech, *rank, *min_rank, *document = Py_None;
    if (!PyArg_ParseTuple(args, "O!OOO!O!|O:judge_lines", &PyList_Type, &found, &view_fields,
                          &speech, &PyDict_Type, &rank, &PyList_Type, &min_rank, &document))
        return NULL;
    PyObject *judged = PyList_New(0), *bodies = PyList_New(0), *empty = PyUnicode_New(0, 127);
    if (judged == NULL || bodies == NULL || empty == NULL) goto fail;
    Py_ssize_t npats = PyList_GET_SIZE(min_rank);
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(found); k++) {
        PyObject *f = PyList_GET_ITEM(found, k);
        if (PyTuple_Check(f) && PyTuple_GET_SIZE(f) == 7) {  /* judged in pass 1 already */
            if (PyList_Append(judged, f) < 0 || PyList_Append(bodies, PyTuple_GET_ITEM(f, 4)) < 0)
                goto fail;
            continue;
        }
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 4) {
            PyErr_SetString(PyExc_TypeError, "found rows must be 4-tuples or judged 7-tuples");
            goto fail;
        }
        PyObject *li = PyTuple_GET_ITEM(f, 0), *start = PyTuple_GET_ITEM(f, 1);
        PyObject *line = PyTuple_GET_ITEM(f, 2), *matched = PyTuple_GET_ITEM(f, 3);
        const unsigned char *data;
        Py_ssize_t len;
        if (line_data(line, &data, &len) < 0) goto fail;
        PyObject *row;
        if (!needs_view(data, len)) {  /* nothing about the line could change the verdict */
            row = PyTuple_Pack(7, li, start, line, matched, line, empty, empty);
            if (row == NULL || PyList_Append(bodies, line) < 0) {
                Py_XDECREF(row);
                goto fail;
            }
        } else {
            PyObject *v = view_native(line, document);  /* the Python original when it cannot tell */
            if (v == NULL && !PyErr_Occurred()) v = PyObject_CallOneArg(view_fields, line);
            if (v == NULL) goto fail;
            if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 4) {
                Py_DECREF(v);
                PyErr_SetString(PyExc_TypeError, "view_fields must return a 4-tuple");
                goto fail;
            }
            PyObject *body = PyTuple_GET_ITEM(v, 0), *level = PyTuple_GET_ITEM(v, 1);
            PyObject *src = PyTuple_GET_ITEM(v, 2), *part = PyTuple_GET_ITEM(v, 3);
            int is_speech = PyObject_RichCompareBool(part, speech, Py_EQ);
            if (is_speech < 0) {
                Py_DECREF(v);
                goto fail;
            }
            if (is_speech) {  /* the agent's own words or code (a transcript) */
                Py_DECREF(v);
                continue;
            }
            PyObject *kept = matched;
            Py_INCREF(kept);
            int truthy = PyObject_IsTrue(level);
            if (truthy < 0) {
                Py_DECREF(kept);
                Py_DECREF(v);
                goto fail;
            }
            if (truthy) {
                PyObject *r = PyDict_GetItemWithError(rank, level);
                if (r == NULL) {
                    if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, level);
                    Py_DECREF(kept);
                    Py_DECREF(v);
                    goto fail;
                }
                long lvl = PyLong_AsLong(r);
                Py_DECREF(kept);
                kept = PyList_New(0);
                if (kept == NULL || (lvl == -1 && PyErr_Occurred())) {
                    Py_XDECREF(kept);
                    Py_DECREF(v);
                    goto fail;
                }
                for (Py_ssize_t i = 0; i < PyList_GET_SIZE(matched); i++) {
                    PyObject *pi = PyList_GET_ITEM(matched, i);
                    Py_ssize_t idx = pattern_index(pi, npats);
                    if (idx < 0) {
                        Py_DECREF(kept);
                        Py_DECREF(v);
                        goto fail;
                    }
                    long need = PyLong_AsLong(PyList_GET_ITEM(min_rank, idx));
                    if (need == -1 && PyErr_Occurred()) {
                        Py_DECREF(kept);
                        Py_DECREF(v);
                        goto fail;
                    }
                    if (lvl >= need && PyList_Append(kept, pi) < 0) {
                        Py_DECREF(kept);
                        Py_DECREF(v);
                        goto fail;
                    }
                }
                if (PyList_GET_SIZE(kept) == 0) {
                    Py_DECREF(kept);
                    Py_DECREF(v);
                    continue;
                }
            }
            row = PyTuple_Pack(7, li, start, line, kept, body, src, level);
            int bad = row == NULL || PyList_Append(bodies, body) < 0;
            Py_DECREF(kept);
            Py_DECREF(v);
            if (bad) {
                Py_XDECREF(row);
                goto fail;
            }
        }
        int bad = PyList_Append(judged, row) < 0;
        Py_DECREF(row);
        if (bad) goto fail;
    }
    Py_DECREF(empty);
    return Py_BuildValue("(NN)", judged, bodies);
fail:
    Py_XDECREF(judged);
    Py_XDECREF(bodies);
    Py_XDECREF(empty);
    return NULL;
}

/* build_hits(judged, sup_cands, generic, single, window, windowed, keep, resolve,
 *            parse_ts, lookback) -> hits: the second loop of Engine._hits. */
static PyObject *build_hits(PyObject *self, PyObject *args) {
    PyObject *judged, *sups, *generic, *single, *window, *resolve, *parse_ts, *lookback;
    int windowed;
    Py_ssize_t keep;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!pnOOO:build_hits", &PyList_Type, &judged,
                          &PyList_Type, &sups, &PyList_Type, &generic, &PyList_Type, &single,
                          &PyList_Type, &window, &windowed, &keep, &resolve, &parse_ts,
                          &lookback))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(judged), npats = PyList_GET_SIZE(single);
    if (PyList_GET_SIZE(sups) != count || PyList_GET_SIZE(generic) != npats ||
        PyList_GET_SIZE(window) != npats) {
        PyErr_SetString(PyExc_ValueError, "build_hits: lists of different lengths");
        return NULL;
    }
    PyObject *hits = PyList_New(0);
    if (hits == NULL) return NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *j = PyList_GET_ITEM(judged, k), *ks = PyList_GET_ITEM(sups, k);
        PyObject *li = PyTuple_GET_ITEM(j, 0), *start = PyTuple_GET_ITEM(j, 1);
        PyObject *line = PyTuple_GET_ITEM(j, 2), *matched = PyTuple_GET_ITEM(j, 3);
        PyObject *body = PyTuple_GET_ITEM(j, 4), *src = PyTuple_GET_ITEM(j, 5);
        PyObject *level = PyTuple_GET_ITEM(j, 6);
        PyObject *best = NULL, *own = NULL, *borrowed = NULL, *cut = NULL, *hit = NULL;
        Py_ssize_t first = pattern_index(PyList_GET_ITEM(matched, 0), npats);
        if (first < 0) goto fail;
        int gen = PyObject_IsTrue(PyList_GET_ITEM(generic, first));
        int has_ks = PyObject_IsTrue(ks);
        if (gen < 0 || has_ks < 0) goto fail;
        if (has_ks || PyList_GET_SIZE(matched) > 1 || gen) {
            best = PyObject_CallFunctionObjArgs(resolve, body, matched, ks, NULL);
            if (best == NULL) goto fail;
            int any = PyObject_IsTrue(best);
            if (any < 0) goto fail;
            if (!any) {
                Py_DECREF(best);
                continue;
            }
            if (!PyTuple_Check(best)) {
                PyErr_SetString(PyExc_TypeError, "resolve must return a tuple");
                goto fail;
            }
        } else {
            best = PyList_GET_ITEM(single, first);
            Py_INCREF(best);
        }
        const unsigned char *data;
        Py_ssize_t len;
        if (line_data(line, &data, &len) < 0) goto fail;
        double ts;
        int got = iso_time(data, len, &ts);
        if (got == 1) {
            own = PyFloat_FromDouble(ts);
        } else if (got == 2) {
            own = Py_None;
            Py_INCREF(own);
        } else {
            own = PyObject_CallOneArg(parse_ts, line);  /* klog and epoch forms */
        }
        if (own == NULL) goto fail;
        borrowed = own;
        Py_INCREF(borrowed);
        if (own == Py_None && windowed) {
            int any = 0;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(best) && !any; i++) {
                Py_ssize_t bi = pattern_index(PyTuple_GET_ITEM(best, i), npats);
                if (bi < 0) goto fail;
                any = PyList_GET_ITEM(window, bi) != Py_None;
            }
            if (any) {
                Py_DECREF(borrowed);
                borrowed = PyObject_CallOneArg(lookback, start);
                if (borrowed == NULL) goto fail;
            }
        }
        if (len > keep) {
            cut = PySequence_GetSlice(line, 0, keep);
            if (cut == NULL) goto fail;
        } else {
            cut = line;
            Py_INCREF(cut);
        }
        hit = PyTuple_Pack(7, li, cut, best, own, borrowed, src, level);
        if (hit == NULL || PyList_Append(hits, hit) < 0) goto fail;
        Py_DECREF(hit);
        Py_DECREF(cut);
        Py_DECREF(best);
        Py_DECREF(own);
        Py_DECREF(borrowed);
        continue;
    fail:
        Py_XDECREF(hit);
        Py_XDECREF(cut);
        Py_XDECREF(best);
        Py_XDECREF(own);
        Py_XDECREF(borrowed);
        Py_DECREF(hits);
        return NULL;
    }
    return hits;
}

/* ---------------------------------------------------------------------------------------- */
/* Hits to alerts (Engine._alerts)                                                            */

static int less_equal(PyObject *a, PyObject *b) { return PyObject_RichCompareBool(a, b, Py_LE); }

/* filter_hits(hits, window, ts_override, not_before, seen_at, lo_t, skew, start_of, skew_s)
 * -> (rows, raws): the first loop of Engine._alerts. */
static PyObject *filter_hits(PyObject *self, PyObject *args) {
    PyObject *hits, *window, *ts_override, *not_before, *seen_at, *lo_t, *skew, *start_of,
        *skew_s;
    if (!PyArg_ParseTuple(args, "O!O!OOOOOOO:filter_hits", &PyList_Type, &hits, &PyList_Type,
                          &window, &ts_override, &not_before, &seen_at, &lo_t, &skew, &start_of,
                          &skew_s))
        return NULL;
    Py_ssize_t npats = PyList_GET_SIZE(window);
    PyObject *rows = PyList_New(0), *raws = PyList_New(0);
    if (rows == NULL || raws == NULL) goto fail;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(hits); k++) {
        PyObject *h = PyList_GET_ITEM(hits, k);
        if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != 7) {
            PyErr_SetString(PyExc_TypeError, "hits must be 7-tuples");
            goto fail;
        }
        PyObject *idx = PyTuple_GET_ITEM(h, 0), *raw = PyTuple_GET_ITEM(h, 1);
        PyObject *pidxs = PyTuple_GET_ITEM(h, 2), *own = PyTuple_GET_ITEM(h, 3);
        PyObject *borrowed = PyTuple_GET_ITEM(h, 4), *src = PyTuple_GET_ITEM(h, 5);
        PyObject *level = PyTuple_GET_ITEM(h, 6);
        if (!PyTuple_Check(pidxs) || PyTuple_GET_SIZE(pidxs) == 0) {
            PyErr_SetString(PyExc_TypeError, "a hit's patterns must be a non-empty tuple");
            goto fail;
        }
        if (ts_override != Py_None) own = borrowed = ts_override;
        if (not_before != Py_None && own != Py_None) {
            int early = PyObject_RichCompareBool(own, not_before, Py_LT);
            if (early < 0) goto fail;
            if (early) continue;
        }
        Py_ssize_t n = PyTuple_GET_SIZE(pidxs);
        int any_window = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t pi = pattern_index(PyTuple_GET_ITEM(pidxs, i), npats);
            if (pi < 0) goto fail;
            any_window |= PyList_GET_ITEM(window, pi) != Py_None;
        }
        PyObject *kept = pidxs;
        Py_INCREF(kept);
        if (any_window) {  /* some pattern counts only in its window after the start */
            PyObject *when = borrowed != Py_None ? borrowed : seen_at;
            PyObject *lo = lo_t, *hi = skew, *own_start = NULL;
            Py_INCREF(lo);
            Py_INCREF(hi);
            if (start_of != Py_None) {
                own_start = PyObject_CallFunctionObjArgs(start_of, src, when, NULL);
                if (own_start == NULL) goto fail_row;
                if (own_start != Py_None) {
                    Py_DECREF(lo);
                    Py_DECREF(hi);
                    lo = PyNumber_Subtract(own_start, skew_s);
                    hi = own_start;
                    Py_INCREF(hi);
                    if (lo == NULL) goto fail_row;
                }
            }
            Py_DECREF(kept);
            kept = PyList_New(0);
            if (kept == NULL) goto fail_row;
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *pi = PyTuple_GET_ITEM(pidxs, i);
                PyObject *w = PyList_GET_ITEM(window, PyLong_AsSsize_t(pi));
                int in = 1;
                if (w != Py_None) {
                    PyObject *top = PyNumber_Add(hi, w);
                    if (top == NULL) goto fail_row;
                    in = less_equal(lo, when);
                    if (in == 1) in = less_equal(when, top);
                    Py_DECREF(top);
                    if (in < 0) goto fail_row;
                }
                if (in && PyList_Append(kept, pi) < 0) goto fail_row;
            }
            Py_XDECREF(own_start);
            Py_DECREF(lo);
            Py_DECREF(hi);
            if (0) {
            fail_row:
                Py_XDECREF(own_start);
                Py_XDECREF(lo);
                Py_XDECREF(hi);
                Py_XDECREF(kept);
                goto fail;
            }
            if (PyList_GET_SIZE(kept) == 0) {
                Py_DECREF(kept);
                continue;
            }
        }
        PyObject *row = PyTuple_Pack(6, idx, raw, own, src, level, kept);
        Py_DECREF(kept);
        if (row == NULL) goto fail;
        int bad = PyList_Append(rows, row) < 0 || PyList_Append(raws, raw) < 0;
        Py_DECREF(row);
        if (bad) goto fail;
    }
    return Py_BuildValue("(NN)", rows, raws);
fail:
    Py_XDECREF(rows);
    Py_XDECREF(raws);
    return NULL;
}

/* make_alerts(rows, texts, alert_type, patterns, source, first, labels) -> alerts: the last
 * loop of Engine._alerts; patterns[i] is (code, id, priority, severity, pattern). */
static PyObject *make_alerts(PyObject *self, PyObject *args) {
    PyObject *rows, *texts, *patterns, *source, *labels;
    PyTypeObject *type;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OnO:make_alerts", &PyList_Type, &rows, &PyList_Type,
                          &texts, &PyType_Type, &type, &PyList_Type, &patterns, &source, &first,
                          &labels))
        return NULL;
    if (!PyType_IsSubtype(type, &PyTuple_Type) || PyList_GET_SIZE(rows) != PyList_GET_SIZE(texts)) {
        PyErr_SetString(PyExc_TypeError, "make_alerts: a tuple type and as many texts as rows");
        return NULL;
    }
    Py_ssize_t npats = PyList_GET_SIZE(patterns);
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(rows); k++) {
        PyObject *r = PyList_GET_ITEM(rows, k), *text = PyList_GET_ITEM(texts, k);
        Py_ssize_t idx = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 0));
        if (idx == -1 && PyErr_Occurred()) goto fail;
        PyObject *own = PyTuple_GET_ITEM(r, 2), *src = PyTuple_GET_ITEM(r, 3);
        PyObject *level = PyTuple_GET_ITEM(r, 4), *pidxs = PyTuple_GET_ITEM(r, 5);
        PyObject *line_no = PyLong_FromSsize_t(first + idx);
        if (line_no == NULL) goto fail;
        PyObject *seq = PySequence_Fast(pidxs, "patterns must be a sequence");
        if (seq == NULL) {
            Py_DECREF(line_no);
            goto fail;
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            Py_ssize_t pi = pattern_index(PySequence_Fast_GET_ITEM(seq, i), npats);
            PyObject *info = pi >= 0 ? PyList_GET_ITEM(patterns, pi) : NULL;
            PyObject *a = NULL;
            if (info != NULL && PyTuple_Check(info) && PyTuple_GET_SIZE(info) == 5)
                a = type->tp_alloc(type, 12);
            else if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "pattern fields must be 5-tuples");
            if (a == NULL) {
                Py_DECREF(seq);
                Py_DECREF(line_no);
                goto fail;
            }
            PyObject *items[12] = {
                PyTuple_GET_ITEM(info, 0), PyTuple_GET_ITEM(info, 1), PyTuple_GET_ITEM(info, 2),
                PyTuple_GET_ITEM(info, 3), source, line_no, text, own, labels,
                PyTuple_GET_ITEM(info, 4), level, src};
            for (int f = 0; f < 12; f++) {
                Py_INCREF(items[f]);
                PyTuple_SET_ITEM(a, f, items[f]);
            }
            int bad = PyList_Append(out, a) < 0;
            Py_DECREF(a);
            if (bad) {
                Py_DECREF(seq);
                Py_DECREF(line_no);
                goto fail;
            }
        }
        Py_DECREF(seq);
        Py_DECREF(line_no);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* How many bytes s starts with that are printable ASCII or tabs: eight at a time while none
 * is below ' ' or above '~' (bit tricks on a 64-bit word: no byte carries into the next). */
static Py_ssize_t plain_ascii(const unsigned char *s, Py_ssize_t n) {
    const unsigned long long ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        unsigned long long x, low7;
        memcpy(&x, s + i, 8);
        low7 = x & ~highs;
        /* high bit set: >= 0x80; low7 + 1 reaches 0x80: 0x7f; low7 + 0x60 stays below 0x80:
         * under 0x20 */
        if ((x | (low7 + ones) | ~(low7 + 0x60 * ones)) & highs) break;
    }
    while (i < n && ((s[i] >= 0x20 && s[i] < 0x7f) || s[i] == '\t')) i++;
    return i;
}

/* line_texts(raws, most, text_of) -> texts: Engine._texts. A line of printable ASCII (tabs
 * allowed) is its own text, cut to `most` characters with an ellipsis; any other line is
 * text_of(raw) (Engine._text: decoding, controls). Each text is made on its own: the
 * lines are not joined, decoded and split again, three copies of every alert line in fresh
 * memory, which costs more than the decoding. */
static PyObject *line_texts(PyObject *self, PyObject *args) {
    PyObject *raws, *text_of;
    Py_ssize_t most;
    if (!PyArg_ParseTuple(args, "O!nO:line_texts", &PyList_Type, &raws, &most, &text_of))
        return NULL;
    if (most < 1) {
        PyErr_SetString(PyExc_ValueError, "line_texts: most must be positive");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(raws);
    PyObject *out = PyList_New(count);
    if (out == NULL) return NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *raw = PyList_GET_ITEM(raws, k), *text = NULL;
        const unsigned char *s = NULL;
        Py_ssize_t n = 0, i = 0;
        int plain = PyBytes_Check(raw) || PyByteArray_Check(raw);
        if (plain && line_data(raw, &s, &n) < 0) goto fail;
        i = plain_ascii(s, n);
        if (!plain || i < n) {
            text = PyObject_CallOneArg(text_of, raw);
        } else if (n <= most) {
            text = PyUnicode_New(n, 127);
            if (text != NULL) memcpy(PyUnicode_DATA(text), s, (size_t)n);
        } else {  /* cut: most - 1 characters and U+2026 */
            text = PyUnicode_New(most, 0x2026);
            if (text != NULL) {
                Py_UCS2 *w = PyUnicode_2BYTE_DATA(text);
                for (Py_ssize_t j = 0; j < most - 1; j++) w[j] = s[j];
                w[most - 1] = 0x2026;
            }
        }
        if (text == NULL) goto fail;
        PyList_SET_ITEM(out, k, text);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* alert_counts(alerts) -> (per_index, kinds) | NotImplemented: what the scan's summary counts
 * of its alerts, in one pass without a Python frame per alert. per_index: pattern.index ->
 * alerts, for the alerts with a pattern; kinds: (origin, source, level, severity) -> alerts
 * (services.ServiceTally). Both dicts in the order the keys first occur. NotImplemented for
 * anything but Alert-shaped tuples. */
enum { A_SEVERITY = 3, A_LEVEL = 10, A_ORIGIN = 11 };

static int bump(PyObject *dict, PyObject *key, Py_ssize_t n) {
    PyObject *had = PyDict_GetItemWithError(dict, key);
    if (had == NULL && PyErr_Occurred()) return -1;
    Py_ssize_t now = n;
    if (had != NULL) {
        Py_ssize_t before = PyLong_AsSsize_t(had);
        if (before == -1 && PyErr_Occurred()) return -1;
        now += before;
    }
    PyObject *v = PyLong_FromSsize_t(now);
    if (v == NULL) return -1;
    int bad = PyDict_SetItem(dict, key, v);
    Py_DECREF(v);
    return bad;
}

/* A key (pattern, or origin, source, level and severity) seen by alert_counts: its objects
 * and how many alerts had exactly these objects. */
#define COUNT_SLOTS 64
typedef struct {
    PyObject *key[4];
    Py_ssize_t n;
} CountSlot;

/* The slot holding key (compared by identity), a new one, or NULL when all are taken. */
static CountSlot *count_slot(CountSlot *slots, int *used, PyObject *const *key, int width) {
    for (int i = 0; i < *used; i++) {
        int same = 1;
        for (int f = 0; f < width; f++) same &= slots[i].key[f] == key[f];
        if (same) return &slots[i];
    }
    if (*used == COUNT_SLOTS) return NULL;
    CountSlot *slot = &slots[(*used)++];
    for (int f = 0; f < width; f++) slot->key[f] = key[f];
    slot->n = 0;
    return slot;
}

/* Adds a pattern's alerts to per_index under pattern.index (none for a falsy pattern). */
static int count_pattern(PyObject *per_index, PyObject *const *key, Py_ssize_t n) {
    PyObject *pattern = key[0];
    int truthy = PyObject_IsTrue(pattern);
    if (truthy <= 0) return truthy;
    PyObject *index = PyObject_GetAttrString(pattern, "index");
    int bad = index == NULL || bump(per_index, index, n) < 0;
    Py_XDECREF(index);
    return bad ? -1 : 0;
}

/* Adds a kind's alerts to kinds under (origin, source, level, severity). */
static int count_kind(PyObject *kinds, PyObject *const *kind, Py_ssize_t n) {
    PyObject *key = PyTuple_Pack(4, kind[0], kind[1], kind[2], kind[3]);
    int bad = key == NULL || bump(kinds, key, n) < 0;
    Py_XDECREF(key);
    return bad ? -1 : 0;
}

/* One alert's key into slots (key NULL: the end). When the slots are full, or at the end,
 * what they hold goes into dict by add, once; later keys are added there directly. */
static int count_key(CountSlot *slots, int *used, int *full, PyObject *const *key, int width,
                     PyObject *dict, int (*add)(PyObject *, PyObject *const *, Py_ssize_t)) {
    CountSlot *slot = key != NULL && !*full ? count_slot(slots, used, key, width) : NULL;
    if (slot != NULL) {
        slot->n++;
        return 0;
    }
    if (!*full) {
        for (int i = 0; i < *used; i++)
            if (add(dict, slots[i].key, slots[i].n) < 0) return -1;
        *full = 1;
    }
    return key != NULL ? add(dict, key, 1) : 0;
}

static PyObject *alert_counts(PyObject *self, PyObject *alerts) {
    if (!PyList_Check(alerts)) Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t count = PyList_GET_SIZE(alerts);
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *a = PyList_GET_ITEM(alerts, k);
        if (!PyTuple_Check(a) || PyTuple_GET_SIZE(a) != F_N) Py_RETURN_NOTIMPLEMENTED;
    }
    /* Alerts share a few dozen patterns and kinds, as the same objects: they are counted by
     * identity in slots, which go into the dicts by value at the end, in the order they were
     * first seen (the order their values first occur). When the slots run out, what they
     * hold goes into the dicts then, and the rest is counted there directly. */
    CountSlot pslots[COUNT_SLOTS], kslots[COUNT_SLOTS];
    int pused = 0, kused = 0, pfull = 0, kfull = 0;
    PyObject *per_index = PyDict_New(), *kinds = PyDict_New();
    if (per_index == NULL || kinds == NULL) goto fail;
    for (Py_ssize_t k = 0; k <= count; k++) {  /* k == count: the end */
        PyObject *a = k < count ? PyList_GET_ITEM(alerts, k) : NULL;
        PyObject *pattern = a ? PyTuple_GET_ITEM(a, F_PATTERN) : NULL;
        PyObject *kind[4] = {NULL, NULL, NULL, NULL};
        if (a != NULL) {
            kind[0] = PyTuple_GET_ITEM(a, A_ORIGIN);
            kind[1] = PyTuple_GET_ITEM(a, F_SOURCE);
            kind[2] = PyTuple_GET_ITEM(a, A_LEVEL);
            kind[3] = PyTuple_GET_ITEM(a, A_SEVERITY);
        }
        if (count_key(pslots, &pused, &pfull, a ? &pattern : NULL, 1, per_index,
                      count_pattern) < 0 ||
            count_key(kslots, &kused, &kfull, a ? kind : NULL, 4, kinds, count_kind) < 0)
            goto fail;
    }
    return Py_BuildValue("(NN)", per_index, kinds);
fail:
    Py_XDECREF(per_index);
    Py_XDECREF(kinds);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* ANSI escapes (healer.detect._match.ANSI)                                                   */

/* The length of the escape sequence at s[p] (an ESC) as _match.ANSI matches it there, or 0:
 *   \x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])
 * Each repeat's class is disjoint from what may follow it, so taking the most it can is the
 * only way it matches (no backtracking to try). */
static Py_ssize_t ansi_at(const unsigned char *s, Py_ssize_t p, Py_ssize_t n) {
    Py_ssize_t q = p + 1;
    if (q >= n) return 0;
    unsigned char c = s[q];
    if (c == '[') {
        q++;
        while (q < n && s[q] >= 0x30 && s[q] <= 0x3f) q++;
        while (q < n && s[q] >= 0x20 && s[q] <= 0x2f) q++;
        if (q < n && s[q] >= 0x40 && s[q] <= 0x7e) return q + 1 - p;
        return 0;
    }
    if (c == ']') {
        Py_ssize_t k = q + 1;
        while (k < n && s[k] != 0x07 && s[k] != 0x1b && s[k] != '\n') k++;
        if (k < n && s[k] == 0x07) return k + 1 - p;
        if (k + 1 < n && s[k] == 0x1b && s[k + 1] == '\\') return k + 2 - p;
        return 2;  /* ']' is in [@-Z\\-_] too */
    }
    if ((c >= '@' && c <= 'Z') || (c >= '\\' && c <= '_')) return 2;
    return 0;
}

/* _match.ANSI.sub(b"", s[0:n]) */
static PyObject *strip_escapes(const unsigned char *s, Py_ssize_t n) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t len = 0, p = 0;
    while (p < n) {
        const unsigned char *esc = memchr(s + p, 0x1b, (size_t)(n - p));
        Py_ssize_t e = esc ? esc - s : n;
        memcpy(w + len, s + p, (size_t)(e - p));
        len += e - p;
        if (e >= n) break;
        Py_ssize_t k = ansi_at(s, e, n);
        if (k == 0) {  /* not a sequence: the ESC stays */
            w[len++] = 0x1b;
            p = e + 1;
        } else {
            p = e + k;
        }
    }
    if (len != n && _PyBytes_Resize(&out, len) < 0) return NULL;
    return out;
}

/* ---------------------------------------------------------------------------------------- */
/* Matches over lines joined by newlines                                                      */

/* The line of each of col's matches in joined (lines joined by newlines; col's offsets are
 * inside their line, as a Collector shifted by -1 keeps them): sorted first, then walked
 * once, counting the newlines between one match and the next. fn(line, idx, ctx) per match;
 * -1 from it stops the walk. */
static int walk_lines(Collector *col, PyObject *joined, Py_ssize_t nlines,
                      int (*fn)(Py_ssize_t, long long, void *), void *ctx) {
    Py_buffer view;
    if (PyObject_GetBuffer(joined, &view, PyBUF_SIMPLE) < 0) return -1;
    int rc = sort_by_offset(col);
    Py_ssize_t line = 0, at = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < col->len; i++) {
        Py_ssize_t off = (Py_ssize_t)col->items[i].off;
        if (off < at || off >= view.len) {
            PyErr_SetString(PyExc_ValueError, "a match outside the joined lines");
            rc = -1;
            break;
        }
        line += count_nl(view.buf, at, off);
        at = off;
        if (line >= nlines) {
            PyErr_SetString(PyExc_ValueError, "a match past the last line");
            rc = -1;
            break;
        }
        rc = fn(line, col->items[i].idx, ctx);
    }
    PyBuffer_Release(&view);
    return rc;
}

typedef struct {
    PyObject *out, *always;
    Py_ssize_t line;  /* the line whose set is being gathered, or -1 */
    PyObject *set;
} SetsWalk;

static int sets_flush(SetsWalk *w) {
    if (w->set == NULL) return 0;
    PyObject *list = PySequence_List(w->set);
    Py_CLEAR(w->set);
    if (list == NULL || PyList_Sort(list) < 0) {
        Py_XDECREF(list);
        return -1;
    }
    PyList_SetItem(w->out, w->line, list);  /* steals list, drops the shared always */
    return 0;
}

static int sets_add(Py_ssize_t line, long long idx, void *ctx) {
    SetsWalk *w = ctx;
    if (line != w->line) {
        if (sets_flush(w) < 0) return -1;
        w->line = line;
        w->set = PySet_New(w->always);
        if (w->set == NULL) return -1;
    }
    PyObject *k = PyLong_FromLongLong(idx);
    int rc = k != NULL ? PySet_Add(w->set, k) : -1;
    Py_XDECREF(k);
    return rc;
}

/* line_sets(collector, joined, nlines, always) -> a list of nlines: always (the same object)
 * for a line without matches, else sorted(its matches' indexes ∪ always).
 * _match.Suppressor.candidates. */
static PyObject *line_sets(PyObject *self, PyObject *args) {
    PyObject *col, *joined, *always;
    Py_ssize_t nlines;
    if (!PyArg_ParseTuple(args, "O!OnO!:line_sets", &CollectorType, &col, &joined, &nlines,
                          &PyList_Type, &always))
        return NULL;
    if (nlines < 0) {
        PyErr_SetString(PyExc_ValueError, "line_sets: nlines < 0");
        return NULL;
    }
    SetsWalk w = {PyList_New(nlines), always, -1, NULL};
    if (w.out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < nlines; i++) {
        Py_INCREF(always);
        PyList_SET_ITEM(w.out, i, always);
    }
    if (walk_lines((Collector *)col, joined, nlines, sets_add, &w) < 0 || sets_flush(&w) < 0) {
        Py_XDECREF(w.set);
        Py_DECREF(w.out);
        return NULL;
    }
    return w.out;
}

typedef struct {
    Collector *dest;
    Py_ssize_t *starts;
    long long plus;
} StartsWalk;

static int starts_add(Py_ssize_t line, long long idx, void *ctx) {
    StartsWalk *w = ctx;
    return collector_push(w->dest, w->starts[line], idx + w->plus);
}

/* lines_at(collector, joined, starts, plus, dest): each of collector's matches into dest as
 * (starts[its line], index + plus). Engine._clean_candidates: the candidates of ANSI lines'
 * cleaned text, at their line's start in the block. */
static PyObject *lines_at(PyObject *self, PyObject *args) {
    PyObject *col, *joined, *starts, *dest;
    long long plus;
    if (!PyArg_ParseTuple(args, "O!OO!LO!:lines_at", &CollectorType, &col, &joined,
                          &PyList_Type, &starts, &plus, &CollectorType, &dest))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(starts);
    StartsWalk w = {(Collector *)dest, PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1)),
                    plus};
    if (w.starts == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        w.starts[i] = PyLong_AsSsize_t(PyList_GET_ITEM(starts, i));
        if (w.starts[i] == -1 && PyErr_Occurred()) {
            PyMem_Free(w.starts);
            return NULL;
        }
    }
    int rc = walk_lines((Collector *)col, joined, n, starts_add, &w);
    PyMem_Free(w.starts);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* tail_heads(buf, lo, hi, n, head) -> the heads (first head bytes, then without ANSI escapes)
 * of the last n lines of buf[lo:hi] (a final newline ends the last line, it starts none):
 * engine._tail_heads before it adds the older heads. */
static PyObject *tail_heads(PyObject *self, PyObject *args) {
    PyObject *buf;
    Py_ssize_t lo, hi, n, head;
    if (!PyArg_ParseTuple(args, "Onnnn:tail_heads", &buf, &lo, &hi, &n, &head)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL;
    if (lo < 0 || hi < lo || hi > view.len || n < 0 || head < 0) {
        PyErr_SetString(PyExc_ValueError, "tail_heads: bad bounds");
        goto done;
    }
    const char *s = view.buf;
    Py_ssize_t end = hi > lo && s[hi - 1] == '\n' ? hi - 1 : hi;
    Py_ssize_t first = end, at = end, k = 0;
    while (k < n && at > lo) {
        first = rfind_nl(s, lo, at) + 1;
        if (first == 0) first = lo;
        k++;
        if (first == lo) break;
        at = first - 1;
    }
    out = PyList_New(0);
    if (out == NULL || k == 0) goto done;
    for (Py_ssize_t p = first;;) {  /* the lines of buf[first:end], as split() gives them */
        Py_ssize_t e = find_nl(s, p, end);
        if (e < 0) e = end;
        Py_ssize_t len = e - p < head ? e - p : head;
        const unsigned char *h = (const unsigned char *)s + p;
        PyObject *item = memchr(h, 0x1b, (size_t)len) ? strip_escapes(h, len)
                                                      : PyBytes_FromStringAndSize((const char *)h, len);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(item);
        if (e >= end) break;
        p = e + 1;
    }
done:
    PyBuffer_Release(&view);
    return out;
}

/* first_prefixed_lines(buf, pods, composes) -> (pod ends, compose ends): for each kubectl
 * prefix in pods ("[pod/NAME/CONTAINER] ", bytes) and each compose name in composes, where
 * the prefix of the first line of buf that starts with it ends (a compose name must be
 * followed there by up to 40 spaces and "| "), or -1: SourceStarts.first_of for many sources
 * in one pass over the lines, up to the last one found (the GIL let go meanwhile). */
static PyObject *first_prefixed_lines(PyObject *self, PyObject *args) {
    PyObject *buf, *pods, *composes;
    if (!PyArg_ParseTuple(args, "OO!O!:first_prefixed_lines", &buf, &PyList_Type, &pods,
                          &PyList_Type, &composes))
        return NULL;
    Py_ssize_t np = PyList_GET_SIZE(pods), n = np + PyList_GET_SIZE(composes);
    const char **need = PyMem_Malloc(sizeof(char *) * (size_t)(n ? n : 1));
    Py_ssize_t *len = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    Py_ssize_t *found = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    PyObject *out = NULL;
    Py_buffer view = {0};
    if (need == NULL || len == NULL || found == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {  /* (the lists are not touched without the GIL) */
        PyObject *item = i < np ? PyList_GET_ITEM(pods, i) : PyList_GET_ITEM(composes, i - np);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) < 2) {
            PyErr_SetString(PyExc_TypeError, "prefixes must be bytes of 2 or more");
            goto done;
        }
        need[i] = PyBytes_AS_STRING(item);
        len[i] = PyBytes_GET_SIZE(item);
        found[i] = -1;
    }
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
    const char *s = view.buf;
    Py_ssize_t size = view.len, pos = 0, left = n;
    while (left && pos < size) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t k = len[i], end = pos + k;
            /* the first byte, then the last but one (a kubectl prefix's "]": names differ in
             * length more often than in their first bytes), then all of it */
            if (found[i] >= 0 || end > size || s[pos] != need[i][0] ||
                s[end - 2] != need[i][k - 2] || memcmp(s + pos, need[i], (size_t)k) != 0)
                continue;
            if (i >= np) {  /* " {0,40}\\| " */
                Py_ssize_t sp = 0;
                while (sp < 40 && end + sp < size && s[end + sp] == ' ') sp++;
                if (end + sp + 1 >= size || s[end + sp] != '|' || s[end + sp + 1] != ' ')
                    continue;
                end += sp + 2;
            }
            found[i] = end;
            left--;
        }
        const char *nl = memchr(s + pos, '\n', (size_t)(size - pos));
        if (nl == NULL) break;
        pos = nl - s + 1;
    }
    Py_END_ALLOW_THREADS
    PyObject *a = PyList_New(np), *b = PyList_New(n - np);
    if (a == NULL || b == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromSsize_t(found[i]);
        if (v == NULL) {
            Py_DECREF(a);
            Py_DECREF(b);
            goto done;
        }
        if (i < np) PyList_SET_ITEM(a, i, v);
        else PyList_SET_ITEM(b, i - np, v);
    }
    out = Py_BuildValue("(NN)", a, b);
done:
    if (view.buf != NULL) PyBuffer_Release(&view);
    PyMem_Free(need);
    PyMem_Free(len);
    PyMem_Free(found);
    return out;
}

/* _match.ansi_lines(buf, lo, hi): the lines of buf[lo:hi] holding ESC, as (start, end, text
 * without escapes). */
static PyObject *ansi_lines(PyObject *self, PyObject *args) {
    PyObject *buf;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "Onn:ansi_lines", &buf, &lo, &hi)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *s = view.buf;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto done;
    if (lo < 0) lo = 0;
    if (hi > view.len) hi = view.len;
    Py_ssize_t p = lo;
    while (p < hi) {
        const unsigned char *esc = memchr(s + p, 0x1b, (size_t)(hi - p));
        if (esc == NULL) break;
        Py_ssize_t e = esc - s;
        const unsigned char *nl = e > lo ? memrchr(s + lo, '\n', (size_t)(e - lo)) : NULL;
        Py_ssize_t ls = nl ? nl - s + 1 : lo;
        const unsigned char *end = memchr(s + e, '\n', (size_t)(hi - e));
        Py_ssize_t le = end ? end - s : hi;
        PyObject *text = strip_escapes(s + ls, le - ls);
        PyObject *row = text ? Py_BuildValue("(nnN)", ls, le, text) : NULL;
        if (row == NULL || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(row);
        p = le;
    }
done:
    PyBuffer_Release(&view);
    return out;
}

/* ---------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"parse_iso", parse_iso, METH_O,
     "parse_iso(line) -> float | None | False: the line's RFC 3339 time (False: none)."},
    {"json_lines", json_lines, METH_VARARGS,
     "json_lines(alerts, fragments, fallback, as_bytes=False) -> str (or ASCII bytes): the "
     "alerts as JSON Lines."},
    {"confirm_lines", confirm_lines, METH_VARARGS,
     "confirm_lines(buf, lo, hi, candidates, first, cleaned, confirm, trusted) -> "
     "(newlines, found): Engine.scan_block's pass 1 (candidates: a sorted list of "
     "(offset, index) pairs, or a Collector; cleaned: the text of each line holding ESC, "
     "by its start)."},
    {"view_line", view_line, METH_VARARGS,
     "view_line(line, document=None) -> (body, level, source, part) | None: "
     "lines.view_fields, JSON documents read by document(body, source) (None: ask "
     "view_fields)."},
    {"judge_lines", judge_lines, METH_VARARGS,
     "judge_lines(found, view_fields, speech, rank, min_rank, document=None) -> "
     "(judged, bodies)."},
    {"build_hits", build_hits, METH_VARARGS,
     "build_hits(judged, sup_cands, generic, single, window, windowed, keep, resolve, "
     "parse_ts, lookback) -> hits."},
    {"filter_hits", filter_hits, METH_VARARGS,
     "filter_hits(hits, window, ts_override, not_before, seen_at, lo_t, skew, start_of, "
     "skew_s) -> (rows, raws)."},
    {"ansi_lines", ansi_lines, METH_VARARGS,
     "ansi_lines(buf, lo, hi) -> [(start, end, text)]: _match.ansi_lines."},
    {"make_alerts", make_alerts, METH_VARARGS,
     "make_alerts(rows, texts, alert_type, patterns, source, first, labels) -> alerts."},
    {"line_texts", line_texts, METH_VARARGS,
     "line_texts(raws, most, text_of) -> texts: Engine._texts."},
    {"line_sets", line_sets, METH_VARARGS,
     "line_sets(collector, joined, nlines, always) -> per line: always, or the sorted union "
     "of its matches' indexes and always."},
    {"lines_at", lines_at, METH_VARARGS,
     "lines_at(collector, joined, starts, plus, dest): each match into dest as "
     "(starts[its line], index + plus)."},
    {"first_prefixed_lines", first_prefixed_lines, METH_VARARGS,
     "first_prefixed_lines(buf, pods, composes) -> where the first line starting with each "
     "kubectl prefix / compose name has its prefix end, or -1."},
    {"tail_heads", tail_heads, METH_VARARGS,
     "tail_heads(buf, lo, hi, n, head) -> the heads of the last n lines of buf[lo:hi]."},
    {"libhs_version", libhs_version, METH_NOARGS,
     "libhs_version() -> the system libhs's version, or None when it is not there."},
    {"libhs_compile", libhs_compile, METH_VARARGS,
     "libhs_compile(expressions, flags, ids) -> HsDatabase (block mode, portable target)."},
    {"libhs_load", libhs_load_db, METH_O, "libhs_load(blob) -> HsDatabase from dump()."},
    {"alert_counts", alert_counts, METH_O,
     "alert_counts(alerts) -> (per_index, kinds) | NotImplemented: the summary's counts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Native fast paths of healer.detect.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&LV_TRACE, "trace"}, {&LV_DEBUG, "debug"}, {&LV_INFO, "info"}, {&LV_WARN, "warn"},
        {&LV_ERROR, "error"}, {&LV_FATAL, "fatal"}, {&LV_NONE, ""}, {&PART_LOG, "log"},
        {&PART_SPEECH, "speech"}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        if (*names[k].slot == NULL && (*names[k].slot = PyUnicode_InternFromString(
                                           names[k].text)) == NULL)
            return NULL;
    }
    init_view_next();
    init_pod_stop();
    init_count_nl();
    init_level_lead();
    init_json_plain();
    if (PyType_Ready(&CollectorType) < 0 || PyType_Ready(&HsDatabaseType) < 0 ||
        PyType_Ready(&PrefetchType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddObjectRef(m, "Collector", (PyObject *)&CollectorType) < 0 ||
                      PyModule_AddObjectRef(m, "HsDatabase", (PyObject *)&HsDatabaseType) < 0 ||
                      PyModule_AddObjectRef(m, "Prefetch", (PyObject *)&PrefetchType) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", NATIVE_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
