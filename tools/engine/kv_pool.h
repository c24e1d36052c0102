// The example engine's paged KV pool: slots of one page each in a shared-memory file (host) or in
// device memory shared through CUDA IPC (GPU), a free list, and the content model that writes a
// token's K/V rows from a digest of the prefix that ends at the token (so equal prefixes give equal
// pages, as real KV does) and rebuilds the expected bytes of a page to check what kvtierd returns.
// Not thread-safe: the engine's one thread drives it.
#ifndef KVTIER_TOOLS_ENGINE_KV_POOL_H_
#define KVTIER_TOOLS_ENGINE_KV_POOL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/codec.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"

namespace kvtier::engine {

// d_t = Mix(d_{t-1}, token_t), starting from kPrefixDigestSeed.
inline constexpr uint64_t kPrefixDigestSeed = 0x6B76746965722D31ull;
uint64_t NextPrefixDigest(uint64_t prev, uint32_t token);

class KvPool {
 public:
  // A host pool in `dir` (device < 0) or a GPU pool on `device`. The layout must have one pool.
  static absl::StatusOr<std::unique_ptr<KvPool>> Create(const PageLayout& layout, uint32_t slots,
                                                        int device, const std::string& dir);

  // A zeroed slot, or ResourceExhausted when none is free.
  absl::StatusOr<int32_t> Allocate();
  void Free(int32_t slot);
  uint32_t free_slots() const { return static_cast<uint32_t>(free_.size()); }

  // Writes the rows of token positions first_token, first_token + 1, ... of page `page` from
  // their prefix digests.
  absl::Status WriteTokens(int32_t page, uint32_t first_token, std::span<const uint64_t> digests);
  // The bytes of page `page` (copied from the device for a GPU pool).
  absl::StatusOr<std::vector<uint8_t>> ReadPage(int32_t page) const;
  // The page the content model gives for these digests (one per token present; later rows zero).
  std::vector<uint8_t> ExpectedPage(std::span<const uint64_t> digests) const;

  uint64_t page_bytes() const { return page_bytes_; }
  bool on_device() const { return device_ >= 0; }
  int device() const { return device_; }
  void* base() const;
  PoolRegistration Registration() const;

 private:
  KvPool(const PageLayout& layout, uint32_t slots, int device);
  void WriteRows(uint8_t* page, uint32_t slot_token, uint64_t digest) const;

  PageLayout layout_;
  uint32_t slots_;
  int device_;
  uint64_t page_bytes_;
  std::unique_ptr<SharedMemoryPool> host_;
  std::unique_ptr<DevicePool> gpu_;
  std::vector<int32_t> free_;
  std::vector<uint8_t> staging_;  // one page, for GPU writes
};

// Decodes(encodes(page)) with the CPU codec: what kvtierd returns for a page stored with `codec`.
class CodecCheck {
 public:
  static absl::StatusOr<std::unique_ptr<CodecCheck>> Create(const PageLayout& layout,
                                                            const std::string& codec);
  bool lossless() const { return lossless_; }
  absl::StatusOr<std::vector<uint8_t>> RoundTrip(std::span<const uint8_t> page) const;

 private:
  CodecCheck(const PageLayout& layout, std::unique_ptr<codec::Codec> c, bool lossless)
      : layout_(layout), codec_(std::move(c)), lossless_(lossless) {}
  PageLayout layout_;
  std::unique_ptr<codec::Codec> codec_;
  bool lossless_;
};

}  // namespace kvtier::engine

#endif  // KVTIER_TOOLS_ENGINE_KV_POOL_H_
