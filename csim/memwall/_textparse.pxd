# The contract of memwall._textparse: the scanner's cdef helpers (none can fail: each is
# `noexcept nogil`; a token they do not accept is a return value, -1 or false).
from libc.stdint cimport uint8_t, uint64_t

cdef bint is_blank(uint8_t c) noexcept nogil                  # space or tab
cdef int hex_digit(uint8_t c) noexcept nogil                  # 0..15, or -1
cdef Py_ssize_t scan_hex(const uint8_t *p, Py_ssize_t i, Py_ssize_t end,
                         uint64_t *out) noexcept nogil        # index after, or -1
cdef Py_ssize_t scan_dec(const uint8_t *p, Py_ssize_t i, Py_ssize_t end,
                         uint64_t *out) noexcept nogil        # index after, or -1
