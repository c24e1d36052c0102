"""kvtier for PyTorch engines: a paged KV pool held in one torch tensor and shared with kvtierd.

PagedKVPool keeps `slots` pages of a PageLayout in a single uint8 tensor: on a CUDA device the
tensor is exported to the daemon through CUDA IPC (PoolRegistration.from_dlpack), on the CPU it
is a torch view of a SharedMemoryPool the daemon maps. Every K and V buffer of the layout is
also a typed view over all slots, `(slots, heads, tokens, head_dim)` (the layout's rows, gaps of
a row stride left out), so pages move between the pool and an engine's per-layer tensors with
one index operation per buffer and no copy through the host.

Needs torch (any version with DLPack, 1.10 or later); `import kvtier` itself never imports it.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from kvtier._evictor import KvCacheView, KvLayout, KvMemory, KvPoolKind
from kvtier._layout import DType, PageLayout
from kvtier._pools import PoolRegistration, SharedMemoryPool

__all__ = ["PagedKVPool", "PoolExhaustedError", "torch_dtype"]

_TORCH_DTYPES = {
    DType.bf16: torch.bfloat16,
    DType.fp16: torch.float16,
    DType.fp32: torch.float32,
}
if hasattr(torch, "float8_e4m3fn"):
    _TORCH_DTYPES[DType.fp8_e4m3] = torch.float8_e4m3fn

LayerKV = Tuple[torch.Tensor, torch.Tensor]


def torch_dtype(dtype: DType) -> torch.dtype:
    """The torch dtype of a layout dtype; ValueError for one torch has no type for."""
    try:
        return _TORCH_DTYPES[DType(dtype)]
    except KeyError:
        raise ValueError(f"layout dtype {DType(dtype).name} has no torch dtype here") from None


class PoolExhaustedError(RuntimeError):
    """More pages were asked for than the pool has free."""


class PagedKVPool:
    """`slots` pages of `layout` in one torch tensor on `device`, registered with kvtierd.

    The layout must have one pool (gqa() layouts do) whose K and V buffers have a torch dtype.
    For a CPU device, `pool_dir` must be one of the daemon's pools.allowed_dirs (default
    $KVTIER_POOL_DIR, else /dev/shm); the shared-memory file is removed with the pool.

    alloc()/free() hand out slots; write() and read() move a run of pages between slots and
    per-layer `(heads, tokens, head_dim)` tensors (the layout of a transformers cache layer
    without its batch dimension). The caller keeps writes finished on the device (sync()) before
    kvtierd reads the slots, as for any memory the daemon reads through CUDA IPC."""

    def __init__(self, layout: PageLayout, slots: int, device: Union[str, torch.device] = "cuda",
                 *, pool_dir: Optional[str] = None, name: str = "") -> None:
        if not isinstance(layout, PageLayout):
            raise TypeError(f"layout must be a kvtier.PageLayout, got {type(layout).__name__}")
        if len(layout.pools) != 1:
            raise ValueError(f"PagedKVPool holds layouts of one pool; this one has "
                             f"{len(layout.pools)} ({', '.join(p.name for p in layout.pools)})")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots <= 0:
            raise ValueError(f"slots must be a positive int, got {slots!r}")
        self.layout = layout
        self.slots = slots
        self.device = torch.device(device)
        self.tokens_per_page = layout.tokens_per_page
        pool = layout.pools[0]
        self.slot_bytes = pool.slot_bytes
        self._shm: Optional[SharedMemoryPool] = None
        if self.device.type == "cuda":
            self.storage = torch.zeros(slots * self.slot_bytes, dtype=torch.uint8,
                                       device=self.device)
            self.registration = PoolRegistration.from_dlpack(pool.name, slots, self.storage)
        elif self.device.type == "cpu":
            directory = pool_dir or os.environ.get("KVTIER_POOL_DIR") or "/dev/shm"
            fd, path = tempfile.mkstemp(prefix=f"kvtier-torch-{name or pool.name}.",
                                        dir=directory)
            os.close(fd)
            os.unlink(path)  # SharedMemoryPool creates the file itself
            self._shm = SharedMemoryPool(path, pool.name, slots, self.slot_bytes)
            self.storage = torch.from_numpy(self._shm.array())
            self.registration = self._shm.registration()
        else:
            raise ValueError(f"PagedKVPool: device type {self.device.type!r} (cuda or cpu)")
        self.num_layers = 1 + max((b.layer for b in layout.buffers), default=-1)
        self.keys: List[Optional[torch.Tensor]] = [None] * self.num_layers
        self.values: List[Optional[torch.Tensor]] = [None] * self.num_layers
        typed: Dict[torch.dtype, torch.Tensor] = {}
        for b in layout.buffers:
            if b.role not in ("k", "v"):
                raise ValueError(f"PagedKVPool: buffer {b.name!r} has role {b.role!r} (k or v "
                                 "only)")
            dtype = torch_dtype(b.dtype)
            size = torch.empty((), dtype=dtype).element_size()
            if self.slot_bytes % size or b.offset_bytes % size:
                raise ValueError(f"buffer {b.name!r} is not aligned to its {size}-byte elements")
            if dtype not in typed:
                typed[dtype] = self.storage.view(dtype)
            stride = b.row_stride or b.head_dim
            view = typed[dtype].as_strided(
                (slots, b.heads, b.tokens, b.head_dim),
                (self.slot_bytes // size, b.tokens * stride, stride, 1), b.offset_bytes // size)
            (self.keys if b.role == "k" else self.values)[b.layer] = view
        for layer in range(self.num_layers):
            if self.keys[layer] is None or self.values[layer] is None:
                raise ValueError(f"PagedKVPool: layer {layer} lacks a K or a V buffer")
        self._free = list(range(slots - 1, -1, -1))

    # ---- slots -------------------------------------------------------------------------------

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def alloc(self, count: int) -> List[int]:
        """`count` free slots (PoolExhaustedError, and none taken, when fewer are free)."""
        if count > len(self._free):
            raise PoolExhaustedError(f"{count} pages asked of a pool with {len(self._free)} of "
                                     f"{self.slots} free")
        taken = self._free[len(self._free) - count:]
        del self._free[len(self._free) - count:]
        taken.reverse()
        return taken

    def free(self, slots: Sequence[int]) -> None:
        self._free.extend(reversed(list(slots)))

    # ---- pages <-> per-layer tensors ---------------------------------------------------------

    def _index(self, slots: Sequence[int]) -> torch.Tensor:
        return torch.as_tensor(list(slots), dtype=torch.long, device=self.device)

    def write(self, slots: Sequence[int], layers: Sequence[LayerKV]) -> None:
        """Writes tokens [0, n) of each layer's (K, V), shaped (heads, n, head_dim), into the
        pages `slots` (n ≤ len(slots) × tokens_per_page; the last page's tail keeps whatever
        it held)."""
        if len(layers) != self.num_layers:
            raise ValueError(f"{len(layers)} layers given to a pool of {self.num_layers}")
        pages = len(slots)
        if pages == 0:
            return
        index = self._index(slots)
        t = self.tokens_per_page
        for layer, (k, v) in enumerate(layers):
            for dst, src in ((self.keys[layer], k), (self.values[layer], v)):
                assert dst is not None
                n = src.shape[-2]
                if n > pages * t or n <= (pages - 1) * t:
                    raise ValueError(f"{n} tokens do not fill {pages} pages of {t}")
                if n < pages * t:  # a partial last page: pad, then one index_put as for full ones
                    pad = src.new_zeros(src.shape[0], pages * t - n, src.shape[-1])
                    src = torch.cat([src, pad], dim=-2)
                dst[index] = src.reshape(src.shape[0], pages, t, src.shape[-1]).transpose(0, 1)

    def read(self, slots: Sequence[int], tokens: Optional[int] = None) -> List[LayerKV]:
        """Each layer's (K, V) of the pages `slots`, shaped (heads, n, head_dim) with n = tokens
        (default: every token of the pages); new tensors, not views of the pool."""
        pages = len(slots)
        n = pages * self.tokens_per_page if tokens is None else tokens
        if not (pages - 1) * self.tokens_per_page < n <= pages * self.tokens_per_page and pages:
            raise ValueError(f"{n} tokens asked of {pages} pages of {self.tokens_per_page}")
        return [(k[0], v[0]) for k, v in self.read_rows([slots], n)]

    def read_rows(self, tables: Sequence[Sequence[int]], tokens: int) -> List[LayerKV]:
        """read() for several rows at once: each layer's (K, V) of tokens [0, tokens) of every
        row's pages (`tables`, one list of slots per row, each covering `tokens`), shaped
        (rows, heads, tokens, head_dim); new tensors, one index operation per buffer."""
        pages = -(-tokens // self.tokens_per_page)
        index = torch.as_tensor([list(t)[:pages] for t in tables], dtype=torch.long,
                                device=self.device)
        if index.shape[1] != pages:
            raise ValueError(f"{tokens} tokens asked of rows of {index.shape[1]} pages of "
                             f"{self.tokens_per_page}")
        out: List[LayerKV] = []
        for layer in range(self.num_layers):
            pair = []
            for src in (self.keys[layer], self.values[layer]):
                assert src is not None
                g = src[index]  # (rows, pages, heads, tokens_per_page, head_dim)
                g = g.permute(0, 2, 1, 3, 4).reshape(
                    g.shape[0], g.shape[2], pages * self.tokens_per_page, g.shape[-1])
                pair.append(g[:, :, :tokens].contiguous())
            out.append((pair[0], pair[1]))
        return out

    def kv_cache_view(self) -> KvCacheView:
        """The pool as the TriAttention Evictor sees it (kvtier.KvCacheView): each layer's K
        and V pages in HND order at a slot's stride, on the pool's device. The view borrows
        this pool's memory: keep the pool alive while it (or an Evictor made from it) is used.
        ValueError for a layout the Evictor cannot read (rows with gaps, layers that differ)."""
        first = self.keys[0]
        assert first is not None
        for b in self.layout.buffers:
            if b.row_stride not in (0, b.head_dim):
                raise ValueError(f"kv_cache_view: buffer {b.name!r} has a row stride of "
                                 f"{b.row_stride} for head_dim {b.head_dim} (the Evictor reads "
                                 "dense rows)")
        for t in self.keys + self.values:
            assert t is not None
            if t.shape != first.shape or t.dtype != first.dtype:
                raise ValueError("kv_cache_view: every layer's K and V must have one shape and "
                                 f"dtype; {tuple(t.shape)} {t.dtype} differs from "
                                 f"{tuple(first.shape)} {first.dtype}")
        dtype = next(d for d, td in _TORCH_DTYPES.items() if td == first.dtype)
        pairs = [(k.data_ptr(), v.data_ptr()) for k, v in zip(self.keys, self.values)
                 if k is not None and v is not None]
        return KvCacheView(pairs, self.slots, self.tokens_per_page, first.shape[1],
                           first.shape[3], dtype, KvLayout.hnd, KvPoolKind.separate,
                           KvMemory.device if self.device.type == "cuda" else KvMemory.host,
                           page_stride_bytes=self.slot_bytes)

    def sync(self) -> None:
        """Waits for the device's work on the pool (before kvtierd reads written pages)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __repr__(self) -> str:
        return (f"PagedKVPool(slots={self.slots}, slot_bytes={self.slot_bytes}, "
                f"layers={self.num_layers}, device={self.device}, free={len(self._free)})")

    def __reduce__(self) -> Any:
        raise TypeError("a PagedKVPool shares memory with kvtierd and cannot be pickled")
