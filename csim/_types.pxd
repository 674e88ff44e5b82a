# The C types of the engine, named once (the architecture's array contract):
# addresses uint64, sizes uint32, read/write flags uint8. Nothing else defines types.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

ctypedef uint64_t addr_t     # a byte address or a line number
ctypedef uint32_t size_t32   # bytes of one access
ctypedef uint8_t flag_t      # 0 = read, 1 = write
ctypedef int64_t index_t     # array positions, loop indices
