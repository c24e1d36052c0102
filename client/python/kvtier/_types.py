"""The client's enums and result types (kvtier/types.h, kvtier/client.h): plain immutable values
with reprs. Times are float seconds since the Unix epoch, durations float seconds."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, List, Optional, Tuple


class KvEnum(enum.IntEnum):
    """An IntEnum that prints as "Type.name" (str() and format() both), as kvtier's enums do."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        if spec == "" or spec.endswith("s"):
            return format(str(self), spec)
        return format(int(self), spec)


class Tier(KvEnum):
    """A storage tier of the daemon, fastest first."""
    unspecified = 0
    gpu = 1
    host = 2
    disk = 3
    cluster = 4


class ItemCode(KvEnum):
    """The outcome of one item of a batched call (kvtier.v1.ItemCode)."""
    ok = 0
    already_stored = 1
    not_found = 2
    invalid_argument = 3
    resource_exhausted = 4
    not_admitted = 5
    data_loss = 6
    unavailable = 7
    skipped = 8
    aborted = 9
    failed_precondition = 10
    internal = 11


class Priority(KvEnum):
    """Eviction priority of stored blocks; default lets the server choose."""
    default = 0
    low = 1
    normal = 2
    high = 3


class WriteAck(KvEnum):
    """When a writing call (offload, park) returns; default is pages_read."""
    default = 0
    pages_read = 1
    stored = 2
    durable = 3


class EventKind(KvEnum):
    """The kind of one event of the daemon's stream."""
    block_stored = 0
    block_removed = 1
    block_moved = 2
    namespace_cleared = 3
    events_lost = 4
    snapshot_complete = 5


@dataclasses.dataclass(frozen=True)
class ItemResult:
    """One item of a batched call: its code, the server's message for failures, the tier."""
    code: ItemCode
    message: str = ""
    tier: Tier = Tier.unspecified

    @property
    def ok(self) -> bool:
        return self.code == ItemCode.ok

    def __repr__(self) -> str:
        parts = [self.code.name]
        if self.message:
            parts.append(repr(self.message))
        if self.tier != Tier.unspecified:
            parts.append(self.tier.name)
        return f"ItemResult({', '.join(parts)})"


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """What the daemon said in Hello."""
    api_version: int
    server_version: str
    incarnation_id: int
    node_name: str
    tiers: List[Tier]
    codecs: List[str]
    cuda: bool
    cuda_ipc_pools: bool
    shared_memory_pools: bool
    persistent_host_tier: bool
    authentication: bool
    draining: bool
    max_items_per_request: int
    features: List[str]

    def __repr__(self) -> str:
        return (f"ServerInfo(server_version={self.server_version!r}, "
                f"api_version={self.api_version}, node_name={self.node_name!r}, "
                f"tiers={[t.name for t in self.tiers]}, codecs={self.codecs}, "
                f"draining={self.draining})")


@dataclasses.dataclass(frozen=True)
class Engine:
    """A registered engine (what register_engine returned). It keeps the pools it was registered
    with (and so the memory the daemon maps) alive."""
    engine_id: str
    namespace_id: int
    hash_root: bytes
    codec: str
    hot_page_bytes: int
    cold_block_bytes: int
    lease_ttl: float
    incarnation_id: int
    pools: Tuple[Any, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"Engine(engine_id={self.engine_id!r}, codec={self.codec!r}, "
                f"hot_page_bytes={self.hot_page_bytes}, namespace_id={self.namespace_id:#x})")


@dataclasses.dataclass(frozen=True)
class LookupResult:
    """How many leading hashes are stored, the tier of each hit, and when pinned hits expire
    (None when nothing was pinned)."""
    hit_pages: int
    tiers: List[Tier]
    pin_expires_at: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class OffloadResult:
    """One ItemResult per page, the pages stored, hot bytes read and cold bytes written."""
    results: List[ItemResult]
    stored_pages: int
    hot_bytes_read: int
    cold_bytes_written: int


@dataclasses.dataclass(frozen=True)
class OnboardResult:
    """One ItemResult per page (tier: where the block was read from); onboarded_pages is the
    usable prefix of leading OK items."""
    results: List[ItemResult]
    onboarded_pages: int
    cold_bytes_read: int
    hot_bytes_written: int


@dataclasses.dataclass(frozen=True)
class ParkResult:
    parked_pages: int
    cold_bytes: int
    expires_at: float
    tier: Tier


@dataclasses.dataclass(frozen=True)
class ResumeResult:
    resumed_pages: int
    parked_pages: int
    num_tokens: int
    user_data: bytes
    released: bool


@dataclasses.dataclass(frozen=True)
class ReleaseResult:
    """ItemCode.ok or not_found per request id, and the bytes freed."""
    results: List[ItemResult]
    freed_bytes: int


@dataclasses.dataclass(frozen=True)
class PinResult:
    results: List[ItemResult]
    expires_at: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class TierStats:
    tier: Tier
    capacity_bytes: int = 0
    used_bytes: int = 0
    blocks: int = 0
    pinned_blocks: int = 0
    hits: int = 0
    misses: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    evicted_blocks: int = 0
    checksum_failures: int = 0


@dataclasses.dataclass(frozen=True)
class NamespaceStats:
    """One namespace's figures (its tiers: blocks and used_bytes only)."""
    namespace_id: int
    tenant: str
    model: str
    partition: str
    tiers: List[TierStats]
    engines: int
    hits: int
    misses: int
    parked_requests: int


@dataclasses.dataclass(frozen=True)
class Stats:
    """The daemon's counters (stats()); namespaces with include_namespaces=True."""
    incarnation_id: int
    uptime: float
    tiers: List[TierStats]
    hot_bytes_offloaded: int
    cold_bytes_offloaded: int
    hot_bytes_onboarded: int
    cold_bytes_onboarded: int
    dropped_offloads: int
    parked_requests: int
    registered_engines: int
    draining: bool
    namespaces: List[NamespaceStats]

    def tier(self, tier: Tier) -> Optional[TierStats]:
        """The TierStats of `tier`, or None."""
        for t in self.tiers:
            if t.tier == tier:
                return t
        return None


@dataclasses.dataclass(frozen=True)
class Event:
    """One event of the daemon's stream, flattened (block_hashes: stored, removed, moved; tier:
    stored, removed, cleared, the destination of a move; count: blocks cleared, events lost, or
    the snapshot's blocks)."""
    kind: EventKind
    sequence: int
    namespace_id: int
    block_hashes: List[bytes]
    tier: Tier
    from_tier: Tier
    count: int

    def __repr__(self) -> str:
        return (f"Event({self.kind.name}, sequence={self.sequence}, "
                f"namespace_id={self.namespace_id:#x}, hashes={len(self.block_hashes)}, "
                f"tier={self.tier.name}, count={self.count})")
