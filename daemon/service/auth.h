// TokenAuth: optional per-tenant tokens. A tokens file lists, one per line, a tenant and the
// SHA-256 of its token ("<tenant> sha256:<64 hex digits>"; '#' starts a comment); the file holds
// no secret. Clients send "authorization: Bearer <token>" metadata; the server hashes the token and
// finds the tenant, which then decides the namespace (never a client-supplied salt). Immutable
// after Load; thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_AUTH_H_
#define KVTIER_DAEMON_SERVICE_AUTH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace kvtier::service {

class TokenAuth {
 public:
  // Reads the tokens file `path` (at most 16 MiB). NotFound when the file is missing,
  // PermissionDenied when it cannot be read, InvalidArgument when it is not a regular file (a
  // FIFO, socket, device or directory is refused without being read, so the call never waits on
  // it) or names the line of a malformed entry or of a hash listed twice. Blocks on the file
  // system.
  static absl::StatusOr<std::unique_ptr<TokenAuth>> Load(const std::string& path,
                                                         std::vector<std::string> admin_tenants);
  // The caller's tenant. Unauthenticated when the metadata is missing, malformed or names no
  // known token.
  absl::StatusOr<std::string> Authenticate(const grpc::CallbackServerContext& ctx) const;
  bool IsAdmin(const std::string& tenant) const { return admins_.contains(tenant); }
  size_t size() const { return tenants_.size(); }

  // "sha256:<hex>" of a token, as the file lists it.
  static std::string HashToken(absl::string_view token);

 private:
  absl::flat_hash_map<std::string, std::string> tenants_;  // sha256 hex -> tenant
  absl::flat_hash_set<std::string> admins_;
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_AUTH_H_
