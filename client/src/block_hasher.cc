// BlockHasher (kvtier/block_hasher.h): SHA-256 over parent || tokens as little-endian u32 ||
// extra key, one page at a time. The input of one link is assembled in one buffer and hashed in
// one call (common/digest.h).
#include "kvtier/block_hasher.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/coding.h"
#include "common/digest.h"

namespace kvtier {

absl::StatusOr<BlockHasher> BlockHasher::Create(std::string_view root, uint32_t tokens_per_page) {
  if (root.size() != kBlockHashBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("block hasher: root is ", root.size(), " bytes, expected ", kBlockHashBytes));
  }
  if (tokens_per_page == 0) {
    return absl::InvalidArgumentError("block hasher: tokens_per_page is 0");
  }
  return BlockHasher(std::string(root), tokens_per_page);
}

std::string BlockHasher::Next(std::string_view parent, std::span<const uint32_t> tokens,
                              std::string_view extra_key) {
  std::string input;
  input.reserve(parent.size() + 4 * tokens.size() + extra_key.size());
  input.append(parent);
  for (const uint32_t t : tokens) PutFixed32(&input, t);
  input.append(extra_key);
  const Sha256Digest digest = Sha256(input);
  return std::string(digest.begin(), digest.end());
}

absl::StatusOr<std::vector<std::string>> BlockHasher::HashAfter(
    std::string_view parent, std::span<const uint32_t> tokens,
    std::span<const std::string> extra_keys) const {
  const size_t pages = tokens.size() / tokens_per_page_;
  if (parent.size() != kBlockHashBytes) {
    return absl::InvalidArgumentError(absl::StrCat("block hasher: parent hash is ", parent.size(),
                                                   " bytes, expected ", kBlockHashBytes));
  }
  if (!extra_keys.empty() && extra_keys.size() != pages) {
    return absl::InvalidArgumentError(absl::StrCat("block hasher: ", extra_keys.size(),
                                                   " extra keys for ", pages, " full pages of ",
                                                   tokens_per_page_, " tokens"));
  }
  std::vector<std::string> hashes;
  hashes.reserve(pages);
  std::string prev(parent);
  for (size_t p = 0; p < pages; ++p) {
    prev = Next(prev, tokens.subspan(p * tokens_per_page_, tokens_per_page_),
                extra_keys.empty() ? std::string_view() : std::string_view(extra_keys[p]));
    hashes.push_back(prev);
  }
  return hashes;
}

absl::StatusOr<std::vector<std::string>> BlockHasher::Hash(
    std::span<const uint32_t> tokens, std::span<const std::string> extra_keys) const {
  return HashAfter(root_, tokens, extra_keys);
}

std::string HexHash(std::string_view bytes) {
  return LowerHex(absl::string_view(bytes.data(), bytes.size()));
}

}  // namespace kvtier
