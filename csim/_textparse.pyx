# cython: language_level=3
"""Text traces parsed in C: din (``label hexaddr [size]``) and xdin (``r|w hexaddr hexsize``).

Owns only the scanning of complete lines of a byte buffer into the engine's arrays, many
lines per call and without the GIL; memwall.traces owns the files, the chunking and every
error message. A line this scanner does not accept stops it and is reported by position;
traces.py then diagnoses that one line in Python (so the messages live in one place).

Accepted, exactly: fields separated by spaces or tabs (a line may end in CR); addresses in
hex with an optional 0x, at most 64 bits; din sizes in decimal, xdin sizes in hex (optional
0x); sizes 1 .. 2**32-1; addr + size not past 2**64; blank lines skipped. Nothing else: no
signs, no digit separators (Python's ``1_000``), no other whitespace.
"""

cimport cython
from libc.stdint cimport uint8_t, uint32_t, uint64_t

cdef enum TextFormat:
    FMT_DIN = 0
    FMT_XDIN = 1

FORMATS = {"din": FMT_DIN, "xdin": FMT_XDIN}  # the codes scan_lines takes as ``fmt``


cdef inline bint is_blank(uint8_t c) noexcept nogil:
    return c == 32 or c == 9  # space, tab


cdef inline int hex_digit(uint8_t c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef inline Py_ssize_t scan_hex(const uint8_t *p, Py_ssize_t i, Py_ssize_t end, uint64_t *out) noexcept nogil:
    """A hex number at p[i:]; returns the index after it, or -1 (no digit, over 64 bits)."""
    cdef uint64_t v = 0
    cdef Py_ssize_t start
    cdef int d
    if i + 1 < end and p[i] == 48 and (p[i + 1] == 120 or p[i + 1] == 88):  # 0x, 0X
        i += 2
    start = i
    while i < end:
        d = hex_digit(p[i])
        if d < 0:
            break
        if v >> 60:
            return -1
        v = (v << 4) | <uint64_t> d
        i += 1
    if i == start:
        return -1
    out[0] = v
    return i


cdef inline Py_ssize_t scan_dec(const uint8_t *p, Py_ssize_t i, Py_ssize_t end, uint64_t *out) noexcept nogil:
    """A decimal number below 2**32 at p[i:]; returns the index after it, or -1."""
    cdef uint64_t v = 0
    cdef Py_ssize_t start = i
    while i < end and 48 <= p[i] <= 57:
        v = v * 10 + (p[i] - 48)
        if v >> 32:
            return -1
        i += 1
    if i == start:
        return -1
    out[0] = v
    return i


@cython.boundscheck(False)
@cython.wraparound(False)
def scan_lines(const uint8_t[::1] data, Py_ssize_t start, bint final, int fmt, uint32_t default_size,
               uint64_t[::1] addr, uint32_t[::1] size, uint8_t[::1] is_write, Py_ssize_t fill):
    """Scan complete lines of ``data[start:]`` (and a last unterminated one when ``final``)
    into the arrays from index ``fill`` until they are full, the lines run out, or a line
    is not accepted.

    Returns ``(pos, fill, lines, bad)``: the offset after the last line scanned, the new
    fill, the lines scanned (blank ones included) and whether the line at ``pos`` was
    refused.
    """
    cdef Py_ssize_t n = data.shape[0], cap = addr.shape[0], lines = 0, i, eol, nl
    cdef const uint8_t *p = &data[0] if n else NULL
    cdef uint64_t a, s
    cdef uint8_t w, c
    cdef bint bad = 0
    if size.shape[0] < cap or is_write.shape[0] < cap:
        raise ValueError("output arrays differ in length")
    with nogil:
        while start < n and fill < cap:
            eol = start
            while eol < n and p[eol] != 10:
                eol += 1
            if eol == n and not final:
                break  # an incomplete line: wait for more data
            nl = eol
            i = start
            # trailing CR and blanks are not part of the last field
            while eol > i and (p[eol - 1] == 13 or is_blank(p[eol - 1])):
                eol -= 1
            while i < eol and is_blank(p[i]):
                i += 1
            if i < eol:
                c = p[i]
                if fmt == FMT_DIN:
                    if c < 48 or c > 50 or i + 1 >= eol or not is_blank(p[i + 1]):
                        bad = 1
                        break
                    w = c == 49
                else:
                    if (c != 114 and c != 119) or i + 1 >= eol or not is_blank(p[i + 1]):
                        bad = 1
                        break
                    w = c == 119
                i += 1
                while i < eol and is_blank(p[i]):
                    i += 1
                i = scan_hex(p, i, eol, &a)
                if i < 0:
                    bad = 1
                    break
                if i == eol and fmt == FMT_DIN:
                    s = default_size
                else:
                    if i == eol or not is_blank(p[i]):
                        bad = 1
                        break
                    while i < eol and is_blank(p[i]):
                        i += 1
                    if fmt == FMT_DIN:
                        i = scan_dec(p, i, eol, &s)
                    else:
                        i = scan_hex(p, i, eol, &s)
                    if i != eol or s == 0 or s >> 32:  # (-1 when malformed; trailing text)
                        bad = 1
                        break
                if a + (s - 1) < a:  # wraps past 2**64
                    bad = 1
                    break
                addr[fill] = a
                size[fill] = <uint32_t> s
                is_write[fill] = w
                fill += 1
            lines += 1
            start = nl + 1 if nl < n else n
    return start, fill, lines, bad
