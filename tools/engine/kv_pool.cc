// KvPool and CodecCheck. Row values: splitmix64 of (digest, buffer, head, element / 4) gives 16
// bits per element, mapped to [-2, 2) with an outlier channel (element 7 of every row, x16) so
// the codec's scales work as they do on real keys.
#include "tools/engine/kv_pool.h"

#include <atomic>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codec/codec_spec.h"
#include "codec/dtype.h"
#include "codec/page_layout.h"
#include "kernels/device.h"

namespace kvtier::engine {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t NextPrefixDigest(uint64_t prev, uint32_t token) {
  return SplitMix64(prev ^ (uint64_t{token} * 0xFF51AFD7ED558CCDull));
}

KvPool::KvPool(const PageLayout& layout, uint32_t slots, int device)
    : layout_(layout), slots_(slots), device_(device), page_bytes_(layout.pools()[0].slot_bytes) {}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Create(const PageLayout& layout, uint32_t slots,
                                                       int device, const std::string& dir) {
  if (layout.pools().size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the example engine needs a layout with one pool, not ", layout.pools().size()));
  }
  std::unique_ptr<KvPool> pool(new KvPool(layout, slots, device));
  const PoolInfo info = layout.pools()[0];
  if (device >= 0) {
    absl::StatusOr<std::unique_ptr<DevicePool>> gpu =
        DevicePool::Create(device, info.name, slots, info.slot_bytes);
    if (!gpu.ok()) return gpu.status();
    pool->gpu_ = *std::move(gpu);
    pool->staging_.resize(info.slot_bytes);
  } else {
    // Pools of one process (one per node of a fleet) get files of their own.
    static std::atomic<uint32_t> pools_made{0};
    const uint32_t n = pools_made.fetch_add(1);
    absl::StatusOr<std::unique_ptr<SharedMemoryPool>> host =
        SharedMemoryPool::Create(absl::StrCat(dir, "/kvtier-example-engine.", getpid(),
                                              n == 0 ? "" : absl::StrCat("-", n), ".", info.name),
                                 info.name, slots, info.slot_bytes);
    if (!host.ok()) return host.status();
    pool->host_ = *std::move(host);
  }
  for (int32_t s = static_cast<int32_t>(slots) - 1; s >= 0; --s) pool->free_.push_back(s);
  return pool;
}

void* KvPool::base() const { return gpu_ ? gpu_->data() : static_cast<void*>(host_->data()); }

PoolRegistration KvPool::Registration() const {
  return gpu_ ? gpu_->Registration() : host_->Registration();
}

absl::StatusOr<int32_t> KvPool::Allocate() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pool: all ", slots_, " pages in use"));
  }
  const int32_t slot = free_.back();
  free_.pop_back();
  if (gpu_) {
    std::memset(staging_.data(), 0, staging_.size());
    absl::Status st = kernels::CopyAsync(gpu_->slot(slot), staging_.data(), page_bytes_, nullptr);
    if (st.ok()) st = kernels::SynchronizeStream(nullptr);
    if (!st.ok()) return st;
  } else {
    std::memset(host_->slot(slot), 0, page_bytes_);
  }
  return slot;
}

void KvPool::Free(int32_t slot) { free_.push_back(slot); }

void KvPool::WriteRows(uint8_t* page, uint32_t slot_token, uint64_t digest) const {
  const codec::PageLayout& l = layout_.internal();
  for (size_t b = 0; b < l.buffers.size(); ++b) {
    const codec::BufferSpec& buf = l.buffers[b];
    const uint32_t tokens = buf.Tokens(l.tokens_per_page);
    if (slot_token >= tokens) continue;
    const uint64_t elem = codec::DTypeBytes(buf.dtype);
    for (uint32_t h = 0; h < buf.heads; ++h) {
      uint8_t* row =
          page + buf.offset_bytes + (uint64_t{h} * tokens + slot_token) * buf.RowStride() * elem;
      uint64_t bits = 0;
      for (uint32_t e = 0; e < buf.head_dim; ++e) {
        if (e % 4 == 0) bits = SplitMix64(digest ^ (uint64_t{b} << 40) ^ (uint64_t{h} << 24) ^ e);
        const uint32_t r = static_cast<uint32_t>(bits >> (16 * (e % 4))) & 0xFFFF;
        if (buf.dtype == codec::DType::kBytes) {
          row[e] = static_cast<uint8_t>(r);
          continue;
        }
        float v = (static_cast<float>(r) - 32768.0f) / 16384.0f;
        if (e % 32 == 7) v *= 16.0f;
        codec::StoreFromFloat(buf.dtype, v, row, e);
      }
    }
  }
}

absl::Status KvPool::WriteTokens(int32_t page, uint32_t first_token,
                                 std::span<const uint64_t> digests) {
  if (!gpu_) {
    for (size_t i = 0; i < digests.size(); ++i) {
      WriteRows(host_->slot(page), first_token + static_cast<uint32_t>(i), digests[i]);
    }
    return absl::OkStatus();
  }
  absl::Status st = kernels::CopyAsync(staging_.data(), gpu_->slot(page), page_bytes_, nullptr);
  if (st.ok()) st = kernels::SynchronizeStream(nullptr);
  if (!st.ok()) return st;
  for (size_t i = 0; i < digests.size(); ++i) {
    WriteRows(staging_.data(), first_token + static_cast<uint32_t>(i), digests[i]);
  }
  st = kernels::CopyAsync(gpu_->slot(page), staging_.data(), page_bytes_, nullptr);
  if (st.ok()) st = kernels::SynchronizeStream(nullptr);
  return st;
}

absl::StatusOr<std::vector<uint8_t>> KvPool::ReadPage(int32_t page) const {
  if (!gpu_) return std::vector<uint8_t>(host_->slot(page), host_->slot(page) + page_bytes_);
  std::vector<uint8_t> bytes(page_bytes_);
  absl::Status st = kernels::CopyAsync(bytes.data(), gpu_->slot(page), page_bytes_, nullptr);
  if (st.ok()) st = kernels::SynchronizeStream(nullptr);
  if (!st.ok()) return st;
  return bytes;
}

std::vector<uint8_t> KvPool::ExpectedPage(std::span<const uint64_t> digests) const {
  std::vector<uint8_t> page(page_bytes_, 0);
  for (size_t i = 0; i < digests.size(); ++i) {
    WriteRows(page.data(), static_cast<uint32_t>(i), digests[i]);
  }
  return page;
}

absl::StatusOr<std::unique_ptr<CodecCheck>> CodecCheck::Create(const PageLayout& layout,
                                                               const std::string& codec) {
  absl::StatusOr<codec::CodecSpec> spec = codec::CodecSpec::Parse(codec);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<codec::Codec>> c = codec::Codec::Create(layout.internal(), *spec);
  if (!c.ok()) return c.status();
  return std::unique_ptr<CodecCheck>(
      new CodecCheck(layout, *std::move(c), spec->codec == codec::CodecId::kRaw));
}

absl::StatusOr<std::vector<uint8_t>> CodecCheck::RoundTrip(std::span<const uint8_t> page) const {
  const codec::PageLayout& l = layout_.internal();
  codec::HotPageView in;
  std::vector<uint8_t> out_bytes(page.size(), 0);
  codec::MutableHotPageView out;
  for (const codec::BufferSpec& b : l.buffers) {
    in.base.push_back(page.data() + b.offset_bytes);
    out.base.push_back(out_bytes.data() + b.offset_bytes);
  }
  std::vector<uint8_t> block(codec_->block_bytes());
  absl::Status st = codec_->Encode(in, absl::MakeSpan(block));
  if (st.ok()) st = codec_->Decode(block, out);
  if (!st.ok()) return st;
  return out_bytes;
}

}  // namespace kvtier::engine
