// BlockStore: the storage engine inside kvtierd. It keeps hot pages in an optional GPU tier
// (GpuTier, daemon-owned device memory) and cold blocks in a host tier (HostArena) and a disk tier
// (DiskTier), indexes them in memory and durably in RocksDB (BlockIndex), moves them down
// (gpu -> host with the fused NVFP4 encode, host -> disk -> drop) on a background thread by LRU
// with watermarks (the Demoter, demoter.h), enforces per-namespace quotas, verifies every block
// it reads back, and rebuilds itself from the index at start. Every public method is thread-safe.
// See docs/ARCHITECTURE.md, "Storage engine".
#ifndef KVTIER_DAEMON_STORE_BLOCK_STORE_H_
#define KVTIER_DAEMON_STORE_BLOCK_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "codec/codec_spec.h"
#include "codec/page_layout.h"
#include "daemon/index/block_index.h"
#include "daemon/index/block_record.h"
#include "daemon/store/disk_tier.h"
#include "daemon/store/host_arena.h"
#include "daemon/store/store_events.h"
#include "daemon/store/store_stats.h"

namespace kvtier::store {

using index::BlockHash;
using index::BlockKey;
using index::NamespaceId;
using index::Tier;

// Which blocks the disk tier takes when they leave the host tier.
enum class DiskAdmission : uint8_t {
  kAll = 0,              // every block
  kReusedOrDurable = 1,  // blocks read at least once, or stored as durable; others are dropped
};

// A tier starts moving blocks down above high * capacity and stops below low * capacity.
struct Watermarks {
  double high = 0.95;
  double low = 0.85;
};

// The GPU tier: device memory the daemon owns, holding hot pages (PutHot) until the background
// thread encodes them into the host tier. Needs a CUDA build, a device, and a host tier pinned
// with CUDA. Volatile: a restart starts it empty.
struct GpuTierOptions {
  uint64_t capacity_bytes = 0;  // 0: no GPU tier
  int device = 0;
  uint64_t chunk_bytes = 64ull << 20;  // slot allocation unit; a hot page must fit in one
  Watermarks watermarks;
};

struct BlockStoreOptions {
  GpuTierOptions gpu;
  HostArenaOptions host;
  uint64_t host_chunk_bytes = 64ull << 20;
  Watermarks host_watermarks;
  DiskTierOptions disk;  // no directories: no disk tier
  Watermarks disk_watermarks;
  DiskAdmission admission = DiskAdmission::kAll;
  std::string index_path;  // RocksDB directory
  index::SyncPolicy sync = index::SyncPolicy::kBatch;
  // The index refuses writes while its drive has less than this free (durable puts then fail
  // with ResourceExhausted and nothing new goes to disk; see index::StateDrive), and keeps a
  // reserve of index_reserve_bytes preallocated beside it.
  uint64_t index_min_free_bytes = 256ull << 20;
  uint64_t index_reserve_bytes = 64ull << 20;
  // Opening an index of format 1 (32-bit namespace ids) migrates it, asking this function for the
  // new id of each namespace: its old id and the record given to PutNamespace. Null: ids kept.
  std::function<NamespaceId(NamespaceId legacy_id, absl::string_view record)> migrate_namespace_id;
  // Free bytes of the index's drive (tests); statvfs when empty.
  std::function<uint64_t()> index_free_bytes;
  uint32_t group_commit_interval_ms = 2;  // kBatch: unsynced index writes wait at most this long
  uint32_t demotion_batch = 64;           // blocks written to disk per background round
  uint32_t put_wait_ms = 2000;            // how long Put waits for host room before failing
  uint64_t max_block_bytes = 64ull << 20;
  // Milliseconds since the Unix epoch for last-access times; the system clock when empty.
  std::function<uint64_t()> now_ms;
  // Receives the store's events (store_events.h), recovery's included; not owned, must outlive
  // the store. Null: none are reported.
  StoreEventSink* events = nullptr;
};

struct PutOptions {
  std::optional<BlockHash> parent;  // the previous block of the chain, kept in the index
  bool durable = false;             // write through to disk now, whatever the admission rule says
  bool wait_durable = false;        // return once the block and its index entry are durable
  // The caller sealed the block itself just now (the data plane after a GPU encode): Commit checks
  // the header and its checksum but does not recompute the payload checksum. Disk reads still
  // verify everything.
  bool sealed_by_caller = false;
  // No events for this block, ever (parked pages, which are not prefix-indexed).
  bool silent = false;
  // Who stored it (an engine id), reported in the stored event. Read during the call only.
  absl::string_view origin;
};

// A tier with fewer chunks than this is logged as a warning at start: each chunk serves blocks of
// one size, so few chunks leave little room for blocks of several sizes.
inline constexpr uint64_t kMinTierChunks = 8;

// What Open() recovered from the index.
struct RecoveryReport {
  uint64_t disk_blocks = 0;
  uint64_t disk_bytes = 0;
  uint64_t host_blocks = 0;  // persistent host tier only
  uint64_t host_bytes = 0;
  uint64_t dropped_volatile = 0;  // host entries whose memory did not survive
  uint64_t dropped_invalid = 0;   // entries that pointed outside the tiers or overlapped
  double seconds = 0;             // all of Open()
  double index_open_seconds = 0;  // RocksDB open (WAL replay)
  double tiers_open_seconds = 0;  // host arena (pinning) and disk files
  double scan_seconds = 0;        // reading the records and rebuilding memory
  std::string ToString() const;
};

class BlockStore;

// A block's bytes in host memory, readable until the handle is destroyed: a host-tier block
// cannot be moved or freed while pinned; a block read from disk lives in a staging slot owned by
// the handle. AcquireHot's handle holds a GPU-tier page instead: bytes() is then the hot page in
// device memory (served_from() kGpu). Move-only. Must be destroyed before its store.
class PinnedBlock {
 public:
  PinnedBlock(PinnedBlock&& other) noexcept;
  PinnedBlock& operator=(PinnedBlock&& other) noexcept;
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  ~PinnedBlock();

  absl::Span<const uint8_t> bytes() const { return bytes_; }
  Tier served_from() const { return served_from_; }

 private:
  friend class BlockStore;
  PinnedBlock() = default;
  void Release();

  BlockStore* store_ = nullptr;
  void* entry_ = nullptr;                   // pinned entry (host hit), or nullptr
  std::optional<uint64_t> staging_offset_;  // host slot holding a disk read, or nullopt
  uint64_t staging_size_ = 0;
  absl::Span<const uint8_t> bytes_;
  Tier served_from_ = Tier::kHost;
};

// A slot reserved in one tier for a block that the caller writes in place, then hands to
// Commit(): a host slot for a cold block (Reserve; the data plane encodes straight into it), or a
// GPU-tier slot for a hot page (ReserveHot; bytes() is then device memory on the GPU tier's
// device, which the data plane copies the engine's page into). Destroying it uncommitted frees
// the slot. Move-only.
class Reservation {
 public:
  Reservation(Reservation&& other) noexcept;
  Reservation& operator=(Reservation&& other) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation();

  absl::Span<uint8_t> bytes() const { return bytes_; }
  const BlockKey& key() const { return key_; }
  Tier tier() const { return tier_; }

 private:
  friend class BlockStore;
  Reservation() = default;

  BlockStore* store_ = nullptr;
  void* entry_ = nullptr;
  BlockKey key_;
  absl::Span<uint8_t> bytes_;
  Tier tier_ = Tier::kHost;
};

// Why one class with about 30 public methods (the house limit is ~15): every method is an
// operation on the same set of blocks, under the same lock (State::mu) and the same entry
// lifecycle (EntryState), and the groups share their internals: the hot-page calls (SetHotLayout,
// ReserveHot, PutHot, AcquireHot, ReadHot) publish and read through the same Reservation,
// InsertWriting/Publish and pins as Reserve/Commit and Acquire, and the admin calls
// (ClearNamespace, UsageOf, Evict, Verify, Snapshot) walk the same map and LRU lists. A separate
// facade for a group would need the same State and friendship, so it would split the API, not a
// concern. The concerns that do stand alone are classes behind it: the tier stack (StorageTier),
// NamespaceTable, Scrubber (Verify), Demoter (the background thread). Callers (the service, the
// admin service, the data plane) hold one store. For the same reason block_store.cc (Open, Reserve,
// Commit and the publish path, about 800 lines) is one file: what is left in it is that one write
// path (the hot-page calls are block_store_hot.cc).
class BlockStore {
 public:
  // Opens the index, the host arena and the disk files, rebuilds the in-memory state from the
  // index (dropping host entries whose arena did not survive) and starts the background thread.
  // Errors of the parts (HostArena::Create, DiskTier::Create, OpenRocksDbBlockIndex) pass through;
  // InvalidArgument for inconsistent options (watermarks, sizes). Blocks for the recovery.
  static absl::StatusOr<std::unique_ptr<BlockStore>> Open(const BlockStoreOptions& options);

  // Stops the background thread after its current round (committing queued index changes) and
  // syncs the index (unless the index cannot take writes: see BlockIndex). REQUIRES: no other
  // thread is inside a method of the store, and no PinnedBlock or Reservation outlives it.
  ~BlockStore();

  const RecoveryReport& recovery() const { return recovery_; }

  // Namespaces: an opaque record (the service's description) and a quota in bytes (0: none),
  // persisted in the index. Blocks of an unregistered namespace have no quota. While the index
  // takes no writes (its drive is full) the namespace is registered in memory and its record
  // written once the index takes writes again; other index errors are returned.
  absl::Status PutNamespace(NamespaceId id, absl::string_view record, uint64_t quota_bytes);
  // Removes every block of the namespace (not its record); silent blocks (parked pages) only when
  // `include_silent`. Returns how many were removed and the bytes of their copies (slot bytes in
  // each tier holding one; GPU tier: hot page bytes).
  struct ClearReport {
    uint64_t blocks = 0;
    uint64_t bytes = 0;
  };
  absl::StatusOr<ClearReport> ClearNamespace(NamespaceId id, bool include_silent = true);
  // Every registered namespace: id -> (record, quota).
  std::vector<std::pair<NamespaceId, std::pair<std::string, uint64_t>>> Namespaces() const;
  // What one namespace holds and how it was read.
  struct NamespaceUsage {
    uint64_t blocks[index::kTierCount] = {};  // copies in each tier, by index::Tier
    uint64_t bytes[index::kTierCount] = {};   // their slot bytes (GPU tier: hot page bytes)
    uint64_t hits = 0;                        // reads served from any tier
    uint64_t misses = 0;                      // reads of blocks it does not hold
    uint64_t last_access_ms = 0;              // last store or read (ms since the epoch); 0: never
  };
  // Usage of namespace `id` (zeros for one the store does not know). Walks the namespace's
  // blocks under the store's lock, O(its blocks): meant for admin statistics, not a hot path.
  NamespaceUsage UsageOf(NamespaceId id) const;

  // Stores a copy of `block` (a complete cold block; it is verified) under `key`. A key that is
  // already stored keeps its bytes (block hashes name contents); a durable put of it makes that
  // block durable. Returns
  //   InvalidArgument    empty or oversized block, or one that fails verification (the message
  //                      says why: a cold block's header and checksums are checked);
  //   ResourceExhausted  the namespace's quota or the host tier cannot make room within
  //                      put_wait_ms (everything else pinned or in motion);
  //   Unavailable        the store is shutting down;
  //   the disk or index error when wait_durable was asked and the write-through failed; while
  //   the index takes no writes (a full drive, a lost directory: BlockIndex::Health) a put with
  //   wait_durable returns its status at once and stores nothing (one that was waiting when the
  //   index stopped taking writes returns it too, its block stored but not durable); a durable
  //   put without wait_durable reaches disk once the index takes writes again.
  // Blocks on the memcpy, on room, and with wait_durable on the disk write and index sync.
  absl::Status Put(const BlockKey& key, absl::Span<const uint8_t> block,
                   const PutOptions& options = {});

  // The zero-copy form of Put: reserves a host slot of `size` bytes for `key`, invisible to
  // lookups until Commit(). AlreadyExists when the key is stored or being stored; other errors
  // as Put.
  absl::StatusOr<Reservation> Reserve(const BlockKey& key, uint64_t size);
  absl::Status Commit(Reservation reservation, const PutOptions& options = {});

  // Makes a block that is stored (or being stored: waits for its commit) durable, as a durable
  // Put of it would: queued for write-through, and with `wait` returned once it is on disk and
  // indexed. False when the key is not stored. FailedPrecondition without a disk tier;
  // Unavailable while shutting down; with `wait`, the disk or index error of the write-through
  // (or the index's refusal while it takes no writes). Blocks on the store's lock, with `wait`
  // on the disk write and the index sync.
  absl::StatusOr<bool> MakeDurable(const BlockKey& key, bool wait);

  // ---- GPU tier (hot pages) ----

  // Sets the layout and codec of the hot pages of namespace `ns`, which the hot-page calls use;
  // pages already stored keep the layout they were stored with, and setting the layout the
  // namespace has already is a no-op. Does not need a GPU tier (ReadHot decodes host and disk
  // blocks without one) but needs CUDA:
  //   Unimplemented    built without CUDA, or a codec the GPU kernels lack (they do nvfp4,
  //                    nvfp4+rope and nvfp4x2; not raw);
  //   InvalidArgument  the layout and codec make no valid block plan, or its block or page
  //                    does not fit the store's slots (max_block_bytes, gpu.chunk_bytes).
  absl::Status SetHotLayout(NamespaceId ns, const codec::PageLayout& layout,
                            const codec::CodecSpec& spec);

  // The GPU tier's device, or nullopt when the store has no GPU tier. The hot-page calls take
  // device memory on this device (the data plane uses them for engines on it only).
  std::optional<int> GpuTierDevice() const;

  // Reserves a GPU-tier slot for the hot page of `key`, which the caller copies into the
  // reservation's bytes() (device memory, codec::FlatPageBytes of the namespace's hot layout)
  // and hands to Commit(), which publishes it as a GPU-tier page: it stays there, lossless,
  // until the background thread demotes it (encoded with the fused kernel straight into a host
  // slot, where it becomes an ordinary cold block). `layout_fingerprint` is the layout the
  // caller's page is in. Never waits for room:
  //   AlreadyExists       the key is stored or being stored;
  //   FailedPrecondition  no GPU tier, no hot layout for the namespace, or another one;
  //   ResourceExhausted   the namespace's quota, or the GPU tier has no free slot now (the
  //                       caller takes another path; the background thread is woken to make
  //                       room);
  //   Unavailable         shutting down.
  // Commit of such a reservation: InvalidArgument for options.durable (a hot page is volatile:
  // store its cold block instead), Unavailable when shutting down; it checks no header (a hot
  // page has none).
  absl::StatusOr<Reservation> ReserveHot(const BlockKey& key, uint64_t layout_fingerprint);

  // Copies the hot page at `device_page` into the GPU tier under `key`: ReserveHot (waiting up
  // to put_wait_ms for room), a copy on the calling thread's stream of the tier's device, Commit.
  // A key already stored keeps its bytes (OK). Errors as ReserveHot and Commit (ResourceExhausted
  // once put_wait_ms has passed without room), InvalidArgument for a null page, Internal with
  // the CUDA error when the copy fails. Blocks until the copy is done.
  absl::Status PutHot(const BlockKey& key, const void* device_page, const PutOptions& options = {});

  // The block's GPU-tier page, pinned (no demotion or removal) until the handle is destroyed:
  // bytes() is the hot page in device memory on GpuTierDevice(), for a device-to-device copy.
  // nullopt when the block is not in the GPU tier or its page is in another layout than
  // `layout_fingerprint` (the caller reads the cold block instead, Acquire). Counts a GPU-tier
  // hit and touches the block as Acquire does. Never blocks on I/O.
  absl::StatusOr<std::optional<PinnedBlock>> AcquireHot(const BlockKey& key,
                                                        uint64_t layout_fingerprint);

  // Writes the block's hot page into `device_dst` (device memory, FlatPageBytes of the
  // namespace's hot layout): a GPU-tier hit is copied as stored (lossless); a host or disk block
  // is verified as Acquire does and decoded by the fused kernel. Returns the tier it came from,
  // or nullopt on a miss. DataLoss, as Acquire, for a block that failed verification (removed);
  // FailedPrecondition without a hot layout for the namespace, or when the block was stored under
  // another layout or the host tier is not pinned with CUDA. Enqueued on `stream` (nullptr: the
  // calling thread's stream) and waited for.
  absl::StatusOr<std::optional<Tier>> ReadHot(const BlockKey& key, void* device_dst,
                                              void* stream = nullptr);

  // How many leading blocks of `chain` (hashes in `ns`, in prefix order) are stored; fills
  // `tiers` (when non-null) with the tier of each hit. Never blocks on I/O.
  size_t LookupChain(NamespaceId ns, absl::Span<const BlockHash> chain,
                     std::vector<Tier>* tiers = nullptr) const;

  // The block's bytes, pinned in host memory: nullopt on a miss. A GPU-tier page is encoded into
  // a staging host slot (served_from() says kGpu). A block read from disk, and a host copy that
  // survived a restart on its first read, is verified (header, payload checksum, and the checksum
  // recorded at store time); one that fails is removed, counted (checksum_failures of its tier, or
  // io_errors when the disk read itself failed) and never returned: that read is DataLoss naming
  // the block (hash and namespace) and what failed, and later reads of it are misses. Unavailable
  // when there is no host memory to stage a disk read. Blocks on the disk read.
  absl::StatusOr<std::optional<PinnedBlock>> Acquire(const BlockKey& key);

  // Acquire for a copy the daemon makes for itself (the cluster tier's write-behind): the same
  // bytes, pin and verification, but not a read: no LRU touch, reuse flag, hit or miss counted.
  // A block that fails verification is removed (counted) and is nullopt here.
  absl::StatusOr<std::optional<PinnedBlock>> AcquireUncounted(const BlockKey& key);

  // Holds the block in its tier (no demotion, eviction or removal of its copies) until the
  // returned handle is destroyed, without reading it: the handle's bytes() are empty. nullopt on
  // a miss. Does not count as a read. Never blocks on I/O.
  absl::StatusOr<std::optional<PinnedBlock>> Hold(const BlockKey& key);

  // Copies the block into `dst` (at least its size). Returns the block size, or nullopt on a
  // miss; InvalidArgument when dst is too small; DataLoss and Unavailable as Acquire. Blocks as
  // Acquire.
  absl::StatusOr<std::optional<uint64_t>> Read(const BlockKey& key, absl::Span<uint8_t> dst);

  // Removes the block from every tier (after its readers are done). True when it existed.
  // `why` is what the removal event reports.
  absl::StatusOr<bool> Remove(const BlockKey& key, RemovedBy why = RemovedBy::kRemoved);

  // Takes blocks out of a tier, least recently used first, or the named ones (admin Evict).
  // Without a tier they leave the cache. With one, `drop` false moves them down the usual path
  // (gpu -> host -> disk; the disk tier, or a host tier without disk, is the last and drops) and
  // `drop` true drops that tier's copy (the block leaves the cache when it was the only one).
  // Pinned blocks, blocks being read and blocks in motion are skipped. Demotions that need a
  // write (a host block without a disk copy, a GPU page) are queued for the background thread
  // and counted as demoted at once. InvalidArgument unless exactly one amount is given, there
  // is a namespace, and hashes come with exactly one namespace. Never blocks on I/O.
  struct EvictRequest {
    std::vector<NamespaceId> namespaces;
    std::optional<Tier> tier;  // nullopt: the whole cache
    uint64_t max_blocks = 0;
    uint64_t max_bytes = 0;
    std::vector<BlockHash> hashes;
    bool drop = false;
    bool keep_silent = false;  // leave silent blocks (parked pages) alone (not with hashes)
  };
  struct EvictReport {
    uint64_t evicted_blocks = 0;
    uint64_t evicted_bytes = 0;  // slot bytes of the evicted blocks
    uint64_t demoted_blocks = 0;
    uint64_t skipped_busy = 0;
    // With hashes, one per hash: OK, NotFound (not stored, or not in the tier),
    // FailedPrecondition (pinned, being read or in motion).
    std::vector<absl::Status> results;
  };
  absl::StatusOr<EvictReport> Evict(const EvictRequest& request);

  // Every visible block (GPU-tier pages included, silent ones excluded) of the namespaces in
  // `namespaces` (every namespace when empty), with the fastest tier holding it. Taken under one
  // lock with StoreEventSink::Barrier, whose position is stored in `event_position` (0 without a
  // sink): the snapshot reflects exactly the events up to it. Never blocks on I/O.
  struct BlockSummary {
    NamespaceId ns = 0;
    BlockHash hash{};
    Tier tier = Tier::kHost;
    uint64_t bytes = 0;  // cold-block size
    bool durable = false;
  };
  std::vector<BlockSummary> Snapshot(absl::Span<const NamespaceId> namespaces,
                                     uint64_t* event_position) const;

  // Waits until the background thread has nothing to do and every index write is durable
  // (per the sync policy). The index's refusal (ResourceExhausted, FailedPrecondition) when it
  // takes no writes and changes are queued; the commit's error when one failed. Blocks.
  absl::Status Flush();

  // Moves every GPU-tier page to the host tier and every host block that the disk admits down to
  // disk now, freeing the host copies (counted as evictions); then Flush. Blocks.
  absl::Status DemoteAll();

  // Gives every host block that the disk admits (DiskAdmission) and that has no disk copy one,
  // keeping its host copy, so that the blocks survive a restart while reads keep coming from host
  // memory (kvtierctl drain --flush-to-disk). GPU-tier pages are first encoded into the host tier
  // (they leave the GPU tier, as under pressure). Blocks are written least recently used first;
  // when the disk tier cannot hold them all, its own least recently used blocks make room as
  // usual, so the most recently used end up on disk. Counts no eviction of its own (only what
  // making room on disk evicts); StoreStats::blocks_written_to_disk counts the writes. Then
  // Flush. Blocks until done; Unavailable when the store stops meanwhile.
  absl::Status FlushToDisk();

  // Reads back and verifies stored blocks (kvtierctl verify): host copies in place, disk copies
  // through the disk tier (GPU-tier pages have no stored block yet and are skipped), each against
  // its header, payload checksum and the checksum recorded at store time. Blocks that fail are
  // removed and counted as a read would (unless report_only). Does not change LRU order or reuse
  // flags. Unavailable when a disk read finds no host memory to stage in. Blocks for the scan.
  struct VerifyOptions {
    std::vector<NamespaceId> namespaces;  // empty: every namespace
    std::optional<Tier> tier;             // kHost or kDisk; nullopt: both copies of each block
    bool report_only = false;             // keep failed blocks
    uint64_t max_blocks = 0;              // 0: all
    uint32_t max_reported = 100;          // most entries in VerifyReport::failures
  };
  struct VerifyReport {
    uint64_t blocks = 0;  // blocks checked
    uint64_t bytes = 0;
    uint64_t failed = 0;   // header or checksum mismatch
    uint64_t missing = 0;  // could not be read (I/O error)
    uint64_t removed = 0;  // of failed + missing (0 with report_only)
    bool complete = true;  // false when max_blocks stopped the scan
    double seconds = 0;
    struct Failure {
      BlockKey key;
      Tier tier = Tier::kHost;
      std::string message;
    };
    std::vector<Failure> failures;  // the first max_reported
  };
  absl::StatusOr<VerifyReport> Verify(const VerifyOptions& options);
  absl::StatusOr<VerifyReport> Verify();  // every block, both copies, removing what fails

  StoreStats Stats() const;

  // True when the host tier is pinned with CUDA and mapped, so kernels may read and write host
  // slots (Reserve's bytes, Acquire's bytes) at their host addresses.
  bool HostTierDeviceAccessible() const;

  // Implementation types (block_store_internal.h); not part of the API.
  struct Entry;
  struct State;

 private:
  friend class PinnedBlock;
  friend class Reservation;

  explicit BlockStore(const BlockStoreOptions& options);
  absl::Status Recover();
  void Unpin(void* entry, std::optional<uint64_t> staging_offset, uint64_t staging_size);
  void AbortReservation(void* entry);
  // ReserveHot, waiting up to `wait_ms` for GPU room (PutHot) or not at all (ReserveHot).
  absl::StatusOr<Reservation> ReserveHotWaiting(const BlockKey& key, uint64_t layout_fingerprint,
                                                uint32_t wait_ms);
  // Commit of a GPU-tier reservation (Commit dispatches on the reservation's tier).
  absl::Status CommitHot(Reservation reservation, const PutOptions& options);
  // Evicts blocks of namespace `id` until a block of `slot_size` fits its quota.
  // ResourceExhausted (counted) when it cannot. REQUIRES: state_->mu held.
  absl::Status MakeNamespaceRoom(NamespaceId id, uint64_t size, uint64_t slot_size);
  // How AcquireImpl reads: `touch` counts a read (LRU, reuse, counters); `verify_host` checks a
  // host copy's checksum; `force_disk` reads the disk copy even when a host copy exists;
  // `keep_corrupt` leaves a block that fails in place; `failure` receives why it failed and
  // `io_error` whether the read itself failed. A block that fails is nullopt here (Acquire and
  // Verify make of it what their callers need).
  struct ReadMode {
    bool touch = true;
    bool verify_host = false;
    bool force_disk = false;
    bool keep_corrupt = false;
    std::string* failure = nullptr;
    bool* io_error = nullptr;
  };
  absl::StatusOr<std::optional<PinnedBlock>> AcquireImpl(const BlockKey& key, const ReadMode& mode);

  BlockStoreOptions options_;
  RecoveryReport recovery_;
  std::unique_ptr<State> state_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_BLOCK_STORE_H_
