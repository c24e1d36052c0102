#include "daemon/cluster/rados_object_store.h"

#include <rados/librados.h>
#include <rados/librados.hpp>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "codec/cold_block.h"
#include "common/coding.h"
#include "common/errno_text.h"

namespace kvtier::cluster {
namespace {

// A block's xattrs (docs/CLUSTER.md). Each one a write sets costs the OSD work on every write
// (about 5% of a one-object write each on a memstore OSD), so a write sets one:
// the block's identity, 40 bytes: the namespace id (8, big-endian) and the hash (32), which
// every read compares; then what the writer records: codec (4), layout fingerprint (8), payload
// checksum (4), created (8, microseconds since the epoch), all big-endian, then the writer
// node's name. Objects of earlier versions hold the identity alone (and kvtier.meta beside it).
constexpr char kXattrId[] = "kvtier.id";
constexpr size_t kIdBytes = 40;
// The last use, 8 bytes big-endian microseconds: set by Touch (a node fetched the block, or found
// it stored when it wrote behind); absent until then, when the object's mtime stands in.
constexpr char kXattrRead[] = "kvtier.read";
constexpr char kLeaseObject[] = "kvtier.evict-lease";
// Writes to a full pool (its quota, or full OSDs) fail with EDQUOT or ENOSPC at once instead of
// waiting in the client until the pool has room, which librados does by default: a full pool is
// a ResourceExhausted, not a hang. Removals, which make room, go through even then.
constexpr int kWriteFlags = LIBRADOS_OPERATION_FULL_TRY;
constexpr char kLeaseName[] = "evict";

std::string Hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

std::string Be64(uint64_t v) {
  std::string s(8, '\0');
  EncodeBigEndian64(s.data(), v);
  return s;
}

std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToDoubleSeconds(d)); }

// The completions of a batch of aio operations (Exists), counted by their callbacks, so that the
// caller sleeps until the last one or its deadline (not in polling steps). Outlives every callback:
// the caller waits for each completion and its callback (rados_aio_wait_for_complete_and_cb) before
// it goes.
class BatchCompletions {
 public:
  // A completion whose callback counts it.
  rados_completion_t Create() {
    rados_completion_t c = nullptr;
    rados_aio_create_completion2(this, &BatchCompletions::Done, &c);
    return c;
  }
  // True when `n` completed by `deadline`.
  bool WaitAll(size_t n, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    target_ = n;
    return mu_.AwaitWithDeadline(absl::Condition(this, &BatchCompletions::Reached), deadline);
  }

 private:
  static void Done(rados_completion_t, void* self) {
    auto* b = static_cast<BatchCompletions*>(self);
    absl::MutexLock lock(&b->mu_);
    ++b->done_;
  }
  bool Reached() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= target_; }

  absl::Mutex mu_;
  size_t done_ ABSL_GUARDED_BY(mu_) = 0;
  size_t target_ ABSL_GUARDED_BY(mu_) = 0;
};

// kvtier.id of a block: its namespace id and hash.
std::string IdXattr(const BlockKey& key) {
  return absl::StrCat(
      Be64(key.ns),
      absl::string_view(reinterpret_cast<const char*>(key.hash.data()), key.hash.size()));
}

// True when an object's kvtier.id names the block `want` (IdXattr) names: its first 40 bytes.
bool IdMatches(const ceph::bufferlist& id, const std::string& want) {
  if (id.length() < kIdBytes || want.size() != kIdBytes) return false;
  char got[kIdBytes];
  id.begin().copy(kIdBytes, got);
  return std::memcmp(got, want.data(), kIdBytes) == 0;
}

// The compound op of a Put: exclusive create + write_full + the block's one xattr (copied into
// the op); the block is `data`, whose buffers the op shares.
void FillPutOp(librados::ObjectWriteOperation& op, const BlockKey& key,
               const ceph::bufferlist& data, const BlockAttrs& attrs) {
  char codec[4], sum[4];
  EncodeBigEndian32(codec, attrs.codec);
  EncodeBigEndian32(sum, attrs.payload_checksum);
  ceph::bufferlist id;
  id.append(absl::StrCat(IdXattr(key), absl::string_view(codec, 4), Be64(attrs.layout_fingerprint),
                         absl::string_view(sum, 4),
                         Be64(static_cast<uint64_t>(attrs.created_unix_micros)),
                         attrs.writer_node));
  op.create(/*exclusive=*/true);
  op.write_full(data);
  op.setxattr(kXattrId, id);
}

// A block as an op's data, without a copy: a static buffer over the caller's bytes (librados
// only reads it). librados may still hold it after the op's completion (a message still queued
// to an OSD when the op timed out), so the writer waits for WaitReleased() before it lets the
// caller's bytes go.
class BlockData {
 public:
  explicit BlockData(absl::Span<const uint8_t> bytes)
      : ptr_(ceph::buffer::create_static(
            static_cast<unsigned>(bytes.size()),
            const_cast<char*>(reinterpret_cast<const char*>(bytes.data())))) {
    list_.push_back(ptr_);
  }
  const ceph::bufferlist& list() const { return list_; }
  // Drops this one's own list, then waits until no one but this holds the buffer; false when
  // `deadline` passed first.
  bool WaitReleased(absl::Time deadline) {
    list_.clear();
    while (ptr_.raw_nref() > 1) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Microseconds(20));
    }
    return true;
  }

 private:
  ceph::buffer::ptr ptr_;
  ceph::bufferlist list_;
};

// Waits until librados lets `data` go, at most `wait`; past that counts it (the caller's bytes
// may then reach an OSD changed, which reads reject: such an object fails verification).
void ReleaseBlock(BlockData& data, absl::Duration wait, ClusterCounters& counters) {
  if (!data.WaitReleased(absl::Now() + wait)) counters.writes_unreleased.fetch_add(1);
}

// The reads of one GetWindowed: a fixed set of slots, each holding one read's op, its output
// buffers and its completion. A slot's completion callback (on librados' finisher thread)
// uncounts the read from the store's gauge and queues the slot for the calling thread, which
// sleeps until a slot is queued or its deadline (not in polling steps). A queued slot's read is
// complete (librados sets the result before it runs the callback, and holds a reference to the
// completion until the callback returns), so the caller takes it back at once, without waiting
// for the callback to return: that wait would often cost a second sleep and wake-up per read on
// a busy machine. Outlives every callback: its destructor waits until each callback made its
// last access to it.
class ReadWindow {
 public:
  struct Slot {
    ReadWindow* window = nullptr;
    size_t index = 0;  // of the key in the call's keys
    std::string name;
    std::string want_id;        // the identity asked for (IdXattr)
    ceph::bufferlist id, data;  // the object's kvtier.id and bytes
    int id_rval = 0, read_rval = 0;
    std::optional<librados::ObjectReadOperation> op;
    librados::AioCompletion* c = nullptr;  // set while a read of this slot is in flight
    // Lets the last read's op and buffers go (the result, if any, was moved out of `data`).
    void Clear() {
      op.reset();
      want_id.clear();
      id.clear();
      data.clear();
      id_rval = read_rval = 0;
    }
  };

  ReadWindow(size_t depth, ClusterCounters& counters) : slots_(depth), counters_(counters) {
    for (Slot& s : slots_) s.window = this;
  }
  // REQUIRES: every submitted read completed (its slot was queued, or its completion waited for).
  ~ReadWindow() {
    // What is left of a callback after it queued its slot is a few instructions.
    while (callbacks_returned_.load(std::memory_order_acquire) < submitted_) {
      std::this_thread::yield();
    }
  }
  ReadWindow(const ReadWindow&) = delete;
  ReadWindow& operator=(const ReadWindow&) = delete;
  Slot& slot(size_t i) { return slots_[i]; }

  // Counts a read about to be submitted in the store's gauge (and its peak). Before the submission,
  // so that the completion callback's uncounting always follows it.
  void CountSubmitted() {
    ++submitted_;
    const uint64_t now = counters_.reads_in_flight.fetch_add(1) + 1;
    uint64_t peak = counters_.reads_in_flight_peak.load();
    while (now > peak && !counters_.reads_in_flight_peak.compare_exchange_weak(peak, now)) {
    }
  }
  // A read counted by CountSubmitted that librados refused (no completion will come).
  void CountUnsubmitted() {
    --submitted_;
    counters_.reads_in_flight.fetch_sub(1);
  }

  // The completion callback of a slot's read; `arg` is the slot.
  static void Done(rados_completion_t, void* arg) {
    Slot* s = static_cast<Slot*>(arg);
    ReadWindow* w = s->window;
    w->counters_.reads_in_flight.fetch_sub(1);
    {
      absl::MutexLock lock(&w->mu_);
      w->answered_.push_back(s);
    }
    w->callbacks_returned_.fetch_add(1, std::memory_order_release);  // the last access
  }

  // The next slot whose read answered, in the order they answered; null when `deadline` passed
  // before one did.
  Slot* NextAnswered(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithDeadline(absl::Condition(this, &ReadWindow::HasAnswer), deadline)) {
      return nullptr;
    }
    Slot* s = answered_.front();
    answered_.pop_front();
    return s;
  }

 private:
  bool HasAnswer() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !answered_.empty(); }

  std::vector<Slot> slots_;
  ClusterCounters& counters_;
  absl::Mutex mu_;
  std::deque<Slot*> answered_ ABSL_GUARDED_BY(mu_);
  uint64_t submitted_ = 0;  // the calling thread's
  std::atomic<uint64_t> callbacks_returned_{0};
};

}  // namespace

std::string ObjectName(const BlockKey& key) {
  const std::string ns = Be64(key.ns);
  return absl::StrCat(Hex(reinterpret_cast<const uint8_t*>(ns.data()), 8), ".",
                      Hex(key.hash.data(), key.hash.size()));
}

std::optional<BlockKey> ParseObjectName(absl::string_view name) {
  if (name.size() != 81 || name[16] != '.') return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  BlockKey key;
  for (int i = 0; i < 16; ++i) {
    const int v = nibble(name[i]);
    if (v < 0) return std::nullopt;
    key.ns = (key.ns << 4) | static_cast<uint64_t>(v);
  }
  for (size_t i = 0; i < key.hash.size(); ++i) {
    const int hi = nibble(name[17 + 2 * i]), lo = nibble(name[18 + 2 * i]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key.hash[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return key;
}

struct RadosObjectStore::Handles {
  rados_t cluster = nullptr;
  rados_ioctx_t io = nullptr;
  ~Handles() {
    if (io != nullptr) rados_ioctx_destroy(io);
    if (cluster != nullptr) rados_shutdown(cluster);
  }
};

RadosObjectStore::RadosObjectStore(std::unique_ptr<Handles> h, ClusterOptions options)
    : h_(std::move(h)), options_(std::move(options)) {}

RadosObjectStore::~RadosObjectStore() = default;

absl::Status RadosObjectStore::Error(int r, const std::string& what) {
  const int e = r < 0 ? -r : r;
  const std::string msg = absl::StrCat(what, ": ", ErrnoText(e));
  if (e == ETIMEDOUT) {
    counters_.timeouts.fetch_add(1);
    return absl::DeadlineExceededError(msg);
  }
  counters_.errors.fetch_add(1);
  switch (e) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EDQUOT:
    case ENOSPC:
      return absl::ResourceExhaustedError(msg);
    case EBUSY:
      return absl::FailedPreconditionError(msg);
    case ENOTCONN:
    case ECONNREFUSED:
    case ESHUTDOWN:
      return absl::UnavailableError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<std::unique_ptr<RadosObjectStore>> RadosObjectStore::Connect(
    const ClusterOptions& o) {
  auto h = std::make_unique<Handles>();
  int r = rados_create(&h->cluster, o.client_id.c_str());
  if (r < 0) return absl::InternalError(absl::StrCat("rados_create: ", ErrnoText(-r)));
  if (!o.conf_path.empty() && (r = rados_conf_read_file(h->cluster, o.conf_path.c_str())) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rados_conf_read_file ", o.conf_path, ": ", ErrnoText(-r)));
  }
  const std::vector<std::pair<const char*, std::string>> settings = {
      {"keyring", o.keyring},
      {"rados_osd_op_timeout", Seconds(o.osd_op_timeout)},
      {"rados_mon_op_timeout", Seconds(o.mon_op_timeout)},
      {"client_mount_timeout", Seconds(o.mount_timeout)},
      {"objecter_timeout", Seconds(o.objecter_timeout)},
      {"log_to_stderr", "false"},
      {"err_to_stderr", "false"},
  };
  for (const auto& [k, v] : settings) {
    if (v.empty()) continue;
    if ((r = rados_conf_set(h->cluster, k, v.c_str())) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rados_conf_set ", k, "=", v, ": ", ErrnoText(-r)));
    }
  }
  if (!o.mon_host.empty() && (r = rados_conf_set(h->cluster, "mon_host", o.mon_host.c_str())) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("mon_host: ", ErrnoText(-r)));
  }
  if ((r = rados_connect(h->cluster)) < 0) {
    return absl::UnavailableError(absl::StrFormat("rados_connect as client.%s: %s (errno %d)",
                                                  o.client_id, ErrnoText(-r), -r));
  }
  if ((r = rados_ioctx_create(h->cluster, o.pool.c_str(), &h->io)) < 0) {
    h->io = nullptr;
    return r == -ENOENT ? absl::NotFoundError(absl::StrCat("pool ", o.pool, " does not exist"))
                        : absl::UnavailableError(
                              absl::StrCat("rados_ioctx_create ", o.pool, ": ", ErrnoText(-r)));
  }
  return std::unique_ptr<RadosObjectStore>(new RadosObjectStore(std::move(h), o));
}

absl::Status RadosObjectStore::Put(const std::string& rados_ns, const BlockKey& key,
                                   absl::Span<const uint8_t> block, const BlockAttrs& attrs) {
  const std::string name = ObjectName(key);
  // A block that does not verify is never stored: readers rely on every object being whole.
  if (absl::StatusOr<uint32_t> v = codec::VerifyColdBlock(block); !v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("put ", name, ": ", v.status().message()));
  }
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  librados::IoCtx cxx;
  librados::IoCtx::from_rados_ioctx_t(io, cxx);
  BlockData data(block);
  int r;
  {
    librados::ObjectWriteOperation op;
    FillPutOp(op, key, data.list(), attrs);
    r = cxx.operate(name, &op, kWriteFlags);
  }
  ReleaseBlock(data, ReleaseWait(), counters_);
  cxx.close();
  rados_ioctx_destroy(io);
  return PutStatus(r, rados_ns, name);
}

absl::Status RadosObjectStore::PutStatus(int r, const std::string& rados_ns,
                                         const std::string& name) {
  counters_.puts.fetch_add(1);
  if (r == -EEXIST) {
    counters_.put_already_exists.fetch_add(1);
    return absl::AlreadyExistsError(absl::StrCat("put ", rados_ns, "/", name, ": already exists"));
  }
  if (r < 0) return Error(r, absl::StrCat("put ", rados_ns, "/", name));
  return absl::OkStatus();
}

std::vector<absl::Status> RadosObjectStore::PutMany(const std::string& rados_ns,
                                                    absl::Span<const PutRequest> requests) {
  std::vector<absl::Status> out(requests.size());
  struct Pending {
    std::string name;
    std::optional<BlockData> data;
    std::optional<librados::ObjectWriteOperation> op;
    librados::AioCompletion* c = nullptr;
  };
  std::vector<Pending> p(requests.size());
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  librados::IoCtx cxx;
  librados::IoCtx::from_rados_ioctx_t(io, cxx);
  for (size_t i = 0; i < requests.size(); ++i) {
    const PutRequest& q = requests[i];
    p[i].name = ObjectName(q.key);
    if (absl::StatusOr<uint32_t> v = codec::VerifyColdBlock(q.block); !v.ok()) {
      out[i] =
          absl::InvalidArgumentError(absl::StrCat("put ", p[i].name, ": ", v.status().message()));
      continue;
    }
    p[i].data.emplace(q.block);
    p[i].op.emplace();
    FillPutOp(*p[i].op, q.key, p[i].data->list(), q.attrs);
    p[i].c = librados::Rados::aio_create_completion();
    const int r = cxx.aio_operate(p[i].name, p[i].c, &*p[i].op, kWriteFlags);
    if (r < 0) {  // not submitted: no completion will come
      out[i] = PutStatus(r, rados_ns, p[i].name);
      p[i].c->release();
      p[i].c = nullptr;
    }
  }
  // Every op is bounded by rados_osd_op_timeout, so these waits end.
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].c == nullptr) continue;
    p[i].c->wait_for_complete();
    out[i] = PutStatus(p[i].c->get_return_value(), rados_ns, p[i].name);
    p[i].c->release();
  }
  for (Pending& q : p) {
    q.op.reset();
    if (q.data.has_value()) ReleaseBlock(*q.data, ReleaseWait(), counters_);
  }
  cxx.close();
  rados_ioctx_destroy(io);
  return out;
}

struct ObjectBytes::Buffer {
  ceph::bufferlist bl;
};

ObjectBytes::ObjectBytes() = default;
ObjectBytes::~ObjectBytes() = default;
ObjectBytes::ObjectBytes(ObjectBytes&& other) noexcept
    : buffer_(std::move(other.buffer_)), bytes_(std::exchange(other.bytes_, {})) {}
ObjectBytes& ObjectBytes::operator=(ObjectBytes&& other) noexcept {
  buffer_ = std::move(other.buffer_);
  bytes_ = std::exchange(other.bytes_, {});
  return *this;
}

absl::StatusOr<std::vector<std::optional<ObjectBytes>>> RadosObjectStore::Get(
    const std::string& rados_ns, absl::Span<const BlockKey> keys, absl::Time deadline,
    uint64_t max_bytes) {
  std::vector<std::optional<ObjectBytes>> out(keys.size());
  const absl::Status st = GetWindowed(
      rados_ns, keys, keys.size(), deadline,
      [&out](size_t i, std::optional<ObjectBytes> bytes) {
        out[i] = std::move(bytes);
        return true;
      },
      max_bytes);
  if (!st.ok()) return st;
  return out;
}

absl::Status RadosObjectStore::GetWindowed(const std::string& rados_ns,
                                           absl::Span<const BlockKey> keys, size_t depth,
                                           absl::Time deadline, GetResultFn on_result,
                                           uint64_t max_bytes) {
  if (keys.empty()) return absl::OkStatus();
  if (max_bytes == 0 || max_bytes > options_.max_block_bytes) max_bytes = options_.max_block_bytes;
  if (depth == 0 || depth > keys.size()) depth = keys.size();
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  // The C++ API on the same context: its reads land in buffer lists that become the results.
  librados::IoCtx cxx;
  librados::IoCtx::from_rados_ioctx_t(io, cxx);
  ReadWindow window(depth, counters_);
  std::vector<ReadWindow::Slot*> free_slots;
  for (size_t i = 0; i < depth; ++i) free_slots.push_back(&window.slot(i));
  size_t next = 0;       // the next key to read
  size_t in_flight = 0;  // slots whose read was submitted and not yet taken back
  size_t delivered = 0;
  bool stop = false;  // on_result asked to, or a read failed: no read starts any more
  bool timed_out = false;
  absl::Status err;
  for (;;) {
    if (!stop && next < keys.size() && absl::Now() >= deadline) {
      timed_out = true;  // keys are left that could not start in time
      break;
    }
    while (!stop && next < keys.size() && !free_slots.empty()) {
      ReadWindow::Slot& s = *free_slots.back();
      s.index = next;
      s.name = ObjectName(keys[next]);
      s.want_id = IdXattr(keys[next]);
      s.op.emplace();
      // The identity comes back with the bytes and must start with what was asked (IdMatches): an
      // object under the right name with another block's identity is a miss, not that block.
      s.op->getxattr(kXattrId, &s.id, &s.id_rval);
      // One byte more than the largest block: a larger object shows as too large.
      s.op->read(0, max_bytes + 1, &s.data, &s.read_rval);
      s.c = librados::Rados::aio_create_completion(&s, &ReadWindow::Done);
      window.CountSubmitted();
      ++next;
      if (const int r = cxx.aio_operate(s.name, s.c, &*s.op, 0, nullptr); r < 0) {
        // Not submitted: no completion will come.
        window.CountUnsubmitted();
        if (err.ok()) err = Error(r, absl::StrCat("get ", rados_ns, "/", s.name));
        s.c->release();
        s.c = nullptr;
        s.Clear();
        stop = true;
        break;
      }
      free_slots.pop_back();
      ++in_flight;
    }
    if (in_flight == 0) break;
    ReadWindow::Slot* s = window.NextAnswered(deadline);
    if (s == nullptr) {
      timed_out = true;
      break;
    }
    const int r = s->c->get_return_value();  // complete: its callback queued it
    s->c->release();
    s->c = nullptr;
    --in_flight;
    counters_.gets.fetch_add(1);
    const size_t index = s->index;
    std::optional<ObjectBytes> result;
    if (r == -ENOENT || r == -ENODATA || (r >= 0 && !IdMatches(s->id, s->want_id))) {
      // Absent; or without kvtier.id (ENODATA) or with another block's: the object is not the
      // block asked for.
      counters_.get_misses.fetch_add(1);
      if (r != -ENOENT) counters_.verify_failures.fetch_add(1);
    } else if (r < 0) {
      if (err.ok()) err = Error(r, absl::StrCat("get ", rados_ns, "/", s->name));
      stop = true;
      s->Clear();
      free_slots.push_back(s);
      continue;
    } else if (s->data.length() > max_bytes) {
      counters_.get_misses.fetch_add(1);
      counters_.verify_failures.fetch_add(1);
    } else {
      ceph::bufferlist& data = s->data;
      if (!data.is_contiguous()) data.rebuild();  // one buffer, so that it is one span
      ObjectBytes bytes;
      bytes.buffer_ = std::make_unique<ObjectBytes::Buffer>();
      bytes.buffer_->bl = std::move(data);
      bytes.bytes_ = absl::Span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(bytes.buffer_->bl.c_str()), bytes.buffer_->bl.length());
      if (codec::VerifyColdBlock(bytes.bytes()).ok()) {
        counters_.get_hits.fetch_add(1);
        result = std::move(bytes);
      } else {
        counters_.get_misses.fetch_add(1);
        counters_.verify_failures.fetch_add(1);
      }
    }
    s->Clear();
    free_slots.push_back(s);
    ++delivered;
    if (!on_result(index, std::move(result))) stop = true;
  }
  if (timed_out) {
    // Every slot still holding a completion: in flight, or answered and not taken back.
    for (size_t i = 0; i < depth; ++i) {
      ReadWindow::Slot& s = window.slot(i);
      if (s.c == nullptr) continue;
      if (!s.c->is_complete()) cxx.aio_cancel(s.c);
      s.c->wait_for_complete_and_cb();
      s.c->release();
      s.c = nullptr;
      counters_.gets.fetch_add(1);
    }
  }
  cxx.close();
  rados_ioctx_destroy(io);
  if (timed_out) {
    counters_.timeouts.fetch_add(1);
    return absl::DeadlineExceededError(
        absl::StrFormat("get of %d objects in %s: deadline passed (%d delivered)", keys.size(),
                        rados_ns, delivered));
  }
  return err;
}

absl::StatusOr<std::vector<bool>> RadosObjectStore::Exists(const std::string& rados_ns,
                                                           absl::Span<const BlockKey> keys,
                                                           absl::Time deadline) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  std::vector<rados_completion_t> c(keys.size());
  std::vector<uint64_t> size(keys.size());
  std::vector<time_t> mtime(keys.size());
  std::vector<std::string> names(keys.size());
  BatchCompletions completions;
  for (size_t i = 0; i < keys.size(); ++i) {
    names[i] = ObjectName(keys[i]);
    c[i] = completions.Create();
    rados_aio_stat(io, names[i].c_str(), c[i], &size[i], &mtime[i]);
  }
  const bool timed_out = !completions.WaitAll(c.size(), deadline);
  std::vector<bool> out(keys.size());
  absl::Status err;
  for (size_t i = 0; i < c.size(); ++i) {
    if (timed_out && !rados_aio_is_complete(c[i])) rados_aio_cancel(io, c[i]);
    rados_aio_wait_for_complete_and_cb(c[i]);
    const int r = rados_aio_get_return_value(c[i]);
    rados_aio_release(c[i]);
    if (timed_out) continue;
    if (r == 0)
      out[i] = true;
    else if (r != -ENOENT && err.ok())
      err = Error(r, absl::StrCat("stat ", rados_ns, "/", names[i]));
  }
  rados_ioctx_destroy(io);
  if (timed_out) {
    counters_.timeouts.fetch_add(1);
    return absl::DeadlineExceededError(
        absl::StrFormat("stat of %d objects in %s: deadline passed", keys.size(), rados_ns));
  }
  if (!err.ok()) return err;
  return out;
}

absl::StatusOr<std::string> RadosObjectStore::ClaimValue(const std::string& rados_ns,
                                                         const std::string& name,
                                                         const std::string& value) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, nullptr);
  rados_write_op_write_full(op, value.data(), value.size());
  int r = rados_write_op_operate2(op, io, name.c_str(), nullptr, kWriteFlags);
  rados_release_write_op(op);
  std::string held = value;
  if (r == -EEXIST) {
    held.assign(4096, '\0');
    r = rados_read(io, name.c_str(), held.data(), held.size(), 0);
    if (r >= 0) held.resize(static_cast<size_t>(r));
  }
  rados_ioctx_destroy(io);
  if (r < 0) return Error(r, absl::StrCat("claim ", rados_ns, "/", name));
  return held;
}

absl::Status RadosObjectStore::Touch(const std::string& rados_ns, const BlockKey& key,
                                     int64_t unix_micros) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  const std::string name = ObjectName(key);
  const std::string when = Be64(static_cast<uint64_t>(unix_micros));
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_assert_exists(op);
  rados_write_op_setxattr(op, kXattrRead, when.data(), when.size());
  const int r = rados_write_op_operate2(op, io, name.c_str(), nullptr, kWriteFlags);
  rados_release_write_op(op);
  rados_ioctx_destroy(io);
  if (r < 0) return Error(r, absl::StrCat("touch ", rados_ns, "/", name));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BlockObject>> RadosObjectStore::ListBlocks(size_t max) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, LIBRADOS_ALL_NSPACES);
  rados_list_ctx_t ctx = nullptr;
  int r = rados_nobjects_list_open(io, &ctx);
  if (r < 0) {
    rados_ioctx_destroy(io);
    return Error(r, "list all namespaces");
  }
  auto is_block = [](absl::string_view name) { return ParseObjectName(name).has_value(); };
  std::vector<BlockObject> out;
  rados_ioctx_t obj_io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &obj_io);
  librados::IoCtx obj_cxx;  // the same context: stat2's mtime has sub-second resolution
  librados::IoCtx::from_rados_ioctx_t(obj_io, obj_cxx);
  const char* entry = nullptr;
  const char* nspace = nullptr;
  while (out.size() < max && (r = rados_nobjects_list_next(ctx, &entry, nullptr, &nspace)) == 0) {
    if (!is_block(entry)) continue;
    BlockObject o;
    o.rados_ns = nspace != nullptr ? nspace : "";
    o.name = entry;
    rados_ioctx_set_namespace(obj_io, o.rados_ns.c_str());
    timespec mtime{};
    if (obj_cxx.stat2(o.name, &o.size, &mtime) < 0) continue;  // removed meanwhile
    char when[8];
    const int n = rados_getxattr(obj_io, entry, kXattrRead, when, sizeof(when));
    o.use_recorded = n == 8;
    // Never used: the write's time stands in (blocks are immutable, so the mtime is the write).
    o.last_use_unix_micros =
        o.use_recorded ? static_cast<int64_t>(DecodeBigEndian64(reinterpret_cast<uint8_t*>(when)))
                       : static_cast<int64_t>(mtime.tv_sec) * 1000000 + mtime.tv_nsec / 1000;
    out.push_back(std::move(o));
  }
  rados_nobjects_list_close(ctx);
  obj_cxx.close();
  rados_ioctx_destroy(obj_io);
  rados_ioctx_destroy(io);
  if (r != 0 && r != -ENOENT) return Error(r, "list all namespaces");
  return out;
}

absl::Status RadosObjectStore::RemoveUnlessUsed(const BlockObject& object) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, object.rados_ns.c_str());
  const std::string when = Be64(static_cast<uint64_t>(object.last_use_unix_micros));
  rados_write_op_t op = rados_create_write_op();
  // A use since the listing changed kvtier.read, or set it where it was absent (an absent xattr
  // compares equal to the empty value).
  if (object.use_recorded) {
    rados_write_op_cmpxattr(op, kXattrRead, LIBRADOS_CMPXATTR_OP_EQ, when.data(), when.size());
  } else {
    rados_write_op_cmpxattr(op, kXattrRead, LIBRADOS_CMPXATTR_OP_EQ, "", 0);
  }
  rados_write_op_remove(op);
  const int r =
      rados_write_op_operate2(op, io, object.name.c_str(), nullptr, LIBRADOS_OPERATION_FULL_FORCE);
  rados_release_write_op(op);
  rados_ioctx_destroy(io);
  const std::string what = absl::StrCat("remove ", object.rados_ns, "/", object.name);
  if (r == -ECANCELED || r == -ENODATA) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": used since it was listed"));
  }
  if (r == -ENOENT) return absl::NotFoundError(absl::StrCat(what, ": gone already"));
  if (r < 0) return Error(r, what);
  return absl::OkStatus();
}

absl::Status RadosObjectStore::Remove(const std::string& rados_ns, const BlockKey& key) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  const std::string name = ObjectName(key);
  const int r = rados_remove(io, name.c_str());
  rados_ioctx_destroy(io);
  if (r < 0) return Error(r, absl::StrCat("remove ", rados_ns, "/", name));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ObjectInfo>> RadosObjectStore::List(const std::string& rados_ns) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  rados_list_ctx_t ctx = nullptr;
  int r = rados_nobjects_list_open(io, &ctx);
  if (r < 0) {
    rados_ioctx_destroy(io);
    return Error(r, absl::StrCat("list ", rados_ns));
  }
  std::vector<ObjectInfo> out;
  const char* entry = nullptr;
  while ((r = rados_nobjects_list_next(ctx, &entry, nullptr, nullptr)) == 0) {
    if (std::strcmp(entry, kLeaseObject) == 0) continue;
    ObjectInfo info;
    info.name = entry;
    time_t mtime = 0;
    if (rados_stat(io, entry, &info.size, &mtime) == 0) {
      info.mtime_unix = mtime;
      out.push_back(std::move(info));
    }
  }
  rados_nobjects_list_close(ctx);
  rados_ioctx_destroy(io);
  if (r != -ENOENT) return Error(r, absl::StrCat("list ", rados_ns));
  return out;
}

absl::StatusOr<PoolUsage> RadosObjectStore::Usage() {
  rados_pool_stat_t st{};
  const int r = rados_ioctx_pool_stat(h_->io, &st);
  if (r < 0) return Error(r, absl::StrCat("pool stat ", options_.pool));
  return PoolUsage{st.num_bytes, st.num_objects};
}

absl::Status RadosObjectStore::AcquireLease(const std::string& rados_ns, const std::string& cookie,
                                            absl::Duration duration) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  timeval tv{};
  tv.tv_sec = absl::ToInt64Seconds(duration);
  tv.tv_usec = absl::ToInt64Microseconds(duration) % 1000000;
  // LOCK_FLAG_MAY_RENEW: the holder renews by locking again with its cookie.
  const int r = rados_lock_exclusive(io, kLeaseObject, kLeaseName, cookie.c_str(),
                                     "kvtier eviction lease", &tv, LIBRADOS_LOCK_FLAG_RENEW);
  rados_ioctx_destroy(io);
  if (r < 0) return Error(r, absl::StrCat("lease ", rados_ns, "/", kLeaseObject, " as ", cookie));
  return absl::OkStatus();
}

absl::Status RadosObjectStore::ReleaseLease(const std::string& rados_ns,
                                            const std::string& cookie) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  const int r = rados_unlock(io, kLeaseObject, kLeaseName, cookie.c_str());
  rados_ioctx_destroy(io);
  if (r < 0) return Error(r, absl::StrCat("unlock ", rados_ns, "/", kLeaseObject, " as ", cookie));
  return absl::OkStatus();
}

absl::Status RadosObjectStore::WriteRawForTest(const std::string& rados_ns, const std::string& name,
                                               absl::Span<const uint8_t> bytes) {
  rados_ioctx_t io = nullptr;
  rados_ioctx_create2(h_->cluster, rados_ioctx_get_id(h_->io), &io);
  rados_ioctx_set_namespace(io, rados_ns.c_str());
  const int r =
      rados_write_full(io, name.c_str(), reinterpret_cast<const char*>(bytes.data()), bytes.size());
  rados_ioctx_destroy(io);
  if (r < 0) return Error(r, absl::StrCat("raw write ", rados_ns, "/", name));
  return absl::OkStatus();
}

}  // namespace kvtier::cluster
