"""kvtier: the Python client of kvtierd, the KV-cache daemon.

A pure-Python package over libkvtier's C ABI (ctypes), so one package serves every CPython from
3.9 on: Client (connect, register engines, offload / lookup / onboard, park / resume, pins,
stats, events; the *_async forms return concurrent.futures.Futures), PageLayout and BlockHasher,
the pools an engine shares with the daemon (SharedMemoryPool as NumPy arrays or memoryviews,
CUDA IPC exports of torch / CuPy tensors through PoolRegistration.from_dlpack or .cuda,
DevicePool), the compression configuration, and the TriAttention Evictor. Errors raise
kvtier.Error and its subclasses. The daemon's gRPC contract is importable beside it as
kvtier.v1 (generated stubs; they need the optional grpcio and protobuf: pip install kvtier[grpc]).

libkvtier.so is found through $KVTIER_LIBRARY, else the copy inside the package, else the dynamic
linker's search path (docs/CLIENT.md).
"""

from kvtier._capi import lib as _lib
from kvtier._client import ASYNC_WORKERS, Client, EventWatch
from kvtier._compression import (CompressionConfig, compression_method_names,
                                 load_compression_config, parse_compression_config)
from kvtier._errors import Error, InvalidRequestError, NotFoundError
from kvtier._evictor import (CompactionOrder, EvictionMode, Evictor, EvictorConfig,
                             KvCacheView, KvLayout, KvMemory, KvPoolKind, StepOutcome,
                             StepRequest)
from kvtier._layout import (BLOCK_HASH_BYTES, BlockHasher, BufferInfo, DType, PageLayout,
                            PoolInfo, hex_hash)
from kvtier._pools import (DevicePool, PoolRegistration, SharedMemoryPool,
                           create_shared_memory_pools, cuda_available)
from kvtier._types import (Engine, Event, EventKind, ItemCode, ItemResult, LookupResult,
                           NamespaceStats, OffloadResult, OnboardResult, ParkResult, PinResult,
                           Priority, ReleaseResult, ResumeResult, ServerInfo, Stats, Tier,
                           TierStats, WriteAck)

__version__: str = _lib.kvtier_version().decode()
"""The version of the loaded libkvtier (the package's own is importlib.metadata's)."""


def library_version() -> str:
    """The version of the libkvtier this package loaded ("0.1.0": kvtier_version() of the C ABI,
    the KVTIER_VERSION_STRING it was built with); the same as ``__version__``."""
    return _lib.kvtier_version().decode()


library_path: str = _lib._name
"""Where libkvtier was loaded from."""

__all__ = [
    "ASYNC_WORKERS", "BLOCK_HASH_BYTES", "BlockHasher", "BufferInfo", "Client",
    "CompactionOrder", "CompressionConfig", "DType", "DevicePool", "Engine", "Error", "Event",
    "EventKind", "EventWatch", "EvictionMode", "Evictor", "EvictorConfig", "InvalidRequestError",
    "ItemCode", "ItemResult", "KvCacheView", "KvLayout", "KvMemory", "KvPoolKind",
    "LookupResult", "NamespaceStats", "NotFoundError", "OffloadResult", "OnboardResult",
    "PageLayout", "ParkResult", "PinResult", "PoolInfo", "PoolRegistration", "Priority",
    "ReleaseResult", "ResumeResult", "ServerInfo", "SharedMemoryPool", "Stats", "StepOutcome",
    "StepRequest", "Tier", "TierStats", "WriteAck", "compression_method_names",
    "create_shared_memory_pools", "cuda_available", "hex_hash", "library_path", "library_version",
    "load_compression_config", "parse_compression_config",
]
