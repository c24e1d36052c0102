"""kvtier.Client (kvtier/client.h through kvtier_v2.h): a connection to kvtierd, and EventWatch.

Synchronous calls convert their arguments and make one C call, which releases the GIL (ctypes
does) for the RPC. The *_async calls return a concurrent.futures.Future, created running (so it
cannot be cancelled) and completed from one of the client's worker threads, which make the same
synchronous call: at most ASYNC_WORKERS calls of one client are in flight at once, the others
queue. close() waits for the calls in flight, cancels the event watches, then closes the
connection; calls after it raise FAILED_PRECONDITION.
"""

from __future__ import annotations

import array
import atexit
import concurrent.futures
import ctypes
import threading
import weakref
from ctypes import POINTER, byref, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any, Callable, Iterable, List, Optional, Sequence, TypeVar, Union

from kvtier import _args, _capi
from kvtier._args import IntArray
from kvtier._capi import lib
from kvtier._errors import check, invalid, make_error, precondition
from kvtier._layout import PageLayout
from kvtier._pools import DevicePool, PoolRegistration, SharedMemoryPool, to_registration
from kvtier._types import (Engine, Event, EventKind, ItemCode, ItemResult, LookupResult,
                           NamespaceStats, OffloadResult, OnboardResult, ParkResult, PinResult,
                           Priority, ReleaseResult, ResumeResult, ServerInfo, Stats, Tier,
                           TierStats, WriteAck)

ASYNC_WORKERS = 16

T = TypeVar("T")
EngineRef = Union[Engine, str]
Pool = Union[SharedMemoryPool, DevicePool, PoolRegistration]


def _engine_id(engine: EngineRef) -> bytes:
    if isinstance(engine, Engine):
        return engine.engine_id.encode()
    if isinstance(engine, str):
        return engine.encode()
    raise TypeError(f"engine must be a kvtier.Engine or its engine_id, got {type(engine).__name__}")


def _items(items: Any, count: int) -> List[ItemResult]:
    return [ItemResult(ItemCode(items[i].code), _capi.text(items[i].message), Tier(items[i].tier))
            for i in range(count)]


def _seconds(unix_ms: int) -> Optional[float]:
    return unix_ms / 1000.0 if unix_ms else None


def _server_info(v2: _capi.ServerInfoV2) -> ServerInfo:
    s = v2.info
    codecs = _capi.text(s.codecs)
    features = _capi.text(v2.features)
    return ServerInfo(
        api_version=s.api_version, server_version=_capi.text(s.server_version),
        incarnation_id=s.incarnation_id, node_name=_capi.text(s.node_name),
        tiers=[t for t in Tier if t != Tier.unspecified and s.tier_mask & (1 << int(t))],
        codecs=codecs.split(",") if codecs else [], cuda=bool(s.cuda),
        cuda_ipc_pools=bool(s.cuda_ipc_pools), shared_memory_pools=bool(s.shared_memory_pools),
        persistent_host_tier=bool(s.persistent_host_tier),
        authentication=bool(s.authentication), draining=bool(s.draining),
        max_items_per_request=s.max_items_per_request,
        features=features.split(",") if features else [])


def _tier_stats(t: _capi.TierStats) -> TierStats:
    return TierStats(tier=Tier(t.tier), capacity_bytes=t.capacity_bytes, used_bytes=t.used_bytes,
                     blocks=t.blocks, pinned_blocks=t.pinned_blocks, hits=t.hits,
                     misses=t.misses, bytes_in=t.bytes_in, bytes_out=t.bytes_out,
                     evicted_blocks=t.evicted_blocks, checksum_failures=t.checksum_failures)


def _pages(hashes: Sequence[bytes], page_indices: Any) -> Any:
    buf, hash_len, count = _args.hash_buffer(hashes)
    indices = _args.u32_array(page_indices, "page_indices")
    if indices.count != count:
        raise invalid(f"{count} hashes but {indices.count} page indices")
    return buf, hash_len, count, indices


def _page_tokens(token_ids: Any, count: int) -> Any:
    """token_ids (one token sequence per page; None or empty for a page without) as the C ABI's
    (flat uint32 array, per-page counts), or None when token_ids is None."""
    if token_ids is None:
        return None
    if isinstance(token_ids, (bytes, bytearray, str)):
        raise TypeError("token_ids must be a sequence of token sequences, one per page")
    per_page = list(token_ids)
    if len(per_page) != count:
        raise invalid(f"{count} hashes but token_ids for {len(per_page)} pages")
    flat = array.array("I")
    counts = array.array("I")
    for i, page in enumerate(per_page):
        tokens = _args.u32_array(() if page is None else page, f"token_ids[{i}]",
                                 check_range=False)
        if tokens.count:
            flat.frombytes(ctypes.string_at(tokens.pointer, 4 * tokens.count))
        counts.append(tokens.count)
    return (_args.CArray(flat, flat.buffer_info()[0] if len(flat) else 0, len(flat)),
            _args.CArray(counts, counts.buffer_info()[0] if len(counts) else 0, len(counts)))


class EventWatch:
    """A running event stream; cancel() (or leaving a `with` block) ends it. Its callbacks run
    on the watch's own thread; cancel() from a callback raises (it would wait for itself)."""

    def __init__(self, client: "Client", on_event: Callable[[Event], Any],
                 on_done: Optional[Callable[[Optional[BaseException]], Any]], snapshot: bool,
                 namespace_id: int) -> None:
        self._lock = threading.Lock()
        self._handle: Optional[int] = None
        self._thread: Optional[int] = None
        self._client = client

        def deliver(event_ptr: Any, _user: Any) -> None:
            self._thread = threading.get_ident()
            e = event_ptr.contents
            data = ctypes.string_at(e.block_hashes, 32 * e.num_hashes) if e.num_hashes else b""
            on_event(Event(kind=EventKind(e.kind - 1), sequence=e.sequence,
                           namespace_id=e.namespace_id,
                           block_hashes=_args.split_hashes(data, e.num_hashes), tier=Tier(e.tier),
                           from_tier=Tier(e.from_tier), count=e.count))

        def done(status_ptr: Any, _user: Any) -> None:
            self._thread = threading.get_ident()
            if on_done is None:
                return
            s = status_ptr.contents
            on_done(None if s.code == 0 else make_error(s.code, _capi.text(s.message)))

        # The C callbacks must live as long as the watch.
        self._on_event = _capi.EVENT_FN(deliver)
        self._on_done = _capi.WATCH_DONE_FN(done)
        out = c_void_p(None)
        err = _capi.Error()
        with client._call() as handle:
            check(lib.kvtier_client_watch_events(handle, int(bool(snapshot)),
                                                 _args.u64(namespace_id, "namespace_id"),
                                                 self._on_event, self._on_done, None, byref(out),
                                                 byref(err)), err)
        self._handle = out.value
        _live_watches.add(self)

    def cancel(self) -> None:
        """Cancels the stream and waits for its thread (on_done has run when this returns)."""
        if self._thread is not None and self._thread == threading.get_ident():
            raise precondition("an EventWatch cannot be cancelled from its own callback")
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            lib.kvtier_watch_destroy(handle)
            _live_watches.discard(self)

    def __enter__(self) -> "EventWatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.cancel()


_live_watches: "weakref.WeakSet[EventWatch]" = weakref.WeakSet()


@atexit.register
def _cancel_watches_at_exit() -> None:
    # A watch's thread calls into Python: it must stop before the interpreter does.
    for watch in list(_live_watches):
        try:
            watch.cancel()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


class _InFlight:
    """Context manager of one call: holds the client open while the C call runs."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def __enter__(self) -> int:
        c = self._client
        with c._cv:
            if c._handle is None:
                raise precondition("the kvtier.Client is closed")
            c._in_flight += 1
            return c._handle

    def __exit__(self, *exc: Any) -> None:
        c = self._client
        with c._cv:
            c._in_flight -= 1
            if c._in_flight == 0:
                c._cv.notify_all()


class Client:
    """A connection to kvtierd; thread-safe. Calls taking `engine` accept an Engine or its
    engine_id. Block hashes are bytes (BlockHasher makes them); page indices a list of int, a
    range or a NumPy integer array. Durations and times are float seconds (times since the Unix
    epoch). Synchronous calls release the GIL; the *_async forms return a
    concurrent.futures.Future. Errors raise kvtier.Error (see its subclasses); a failed item of
    a batch is an ItemResult, not an exception."""

    def __init__(self, handle: int) -> None:
        """Takes a kvtier_client handle: use Client.connect()."""
        self._handle: Optional[int] = handle
        self._cv = threading.Condition()
        self._in_flight = 0
        self._watches: "weakref.WeakSet[EventWatch]" = weakref.WeakSet()
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        info = _capi.ServerInfoV2()
        err = _capi.Error()
        check(lib.kvtier_client_server_info_v2(handle, 0, byref(info), byref(err)), err)
        self._server = _server_info(info)

    @staticmethod
    def connect(*, socket: str = "", client_name: str = "", timeout: float = 0.0,
                target: str = "", token: str = "", rpc_timeout: float = 0.0,
                keep_alive: bool = True) -> "Client":
        """Connects and says Hello. socket '' means $KVTIER_SOCKET or /run/kvtier/kvtier.sock;
        `timeout` (seconds, 0: 10) bounds the connect and, unless rpc_timeout is given, every
        call (0: 30). kvtier.Error UNAVAILABLE naming the socket and the reason, at once when
        nothing listens there, or after `timeout` when no daemon answers."""
        o = _capi.ConnectOptions()
        keep = [_args.text_arg(v, n).encode() for v, n in (
            (socket, "socket"), (target, "target"), (client_name, "client_name"),
            (token, "token"))]
        o.socket_path, o.target, o.client_name, o.token = keep
        connect_ms = _args.millis(timeout, "timeout")
        o.connect_timeout_ms = connect_ms
        o.rpc_timeout_ms = _args.millis(rpc_timeout, "rpc_timeout") or connect_ms
        o.no_keep_alive = 0 if keep_alive else 1
        out = c_void_p(None)
        err = _capi.Error()
        check(lib.kvtier_client_connect_v2(byref(o), byref(out), byref(err)), err)
        return Client(out.value)  # type: ignore[arg-type]

    # ---- lifetime ----------------------------------------------------------------------------

    def _call(self) -> _InFlight:
        return _InFlight(self)

    def close(self) -> None:
        """Closes the connection once the calls in flight are done; leases of its engines are no
        longer renewed, its event watches are cancelled."""
        with self._cv:
            if self._handle is None:
                return
            handle, self._handle = self._handle, None
            executor, self._executor = self._executor, None
        for watch in list(self._watches):
            watch.cancel()
        with self._cv:
            while self._in_flight > 0:
                self._cv.wait()
        if executor is not None:
            executor.shutdown(wait=False)
        lib.kvtier_client_close(handle)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()

    def _async(self, call: Callable[[], T]) -> "concurrent.futures.Future[T]":
        future: "concurrent.futures.Future[T]" = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        with self._cv:
            if self._handle is None:
                raise precondition("the kvtier.Client is closed")
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    ASYNC_WORKERS, thread_name_prefix="kvtier-client")
            executor = self._executor

        def run() -> None:
            try:
                result = call()
            except BaseException as e:  # noqa: BLE001 - handed to the future
                future.set_exception(e)
            else:
                future.set_result(result)

        executor.submit(run)
        return future

    # ---- the daemon --------------------------------------------------------------------------

    @property
    def server(self) -> ServerInfo:
        """What Hello returned at connect."""
        with self._call():
            return self._server

    def hello(self) -> ServerInfo:
        """Says Hello again (e.g. to see `draining` or a new incarnation)."""
        info = _capi.ServerInfoV2()
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_server_info_v2(h, 1, byref(info), byref(err)), err)
        return _server_info(info)

    def register_engine(self, model: str, layout: PageLayout, pools: Iterable[Pool], *,
                        codec: str = "", engine_name: str = "", tenant: str = "",
                        partition: str = "", codec_alignment_bytes: int = 0,
                        lease_ttl: float = 0.0) -> Engine:
        """Registers an engine; `pools` has one SharedMemoryPool, DevicePool or PoolRegistration
        per layout pool, kept alive by the returned Engine. codec '' is the daemon's default."""
        if not isinstance(layout, PageLayout):
            raise TypeError(f"layout must be a kvtier.PageLayout, got {type(layout).__name__}")
        regs = [to_registration(p) for p in pools]
        keep: List[Any] = []
        c_pools = (_capi.PoolRegistration * max(len(regs), 1))()
        for i, r in enumerate(regs):
            c_pools[i] = r.to_c(keep)
        o = _capi.EngineOptionsV2()
        strings = [_args.text_arg(v, n).encode() for v, n in (
            (model, "model"), (engine_name, "engine_name"), (tenant, "tenant"),
            (partition, "partition"), (codec, "codec"))]
        o.model, o.engine_name, o.tenant, o.partition, o.codec = strings
        o.layout = layout.handle
        o.pools = c_pools
        o.num_pools = len(regs)
        o.codec_alignment_bytes = _args.u32(codec_alignment_bytes, "codec_alignment_bytes")
        o.lease_ttl_ms = _args.millis(lease_ttl, "lease_ttl")
        engine_id = ctypes.create_string_buffer(_capi.ENGINE_ID_BYTES)
        root = (ctypes.c_uint8 * 32)()
        info = _capi.EngineInfo()
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_register_engine_v2(h, byref(o), engine_id, len(engine_id),
                                                       root, byref(info), byref(err)), err)
        return Engine(engine_id=_capi.text(engine_id.value), namespace_id=info.namespace_id,
                      hash_root=bytes(root), codec=_capi.text(info.codec),
                      hot_page_bytes=info.hot_page_bytes, cold_block_bytes=info.cold_block_bytes,
                      lease_ttl=info.lease_ttl_ms / 1000.0, incarnation_id=info.incarnation_id,
                      pools=tuple(regs))

    def unregister(self, engine: EngineRef) -> None:
        eid = _engine_id(engine)
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_unregister(h, eid, byref(err)), err)

    def keep_alive(self, engine: EngineRef) -> None:
        eid = _engine_id(engine)
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_keep_alive(h, eid, byref(err)), err)

    # ---- the cache ---------------------------------------------------------------------------

    def _lookup(self, eid: bytes, buf: Any, hash_len: int, count: int,
                pin_ms: int) -> LookupResult:
        hits = c_uint32(0)
        tiers = (c_int * max(count, 1))()
        expires = c_int64(0)
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_lookup_v2(h, eid, buf, hash_len, count, pin_ms, byref(hits),
                                              tiers, byref(expires), byref(err)), err)
        return LookupResult(hit_pages=hits.value, tiers=[Tier(tiers[i]) for i in range(hits.value)],
                            pin_expires_at=_seconds(expires.value))

    def lookup(self, engine: EngineRef, hashes: Sequence[bytes], *,
               pin_ttl: float = 0.0) -> LookupResult:
        """How many leading hashes are stored; pin_ttl > 0 pins the hits."""
        eid = _engine_id(engine)
        buf, hash_len, count = _args.hash_buffer(hashes)
        return self._lookup(eid, buf, hash_len, count, _args.millis(pin_ttl, "pin_ttl"))

    def lookup_async(self, engine: EngineRef, hashes: Sequence[bytes], *,
                     pin_ttl: float = 0.0) -> "concurrent.futures.Future[LookupResult]":
        eid = _engine_id(engine)
        buf, hash_len, count = _args.hash_buffer(hashes)
        pin_ms = _args.millis(pin_ttl, "pin_ttl")
        return self._async(lambda: self._lookup(eid, buf, hash_len, count, pin_ms))

    def _offload(self, eid: bytes, pages: Any, tokens: Any,
                 options: _capi.OffloadOptions) -> OffloadResult:
        buf, hash_len, count, indices = pages
        result = _capi.TransferResult()
        items = (_capi.Item * max(count, 1))()
        err = _capi.Error()
        with self._call() as h:
            if tokens is None:
                status = lib.kvtier_client_offload_v2(h, eid, buf, hash_len,
                                                      indices.as_pointer(c_uint32), count,
                                                      byref(options), byref(result), items,
                                                      byref(err))
            else:
                flat, counts = tokens
                status = lib.kvtier_client_offload_tokens(h, eid, buf, hash_len,
                                                          indices.as_pointer(c_uint32), count,
                                                          flat.as_pointer(c_uint32),
                                                          counts.as_pointer(c_uint32),
                                                          byref(options), byref(result), items,
                                                          byref(err))
            check(status, err)
        return OffloadResult(results=_items(items, count), stored_pages=result.pages,
                             hot_bytes_read=result.hot_bytes,
                             cold_bytes_written=result.cold_bytes)

    @staticmethod
    def _offload_options(durable: bool, priority: Priority,
                         ack: WriteAck) -> _capi.OffloadOptions:
        return _capi.OffloadOptions(int(bool(durable)), int(Priority(priority)),
                                    int(WriteAck(ack)))

    def offload(self, engine: EngineRef, hashes: Sequence[bytes], page_indices: IntArray, *,
                token_ids: Optional[Iterable[Optional[IntArray]]] = None,
                durable: bool = False, priority: Priority = Priority.default,
                ack: WriteAck = WriteAck.default) -> OffloadResult:
        """Stores page page_indices[i] under hashes[i].

        token_ids: one token sequence per page (a list, a NumPy array, or None for a page
        without; a 2-D array of pages x tokens works), at most the layout's tokens_per_page each
        (more: InvalidRequestError naming the item, and no page of the request is stored). A
        daemon with kv_events on publishes them in the blocks' BlockStored events
        (docs/KV_EVENTS.md); for pages hashed by BlockHasher.hash(tokens), page i's tokens are
        tokens[i * tokens_per_page:(i + 1) * tokens_per_page]."""
        pages = _pages(hashes, page_indices)
        return self._offload(_engine_id(engine), pages, _page_tokens(token_ids, pages[2]),
                             self._offload_options(durable, priority, ack))

    def offload_async(self, engine: EngineRef, hashes: Sequence[bytes], page_indices: IntArray, *,
                      token_ids: Optional[Iterable[Optional[IntArray]]] = None,
                      durable: bool = False, priority: Priority = Priority.default,
                      ack: WriteAck = WriteAck.default
                      ) -> "concurrent.futures.Future[OffloadResult]":
        eid, pages = _engine_id(engine), _pages(hashes, page_indices)
        tokens = _page_tokens(token_ids, pages[2])
        options = self._offload_options(durable, priority, ack)
        return self._async(lambda: self._offload(eid, pages, tokens, options))

    def _onboard(self, eid: bytes, pages: Any, continue_after_miss: bool) -> OnboardResult:
        buf, hash_len, count, indices = pages
        result = _capi.TransferResult()
        items = (_capi.Item * max(count, 1))()
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_onboard_v2(h, eid, buf, hash_len,
                                               indices.as_pointer(c_uint32), count,
                                               int(bool(continue_after_miss)), byref(result),
                                               items, byref(err)), err)
        return OnboardResult(results=_items(items, count), onboarded_pages=result.pages,
                             cold_bytes_read=result.cold_bytes,
                             hot_bytes_written=result.hot_bytes)

    def onboard(self, engine: EngineRef, hashes: Sequence[bytes], page_indices: IntArray, *,
                continue_after_miss: bool = False) -> OnboardResult:
        """Writes block hashes[i] into page page_indices[i]."""
        return self._onboard(_engine_id(engine), _pages(hashes, page_indices),
                             continue_after_miss)

    def onboard_async(self, engine: EngineRef, hashes: Sequence[bytes], page_indices: IntArray, *,
                      continue_after_miss: bool = False
                      ) -> "concurrent.futures.Future[OnboardResult]":
        eid, pages = _engine_id(engine), _pages(hashes, page_indices)
        return self._async(lambda: self._onboard(eid, pages, continue_after_miss))

    def pin(self, engine: EngineRef, hashes: Sequence[bytes], *, ttl: float = 0.0) -> PinResult:
        """Pins blocks (ttl 0: the daemon's default)."""
        eid = _engine_id(engine)
        buf, hash_len, count = _args.hash_buffer(hashes)
        ttl_ms = _args.millis(ttl, "ttl")
        items = (_capi.Item * max(count, 1))()
        expires = c_int64(0)
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_pin_v2(h, eid, buf, hash_len, count, ttl_ms, byref(expires),
                                           items, byref(err)), err)
        return PinResult(results=_items(items, count), expires_at=_seconds(expires.value))

    def unpin(self, engine: EngineRef, hashes: Sequence[bytes]) -> PinResult:
        eid = _engine_id(engine)
        buf, hash_len, count = _args.hash_buffer(hashes)
        items = (_capi.Item * max(count, 1))()
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_unpin_v2(h, eid, buf, hash_len, count, items, byref(err)),
                  err)
        return PinResult(results=_items(items, count))

    # ---- tool calls --------------------------------------------------------------------------

    def _park(self, eid: bytes, request_id: bytes, indices: Any, options: _capi.ParkOptions,
              user_data: Any) -> ParkResult:
        result = _capi.ParkResult()
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_park(h, eid, request_id, indices.as_pointer(c_uint32),
                                         indices.count, byref(options), byref(result),
                                         byref(err)), err)
        del user_data  # kept alive through the call
        return ParkResult(parked_pages=result.parked_pages, cold_bytes=result.cold_bytes,
                          expires_at=result.expires_at_unix_ms / 1000.0, tier=Tier(result.tier))

    def _park_args(self, engine: EngineRef, request_id: str, page_indices: IntArray, append: bool,
                   num_tokens: int, user_data: bytes, ttl: float, priority: Priority,
                   ack: WriteAck) -> Any:
        data = _args.bytes_arg(user_data, "user_data")
        buf = (ctypes.c_uint8 * max(len(data), 1)).from_buffer_copy(data.ljust(1, b"\0"))
        o = _capi.ParkOptions(int(bool(append)), _args.u64(num_tokens, "num_tokens"),
                              ctypes.cast(buf, POINTER(ctypes.c_uint8)), len(data),
                              _args.millis(ttl, "ttl"), int(Priority(priority)),
                              int(WriteAck(ack)))
        return (_engine_id(engine), _args.text_arg(request_id, "request_id").encode(),
                _args.u32_array(page_indices, "page_indices"), o, buf)

    def park(self, engine: EngineRef, request_id: str, page_indices: IntArray, *,
             append: bool = False, num_tokens: int = 0, user_data: bytes = b"", ttl: float = 0.0,
             priority: Priority = Priority.default,
             ack: WriteAck = WriteAck.default) -> ParkResult:
        """Parks a request's pages during a tool call."""
        return self._park(*self._park_args(engine, request_id, page_indices, append, num_tokens,
                                           user_data, ttl, priority, ack))

    def park_async(self, engine: EngineRef, request_id: str, page_indices: IntArray, *,
                   append: bool = False, num_tokens: int = 0, user_data: bytes = b"",
                   ttl: float = 0.0, priority: Priority = Priority.default,
                   ack: WriteAck = WriteAck.default) -> "concurrent.futures.Future[ParkResult]":
        args = self._park_args(engine, request_id, page_indices, append, num_tokens, user_data,
                               ttl, priority, ack)
        return self._async(lambda: self._park(*args))

    def _resume(self, eid: bytes, request_id: bytes, indices: Any, first_page: int,
                keep_parked: bool) -> ResumeResult:
        result = _capi.ResumeResult()
        data = c_void_p(None)
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_resume_v2(h, eid, request_id, indices.as_pointer(c_uint32),
                                              indices.count, first_page, int(bool(keep_parked)),
                                              byref(result), byref(data), byref(err)), err)
        user_data = b""
        if data.value:
            user_data = ctypes.string_at(data.value, result.user_data_len)
            lib.kvtier_free(data.value)
        return ResumeResult(resumed_pages=result.resumed_pages, parked_pages=result.parked_pages,
                            num_tokens=result.num_tokens, user_data=user_data,
                            released=bool(result.released))

    def _resume_args(self, engine: EngineRef, request_id: str, page_indices: IntArray,
                     first_page: int) -> Any:
        return (_engine_id(engine), _args.text_arg(request_id, "request_id").encode(),
                _args.u32_array(page_indices, "page_indices"), _args.u32(first_page, "first_page"))

    def resume(self, engine: EngineRef, request_id: str, page_indices: IntArray, *,
               first_page: int = 0, keep_parked: bool = False) -> ResumeResult:
        """Writes parked pages first_page.. into page_indices (the result has user_data)."""
        return self._resume(*self._resume_args(engine, request_id, page_indices, first_page),
                            keep_parked)

    def resume_async(self, engine: EngineRef, request_id: str, page_indices: IntArray, *,
                     first_page: int = 0, keep_parked: bool = False
                     ) -> "concurrent.futures.Future[ResumeResult]":
        args = self._resume_args(engine, request_id, page_indices, first_page)
        return self._async(lambda: self._resume(*args, keep_parked))

    def release(self, engine: EngineRef, request_ids: Sequence[str]) -> ReleaseResult:
        """Releases parked requests (ItemCode.ok or not_found per id)."""
        eid = _engine_id(engine)
        if isinstance(request_ids, str):
            raise TypeError("request_ids must be a sequence of str, not one str")
        ids = [_args.text_arg(r, "request_ids[]").encode() for r in request_ids]
        c_ids = (c_char_p * max(len(ids), 1))(*ids)
        items = (_capi.Item * max(len(ids), 1))()
        freed = c_uint64(0)
        err = _capi.Error()
        with self._call() as h:
            check(lib.kvtier_client_release_v2(h, eid, c_ids, len(ids), items, byref(freed),
                                               byref(err)), err)
        return ReleaseResult(results=_items(items, len(ids)), freed_bytes=freed.value)

    # ---- statistics and events ---------------------------------------------------------------

    def stats(self, *, include_namespaces: bool = False) -> Stats:
        capacity = 64 if include_namespaces else 0
        while True:
            s = _capi.Stats()
            namespaces = (_capi.NamespaceStats * max(capacity, 1))()
            total = c_size_t(0)
            err = _capi.Error()
            with self._call() as h:
                check(lib.kvtier_client_stats_v2(h, int(bool(include_namespaces)), byref(s),
                                                 namespaces, capacity, byref(total), byref(err)),
                      err)
            if total.value <= capacity:
                break
            capacity = total.value + 16  # more namespaces than room: ask again
        ns = [NamespaceStats(namespace_id=n.namespace_id, tenant=_capi.text(n.tenant),
                             model=_capi.text(n.model), partition=_capi.text(n.partition),
                             tiers=[_tier_stats(n.tiers[j]) for j in range(n.num_tiers)],
                             engines=n.engines, hits=n.hits, misses=n.misses,
                             parked_requests=n.parked_requests)
              for n in namespaces[:total.value]]
        return Stats(incarnation_id=s.incarnation_id, uptime=s.uptime_ms / 1000.0,
                     tiers=[_tier_stats(s.tiers[j]) for j in range(s.num_tiers)],
                     hot_bytes_offloaded=s.hot_bytes_offloaded,
                     cold_bytes_offloaded=s.cold_bytes_offloaded,
                     hot_bytes_onboarded=s.hot_bytes_onboarded,
                     cold_bytes_onboarded=s.cold_bytes_onboarded,
                     dropped_offloads=s.dropped_offloads, parked_requests=s.parked_requests,
                     registered_engines=s.registered_engines, draining=bool(s.draining),
                     namespaces=ns)

    def watch_events(self, on_event: Callable[[Event], Any],
                     on_done: Optional[Callable[[Optional[BaseException]], Any]] = None, *,
                     snapshot: bool = False, namespace_id: int = 0) -> EventWatch:
        """Follows the daemon's events: on_event(Event) for each, in order, then on_done(error or
        None) once, both on the watch's own thread. Returns an EventWatch."""
        if not callable(on_event):
            raise TypeError("on_event must be callable")
        watch = EventWatch(self, on_event, on_done, snapshot, namespace_id)
        self._watches.add(watch)
        return watch

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else self._server.server_version
        return f"Client({state})"
