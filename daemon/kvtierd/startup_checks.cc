// kvtierd's start-up checks (see startup_checks.h). Each check adds one line per problem instead
// of returning at the first, so that an operator fixes a configuration in one round. They change
// nothing that matters: ports are bound and closed at once (a listening socket closed before any
// connection leaves no TIME_WAIT), directories are checked through their nearest existing
// ancestor rather than created, and the socket path is probed with a connect, not removed. What
// they cannot see (the index's own consistency, mmap and pinning of the host tier, the disk
// files' allocation) is left to BlockStore::Open; the checks are only meant to make the common
// mistakes fail before it, in milliseconds.
#include "daemon/kvtierd/startup_checks.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/errno_text.h"
#include "common/file_reading.h"
#include "daemon/kvtierd/config_modes.h"
#include "daemon/kvtierd/tcp_listen.h"
#include "daemon/service/auth.h"
#include "daemon/store/disk_tier.h"
#include "daemon/store/host_arena.h"
#include "kernels/device.h"

namespace kvtier::kvtierd {
namespace {

// ---- TLS ----

// The last OpenSSL error of this thread, as text; the queue is emptied.
std::string OpenSslError() {
  const unsigned long err = ERR_peek_last_error();
  char text[256] = {};
  if (err != 0) ERR_error_string_n(err, text, sizeof(text));
  ERR_clear_error();
  return err != 0 ? std::string(text) : std::string("no details from OpenSSL");
}

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

// A PEM key is never decrypted here: the configuration refuses encrypted keys, and without this
// callback OpenSSL would ask for a passphrase on the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

// Every certificate of the PEM bundle `pem`; an error line (naming `field` and `file`) when one
// does not parse or there is none.
std::vector<X509Ptr> ParseCertificates(const std::string& pem, const char* field,
                                       const std::string& file, std::vector<std::string>* errors) {
  std::vector<X509Ptr> out;
  ERR_clear_error();
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    out.emplace_back(cert);
  }
  // The end of the bundle reads as "no start line"; anything else is a certificate that is there
  // but does not parse.
  const unsigned long err = ERR_peek_last_error();
  const bool at_end =
      err == 0 || (ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE);
  if (!at_end) {
    errors->push_back(absl::StrFormat("%s %s: certificate %d does not parse: %s", field, file,
                                      out.size() + 1, OpenSslError()));
  } else if (out.empty()) {
    errors->push_back(absl::StrFormat("%s %s holds no PEM certificate", field, file));
  }
  ERR_clear_error();
  return out;
}

std::string Subject(X509* cert) {
  char text[512] = {};
  X509_NAME_oneline(X509_get_subject_name(cert), text, sizeof(text));
  return text;
}

// ---- Files and directories ----

// A problem with the directory `path` (named `what` in the message) that kvtierd creates when
// missing and then writes: it must be a writable directory, or be creatable below its nearest
// existing ancestor.
std::optional<std::string> DirectoryProblem(absl::string_view what, const std::string& path) {
  std::filesystem::path existing(path.empty() ? "." : path);
  struct stat st {};
  while (::stat(existing.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT && err != ENOTDIR) {
      return absl::StrFormat("%s %s: cannot stat %s: %s", what, path, existing.string(),
                             ErrnoText(err));
    }
    std::filesystem::path parent = existing.parent_path();
    if (parent.empty()) parent = ".";
    if (parent == existing) {
      return absl::StrFormat("%s %s: no ancestor of it exists", what, path);
    }
    existing = std::move(parent);
  }
  const bool itself = std::filesystem::path(path).lexically_normal() == existing.lexically_normal();
  const std::string where =
      itself ? absl::StrCat(what, " ", path)
             : absl::StrFormat("%s %s cannot be created: %s", what, path, existing.string());
  if (!S_ISDIR(st.st_mode)) {
    return absl::StrCat(where, " is ", FileTypeName(st.st_mode), ", not a directory");
  }
  if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    return absl::StrCat(where, " is not writable by uid ", geteuid(), ": ", ErrnoText(errno));
  }
  return std::nullopt;
}

// The nearest existing ancestor of `path` (or `path`), for statvfs.
std::string NearestExisting(const std::string& path) {
  std::filesystem::path p(path);
  struct stat st {};
  while (::stat(p.c_str(), &st) != 0 && p.has_parent_path() && p.parent_path() != p) {
    p = p.parent_path();
  }
  return p.string();
}

// The bytes allocated to the disk tier's files in `dirs` that live on the file system of `where`.
uint64_t OwnDiskFileBytes(const std::vector<std::string>& dirs, const std::string& where) {
  struct stat fs {};
  if (::stat(where.c_str(), &fs) != 0) return 0;
  uint64_t bytes = 0;
  for (const std::string& dir : dirs) {
    struct stat st {};
    const std::string file = absl::StrCat(dir, "/", store::DiskTierOptions{}.file_name);
    if (::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == fs.st_dev) {
      bytes += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return bytes;
}

// What is at the Unix socket path `path`.
enum class SocketFile { kAbsent, kStale, kLive, kNotSocket };

SocketFile ProbeSocketFile(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return SocketFile::kAbsent;
  if (!S_ISSOCK(st.st_mode)) return SocketFile::kNotSocket;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live ? SocketFile::kLive : SocketFile::kStale;
}

std::string SocketFileProblem(const std::string& path, SocketFile state) {
  if (state == SocketFile::kNotSocket) {
    struct stat st {};
    lstat(path.c_str(), &st);
    return absl::StrFormat("server.socket %s exists and is %s, not a socket", path,
                           FileTypeName(st.st_mode));
  }
  return absl::StrFormat("another process is serving on %s (is kvtierd already running?)", path);
}

}  // namespace

absl::Status CheckTlsFiles(const std::string& cert_pem, const std::string& cert_file,
                           const std::string& key_pem, const std::string& key_file,
                           const std::string& ca_pem, const std::string& ca_file) {
  std::vector<std::string> errors;
  std::vector<X509Ptr> chain = ParseCertificates(cert_pem, "tcp.tls.cert_file", cert_file, &errors);
  ERR_clear_error();
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  std::unique_ptr<EVP_PKEY, PkeyFree> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    errors.push_back(absl::StrFormat("tcp.tls.key_file %s: the private key does not parse: %s",
                                     key_file, OpenSslError()));
  }
  if (!chain.empty() && key != nullptr && X509_check_private_key(chain[0].get(), key.get()) != 1) {
    ERR_clear_error();
    errors.push_back(absl::StrFormat(
        "tcp.tls.key_file %s is not the private key of the certificate in tcp.tls.cert_file %s "
        "(%s); give the key the certificate was issued for",
        key_file, cert_file, Subject(chain[0].get())));
  }
  if (!ca_pem.empty()) ParseCertificates(ca_pem, "tcp.tls.client_ca_file", ca_file, &errors);
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

absl::StatusOr<uint64_t> HostTierBytes(const Config& config, std::string* note) {
  if (note != nullptr) note->clear();
  uint64_t host = config.host_capacity;
  if (host == 0) {
    const store::HostArena::MemoryLimit limit = store::HostArena::ReadMemoryLimit();
    host = std::min<uint64_t>(limit.bytes / 4, 64ull << 30);
    if (note != nullptr) {
      *note = absl::StrCat("host.capacity auto: ", host >> 20, " MiB (a quarter of ", limit.source,
                           ", at most 64 GiB)");
    }
  }
  if (config.host_chunk == 0 || host / config.host_chunk == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host.capacity (%d bytes) is below one host.chunk (%d bytes)", host, config.host_chunk));
  }
  return host / config.host_chunk * config.host_chunk;
}

std::vector<std::string> DiskTierDirs(const Config& config) {
  if (config.disk_capacity == UINT64_MAX) return {};  // disk.capacity 0: no disk tier
  if (!config.disk_dirs.empty()) return config.disk_dirs;
  return {config.state_dir + "/disk"};
}

absl::StatusOr<uint64_t> DiskTierBytes(const Config& config, std::string* note) {
  if (note != nullptr) note->clear();
  const std::vector<std::string> dirs = DiskTierDirs(config);
  if (dirs.empty()) return 0;
  uint64_t disk = config.disk_capacity;
  if (disk == 0) {
    const std::string where = NearestExisting(dirs[0]);
    struct statvfs vfs {};
    if (statvfs(where.c_str(), &vfs) != 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("disk.capacity auto: statvfs %s: %s", where, ErrnoText(errno)));
    }
    // The tier's own files count as free: they are what this size allocates, so a restart
    // must arrive at the same size instead of a quarter of what the last start left over.
    const uint64_t own = OwnDiskFileBytes(dirs, where);
    disk = std::min<uint64_t>((uint64_t{vfs.f_bavail} * vfs.f_frsize + own) / 4, 256ull << 30);
    if (note != nullptr) {
      *note =
          absl::StrCat("disk.capacity auto: ", disk >> 20, " MiB (a quarter of the free space",
                       own > 0 ? absl::StrCat(" and of the tier's own files, ", own >> 20, " MiB,")
                               : std::string(),
                       " on ", where, ", at most 256 GiB)");
    }
  }
  const uint64_t unit = config.disk_chunk * dirs.size();
  if (unit == 0 || disk / unit == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "disk.capacity %d is below one disk.chunk per directory (%d bytes); use 0 for no "
        "disk tier",
        disk, unit));
  }
  return disk / unit * unit;
}

absl::Status ClearStaleSocket(const std::string& path) {
  const SocketFile state = ProbeSocketFile(path);
  if (state == SocketFile::kAbsent) return absl::OkStatus();
  if (state != SocketFile::kStale) {
    return absl::FailedPreconditionError(SocketFileProblem(path, state));
  }
  if (unlink(path.c_str()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot remove the stale socket %s: %s", path, ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::Status CheckStartable(const Config& config, const StartupCheckOptions& options) {
  std::vector<std::string> errors;
  auto add = [&errors](const absl::Status& st) {
    if (st.ok()) return;
    for (absl::string_view line : absl::StrSplit(st.message(), '\n')) {
      errors.emplace_back(line);
    }
  };

  // Listen addresses: each must bind, and both at once (one port for two listeners fails).
  {
    std::vector<int> bound;
    for (const auto& [field, address] : {std::pair{"metrics.listen", &config.metrics_listen},
                                         std::pair{"tcp.listen", &config.tcp_listen}}) {
      if (address->empty()) continue;
      absl::StatusOr<int> fd = ListenTcp(field, *address);
      add(fd.status());
      if (fd.ok()) bound.push_back(*fd);
    }
    for (int fd : bound) close(fd);
  }

  // TLS: the files were read when the configuration loaded; here they must make a pair.
  if (!config.tcp_listen.empty() && !config.tcp_insecure) {
    add(CheckTlsFiles(config.tcp_tls_cert_pem, config.tcp_tls_cert_file, config.tcp_tls_key_pem,
                      config.tcp_tls_key_file, config.tcp_tls_client_ca_pem,
                      config.tcp_tls_client_ca_file));
  }

  // Authentication: the tokens file loads, and the hash-root key, when there is one, is whole.
  if (!config.auth_tokens_file.empty()) {
    add(service::TokenAuth::Load(config.auth_tokens_file, config.auth_admin_tenants).status());
    const std::string key = config.state_dir + "/hash-root.key";
    struct stat st {};
    if (::stat(key.c_str(), &st) == 0 && (!S_ISREG(st.st_mode) || st.st_size != 32)) {
      errors.push_back(
          absl::StrFormat("%s is %s of %d bytes, not the 32-byte hash-root key kvtierd keeps there",
                          key, FileTypeName(st.st_mode), st.st_size));
    }
  }

  // Directories kvtierd creates or writes, and the socket's path.
  if (std::optional<std::string> p = DirectoryProblem("state_dir", config.state_dir)) {
    errors.push_back(*p);
  }
  {
    const std::string index = config.state_dir + "/index";
    struct stat st {};
    if (::stat(index.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      errors.push_back(
          absl::StrFormat("the index %s is %s, not a directory", index, FileTypeName(st.st_mode)));
    }
  }
  for (const std::string& dir : DiskTierDirs(config)) {
    if (std::optional<std::string> p = DirectoryProblem("disk tier directory", dir)) {
      errors.push_back(*p);
    }
  }
  if (!options.socket_activated) {
    const std::string dir = std::filesystem::path(config.socket).parent_path().string();
    if (std::optional<std::string> p = DirectoryProblem("server.socket's directory", dir)) {
      errors.push_back(*p);
    }
    const SocketFile state = ProbeSocketFile(config.socket);
    if (state == SocketFile::kLive || state == SocketFile::kNotSocket) {
      errors.push_back(SocketFileProblem(config.socket, state));
    }
  }

  // Tier sizes.
  absl::StatusOr<uint64_t> host = HostTierBytes(config);
  add(host.status());
  if (host.ok()) {
    store::HostArenaOptions arena;
    arena.capacity_bytes = *host;
    arena.pin = ToHostPinMode(config.host_pin);
    if (config.host_persistent) arena.shm_name = config.host_shm_name;
    add(store::HostArena::CheckOptions(arena));
  }
  add(DiskTierBytes(config).status());
  if (config.gpu_capacity > 0) {
    if (!kernels::BuiltWithCuda()) {
      errors.push_back(
          "gpu.capacity: a GPU tier was asked for, but kvtier was built without CUDA "
          "(KVTIER_CUDA=OFF or no nvcc)");
    } else if (config.host_pin == HostPin::kMlock || config.host_pin == HostPin::kNone) {
      errors.push_back(
          "gpu.capacity: the GPU tier encodes pages straight into the host tier, which must then "
          "be pinned with CUDA: host.pin must be auto or cuda");
    } else {
      absl::StatusOr<std::vector<kernels::DeviceInfo>> devices = kernels::ListDevices();
      if (!devices.ok()) {
        errors.push_back(absl::StrCat("gpu.capacity: ", devices.status().message()));
      } else if (static_cast<size_t>(config.gpu_device) >= devices->size()) {
        errors.push_back(absl::StrFormat("gpu.device: no CUDA device %d (this process sees %d)",
                                         config.gpu_device, devices->size()));
      }
    }
  }

  if (errors.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrJoin(errors, "\n"));
}

}  // namespace kvtier::kvtierd
