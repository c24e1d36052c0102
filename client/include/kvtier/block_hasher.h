// BlockHasher: the block hashes of a token sequence, chained over the prefix as DESIGN.md defines
// them: h_i = SHA-256(h_{i-1} || tokens of page i as little-endian u32 || extra keys), with h_{-1}
// the namespace root the daemon returns from RegisterEngine. Only full pages are hashed. A
// BlockHasher is a value (thread-compatible); hashing is pure and allocation-light.
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_BLOCK_HASHER_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_BLOCK_HASHER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier {

inline constexpr size_t kBlockHashBytes = 32;

class BlockHasher {
 public:
  // `root` is RegisterEngine's hash_root (32 bytes); InvalidArgument for another size or for
  // tokens_per_page 0.
  static absl::StatusOr<BlockHasher> Create(std::string_view root, uint32_t tokens_per_page);

  // The hashes of the full pages of `tokens` (tokens.size() / tokens_per_page of them), chained
  // from the root. `extra_keys`, when not empty, holds one key per page (e.g. a multimodal input's
  // digest, a LoRA id) mixed into that page's hash; InvalidArgument when its size is neither 0
  // nor the page count.
  absl::StatusOr<std::vector<std::string>> Hash(std::span<const uint32_t> tokens,
                                                std::span<const std::string> extra_keys = {}) const;

  // One link of the chain: the hash of the page `tokens` (any length) after `parent`.
  static std::string Next(std::string_view parent, std::span<const uint32_t> tokens,
                          std::string_view extra_key = {});

  // Continues a chain: the hashes of the full pages of `tokens`, chained after `parent` (a
  // previous page's hash). Same errors as Hash, and InvalidArgument for a parent that is not 32
  // bytes.
  absl::StatusOr<std::vector<std::string>> HashAfter(
      std::string_view parent, std::span<const uint32_t> tokens,
      std::span<const std::string> extra_keys = {}) const;

  const std::string& root() const { return root_; }
  uint32_t tokens_per_page() const { return tokens_per_page_; }

 private:
  BlockHasher(std::string root, uint32_t tokens_per_page)
      : root_(std::move(root)), tokens_per_page_(tokens_per_page) {}
  std::string root_;
  uint32_t tokens_per_page_ = 0;
};

// Lower-case hex of `bytes` (for logs and kvtierctl lookup).
std::string HexHash(std::string_view bytes);

}  // namespace kvtier

#endif  // KVTIER_CLIENT_INCLUDE_KVTIER_BLOCK_HASHER_H_
