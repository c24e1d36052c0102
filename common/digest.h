// Sha256, HmacSha256 and LowerHex: the SHA-256 digests every module takes (block hash chains,
// namespace ids and hash roots, park hashes, token hashes) and the lower-case hex they are shown
// in. This is the only module that includes OpenSSL for hashing. Stateless and thread-safe.
#ifndef KVTIER_COMMON_DIGEST_H_
#define KVTIER_COMMON_DIGEST_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvtier {

inline constexpr size_t kSha256Bytes = 32;
using Sha256Digest = std::array<uint8_t, kSha256Bytes>;

// SHA-256 (FIPS 180-4) of `data`.
Sha256Digest Sha256(absl::string_view data);

// HMAC-SHA-256 (RFC 2104) of `data` under `key`; a key of any length, the empty one included.
Sha256Digest HmacSha256(absl::string_view key, absl::string_view data);

// Two lower-case hex digits per byte ("00ff"), for digests and block hashes in messages, files
// and command output.
std::string LowerHex(absl::string_view bytes);
std::string LowerHex(absl::Span<const uint8_t> bytes);

}  // namespace kvtier

#endif  // KVTIER_COMMON_DIGEST_H_
