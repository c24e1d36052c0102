// Helpers shared by the index tests: TempDir (an RAII temporary directory for real RocksDB files)
// and deterministic keys and records derived from an integer id, so a test (or a crashed child
// process) can check any stored entry against what it must be. Not thread-safe per object.
#ifndef KVTIER_TESTS_UNIT_DAEMON_INDEX_INDEX_TEST_UTIL_H_
#define KVTIER_TESTS_UNIT_DAEMON_INDEX_INDEX_TEST_UTIL_H_

#include <stdlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "common/coding.h"
#include "daemon/index/block_record.h"

namespace kvtier::index::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction. Aborts when
// it cannot be created: no test can run without it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kvtier-index-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "TempDir: mkdtemp(%s) failed: %s\n", pattern.c_str(),
                   std::strerror(errno));
      std::abort();
    }
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
  }

  const std::string& path() const { return path_; }
  // `name` inside the directory (not created).
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// SplitMix64: a cheap, well-mixed function of `x`.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline BlockHash HashFor(uint64_t id) {
  BlockHash hash;
  for (size_t word = 0; word < 4; ++word) {
    EncodeFixed64(hash.data() + word * 8, Mix(id * 4 + word));
  }
  return hash;
}

// Keys of id spread over three namespaces, one of them above 2^24 (big-endian order matters).
inline BlockKey KeyFor(uint64_t id) {
  static constexpr NamespaceId kNamespaces[] = {1, 7, 0x01000002};
  BlockKey key;
  key.ns = kNamespaces[id % 3];
  key.hash = HashFor(id);
  return key;
}

// A record whose offset is its id, every other field a function of it.
inline BlockRecord RecordFor(uint64_t id) {
  BlockRecord r;
  r.tier = static_cast<Tier>(id % kTierCount);
  r.flags = static_cast<uint8_t>(id % 8);
  r.codec = static_cast<uint8_t>(id % 5);
  r.device = static_cast<uint16_t>(id % 7);
  r.offset = id;
  r.size = static_cast<uint32_t>(4096 + id % 3);
  r.checksum = static_cast<uint32_t>(Mix(id));
  r.parent = HashFor(id + 1000000007ull);
  r.last_access_ms = 1700000000000ull + id;
  return r;
}

}  // namespace kvtier::index::testing

#endif  // KVTIER_TESTS_UNIT_DAEMON_INDEX_INDEX_TEST_UTIL_H_
