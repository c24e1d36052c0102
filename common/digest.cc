// Sha256, HmacSha256 and LowerHex (see digest.h) over OpenSSL's one-shot functions: every input
// here is already assembled in one buffer, so no streaming context is needed. OpenSSL's HMAC()
// returns nullptr only when the digest cannot be fetched, which for SHA-256 in the default library
// context means a broken installation, so that is a fatal error rather than a status every caller
// would have to carry.
#include "common/digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <cstdlib>

#include "absl/strings/escaping.h"
#include "common/logging.h"

namespace kvtier {

static_assert(kSha256Bytes == SHA256_DIGEST_LENGTH);

Sha256Digest Sha256(absl::string_view data) {
  Sha256Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data());
  return digest;
}

Sha256Digest HmacSha256(absl::string_view key, absl::string_view data) {
  Sha256Digest digest;
  unsigned int digest_bytes = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data(),
           &digest_bytes) == nullptr ||
      digest_bytes != digest.size()) {
    KVTIER_LOG(kError, "OpenSSL's HMAC-SHA-256 failed; the OpenSSL installation is broken");
    std::abort();
  }
  return digest;
}

std::string LowerHex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

std::string LowerHex(absl::Span<const uint8_t> bytes) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace kvtier
