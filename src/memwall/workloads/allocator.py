"""One address space for a training step: a first-fit allocator with alignment.

Owns: :class:`Allocator` (allocate, free, peak live bytes per tensor class) and the
reserved scratch region that lowering uses for packed GEMM panels (``SCRATCH_BASE``):
packing buffers are a property of the schedule, not of the step, so they live apart
from every tensor the step allocates.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..errors import InputError

CLASSES = ("weights", "gradients", "optimizer", "activations", "workspace", "input", "kv_cache")
HEAP_BASE = 1 << 28  # no tensor at address 0; 256 MiB leaves room for nothing in particular
ALIGN = 256  # every tensor starts on a 256-byte boundary (covers 128-byte lines and DMA)
SCRATCH_BASE = 1 << 62  # lowering's packing buffers: far above any heap a step can reach
REGIONS = 2  # the layers' tensors, and the edges' (EDGE)
EDGE = 1
REGION_SPAN = 1 << 50  # 1 PiB between the regions' bases: more than any step allocates


@dataclass(frozen=True)
class TensorRef:
    """A tensor at an address: ``cls`` is one of CLASSES."""

    name: str
    cls: str
    addr: int
    bytes: int

    def as_dict(self) -> dict:
        return {"name": self.name, "cls": self.cls, "addr": self.addr, "bytes": self.bytes}


class _Region:
    """One stretch of the address space, first fit over a free list kept sorted by address."""

    def __init__(self, base: int) -> None:
        self.top = base  # end of the highest block ever handed out
        self.free_starts: list[int] = []  # sorted
        self.free_sizes: dict[int, int] = {}

    def take(self, size: int) -> int:
        for i, start in enumerate(self.free_starts):
            have = self.free_sizes[start]
            if have >= size:
                del self.free_starts[i]
                del self.free_sizes[start]
                if have > size:
                    bisect.insort(self.free_starts, start + size)
                    self.free_sizes[start + size] = have - size
                return start
        addr = self.top
        self.top += size
        return addr

    def give_back(self, start: int, size: int) -> None:
        i = bisect.bisect_left(self.free_starts, start)
        if i < len(self.free_starts) and self.free_starts[i] == start + size:  # merge the next
            size += self.free_sizes.pop(self.free_starts.pop(i))
        if i > 0 and self.free_starts[i - 1] + self.free_sizes[self.free_starts[i - 1]] == start:
            prev = self.free_starts[i - 1]
            self.free_sizes[prev] += size
        else:
            self.free_starts.insert(i, start)
            self.free_sizes[start] = size
        if self.free_starts and self.free_starts[-1] + self.free_sizes[self.free_starts[-1]] == self.top:
            last = self.free_starts.pop()
            self.top = last
            del self.free_sizes[last]


class Allocator:
    """First fit in each of :data:`REGIONS` regions; freed blocks merge with neighbours; the
    live bytes and their peaks are counted over all regions together.

    Region 0 holds what a step's layers touch, region 1 (``EDGE``) what only the edges of
    the network touch (embedding, head, loss: kernels outside every layer), so that every
    pipeline stage lays out its layers' tensors at the same addresses whichever edge it
    also runs, as each stage's own process lays out its own device's memory."""

    def __init__(self, base: int = HEAP_BASE, align: int = ALIGN) -> None:
        self.base, self.align = base, align
        self.regions = [_Region(base + r * REGION_SPAN) for r in range(REGIONS)]
        self.live: dict[int, TensorRef] = {}
        self.current = dict.fromkeys(CLASSES, 0)
        self.peak = dict.fromkeys(CLASSES, 0)
        self.live_total = 0
        self.peak_total = 0

    def alloc(self, name: str, cls: str, nbytes: int, region: int = 0) -> TensorRef:
        if cls not in CLASSES:
            raise InputError(f"unknown tensor class {cls!r}")
        if nbytes <= 0:
            raise InputError(f"tensor {name} needs a positive size, got {nbytes}")
        addr = self.regions[region].take(-(-nbytes // self.align) * self.align)
        ref = TensorRef(name, cls, addr, nbytes)
        self.live[addr] = ref
        self.current[cls] += nbytes
        self.peak[cls] = max(self.peak[cls], self.current[cls])
        self.live_total += nbytes
        self.peak_total = max(self.peak_total, self.live_total)
        return ref

    def free(self, *refs: TensorRef) -> None:
        for ref in refs:
            if self.live.get(ref.addr) is not ref:
                raise RuntimeError(f"freeing {ref.name}, which is not live")  # a bug in a step builder
            del self.live[ref.addr]
            self.current[ref.cls] -= ref.bytes
            self.live_total -= ref.bytes
            region = min(REGIONS - 1, (ref.addr - self.base) // REGION_SPAN)
            self.regions[region].give_back(ref.addr, -(-ref.bytes // self.align) * self.align)

    def is_live(self, ref: TensorRef) -> bool:
        return self.live.get(ref.addr) is ref
