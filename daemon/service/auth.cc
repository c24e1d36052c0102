// TokenAuth: the tokens file and bearer-token authentication.
#include "daemon/service/auth.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/digest.h"
#include "common/file_reading.h"

namespace kvtier::service {
namespace {

constexpr uint64_t kMaxTokensFileBytes = uint64_t{16} << 20;

}  // namespace

std::string TokenAuth::HashToken(absl::string_view token) {
  return "sha256:" + LowerHex(Sha256(token));
}

absl::StatusOr<std::unique_ptr<TokenAuth>> TokenAuth::Load(const std::string& path,
                                                           std::vector<std::string> admin_tenants) {
  absl::StatusOr<std::string> contents =
      ReadRegularFile(path, kMaxTokensFileBytes, "auth.tokens_file");
  if (!contents.ok()) return contents.status();
  auto auth = std::make_unique<TokenAuth>();
  int number = 0;
  for (absl::string_view line : absl::StrSplit(*contents, '\n')) {
    ++number;
    absl::string_view text = line;
    if (size_t hash = text.find('#'); hash != absl::string_view::npos) text = text.substr(0, hash);
    text = absl::StripAsciiWhitespace(text);
    if (text.empty()) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    absl::string_view hex = fields.size() == 2 ? fields[1] : absl::string_view();
    const bool hashed = absl::ConsumePrefix(&hex, "sha256:") && hex.size() == 64 &&
                        std::all_of(hex.begin(), hex.end(), [](char c) {
                          return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
                        });
    if (fields.size() != 2 || !hashed || fields[0].size() > 128) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "auth.tokens_file %s line %d: expected '<tenant> sha256:<64 lower-case hex digits>'",
          path, number));
    }
    const std::string key = absl::StrCat("sha256:", hex);
    if (!auth->tenants_.emplace(key, std::string(fields[0])).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "auth.tokens_file %s line %d: this token hash is listed twice", path, number));
    }
  }
  for (std::string& a : admin_tenants) auth->admins_.insert(std::move(a));
  return auth;
}

absl::StatusOr<std::string> TokenAuth::Authenticate(const grpc::CallbackServerContext& ctx) const {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "authentication is on: send 'authorization: Bearer <token>' metadata");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") || value.empty()) {
    return absl::UnauthenticatedError("the authorization metadata is not 'Bearer <token>'");
  }
  auto tenant = tenants_.find(HashToken(value));
  if (tenant == tenants_.end()) return absl::UnauthenticatedError("unknown token");
  return tenant->second;
}

}  // namespace kvtier::service
