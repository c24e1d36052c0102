// kvtierctl: the parsed command line, the connection, output and argument helpers.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/digest.h"
#include "common/file_reading.h"
#include "common/format_bytes.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/timestamp.pb.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {

// ---- Connection ----

namespace {

constexpr uint64_t kMaxPemBytes = uint64_t{1} << 20;
constexpr uint64_t kMaxTokenFileBytes = uint64_t{64} << 10;

}  // namespace

bool ReadInputFile(const std::string& flag, const std::string& path, uint64_t max_bytes,
                   std::string* out) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, max_bytes, flag + " file");
  if (!text.ok()) {
    std::cerr << "kvtierctl: " << text.status().message() << "\n";
    return false;
  }
  *out = std::move(*text);
  return true;
}

std::unique_ptr<Connection> Connection::Open(const Invocation& inv, double default_timeout_s,
                                             int* exit_status) {
  *exit_status = kExitUsage;
  auto conn = std::unique_ptr<Connection>(new Connection());
  const char* env = std::getenv("KVTIER_SOCKET");
  conn->address_ = std::string("unix:") + (env != nullptr ? env : "/run/kvtier/kvtier.sock");
  if (auto socket = inv.Get("socket")) conn->address_ = "unix:" + *socket;
  if (auto address = inv.Get("address")) conn->address_ = *address;
  if (inv.Has("socket") && inv.Has("address")) {
    UsageError(inv, "--socket and --address exclude each other");
    return nullptr;
  }
  conn->timeout_s_ = default_timeout_s;
  if (auto timeout = inv.Get("timeout")) {
    if (!absl::SimpleAtod(*timeout, &conn->timeout_s_) || !(conn->timeout_s_ > 0)) {
      UsageError(inv, "--timeout needs a positive number of seconds, not '" + *timeout + "'");
      return nullptr;
    }
  }
  const std::string& address = conn->address_;
  if (address.empty() || address == "unix:") {
    UsageError(inv, "--address needs unix:PATH or HOST:PORT");
    return nullptr;
  }
  const bool tcp = !absl::StartsWith(address, "unix:");
  const std::string tls_ca = inv.Get("tls-ca").value_or("");
  const std::string tls_cert = inv.Get("tls-cert").value_or("");
  const std::string tls_key = inv.Get("tls-key").value_or("");
  const std::string tls_server_name = inv.Get("tls-server-name").value_or("");
  const bool insecure = inv.Has("insecure");
  const bool tls_options =
      !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty() || !tls_server_name.empty();
  if (!tcp && (tls_options || insecure)) {
    UsageError(inv, "--tls-* and --insecure are for a HOST:PORT --address, not " + address);
    return nullptr;
  }
  if (insecure && tls_options) {
    UsageError(inv, "--insecure (plain text) and --tls-* options exclude each other");
    return nullptr;
  }
  if (tls_cert.empty() != tls_key.empty()) {
    UsageError(inv, "--tls-cert and --tls-key go together");
    return nullptr;
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments channel_args;
  if (tcp && !insecure) {
    grpc::SslCredentialsOptions ssl;
    if ((!tls_ca.empty() &&
         !ReadInputFile("--tls-ca", tls_ca, kMaxPemBytes, &ssl.pem_root_certs)) ||
        (!tls_cert.empty() &&
         !ReadInputFile("--tls-cert", tls_cert, kMaxPemBytes, &ssl.pem_cert_chain)) ||
        (!tls_key.empty() &&
         !ReadInputFile("--tls-key", tls_key, kMaxPemBytes, &ssl.pem_private_key))) {
      *exit_status = kExitFailed;  // an unreadable input file, not a usage error
      return nullptr;
    }
    credentials = grpc::SslCredentials(ssl);
    if (!tls_server_name.empty()) channel_args.SetSslTargetNameOverride(tls_server_name);
  }
  const char* token_env = std::getenv("KVTIER_TOKEN_FILE");
  const std::string token_file =
      inv.Get("token-file").value_or(token_env != nullptr ? token_env : "");
  if (!token_file.empty()) {
    std::string text;
    if (!ReadInputFile("--token-file", token_file, kMaxTokenFileBytes, &text)) {
      *exit_status = kExitFailed;
      return nullptr;
    }
    conn->token_ = text.substr(0, text.find('\n'));
    if (!conn->token_.empty() && conn->token_.back() == '\r') conn->token_.pop_back();
    if (conn->token_.empty()) {
      std::cerr << "kvtierctl: cannot read a token from " << token_file
                << ": its first line is empty\n";
      *exit_status = kExitFailed;
      return nullptr;
    }
  }
  conn->channel_ = grpc::CreateCustomChannel(address, credentials, channel_args);
  conn->stub_ = kvtier::v1::KvTier::NewStub(conn->channel_);
  conn->admin_ = kvtier::v1::KvTierAdmin::NewStub(conn->channel_);
  *exit_status = kExitOk;
  return conn;
}

std::unique_ptr<grpc::ClientContext> Connection::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
  return ctx;
}

int Connection::Fail(const std::string& what, const grpc::Status& status) const {
  std::cerr << "kvtierctl: " << what << " failed: " << status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::cerr << " (is kvtierd running and listening on " << address_ << "?)";
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::cerr << " (after --timeout=" << timeout_s_ << " seconds)";
  }
  std::cerr << "\n";
  return status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? kExitTimeout : kExitFailed;
}

// ---- Output ----

std::string Bytes(uint64_t bytes) { return FormatBytes(bytes); }

std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string Ratio(uint64_t numerator, uint64_t denominator) {
  if (denominator == 0) return "-";
  return absl::StrFormat("%.2fx",
                         static_cast<double>(numerator) / static_cast<double>(denominator));
}

std::string NamespaceHex(uint64_t id) { return absl::StrFormat("%016x", id); }

const char* TierName(kvtier::v1::Tier tier) {
  switch (tier) {
    case kvtier::v1::TIER_GPU:
      return "gpu";
    case kvtier::v1::TIER_HOST:
      return "host";
    case kvtier::v1::TIER_DISK:
      return "disk";
    case kvtier::v1::TIER_CLUSTER:
      return "cluster";
    default:
      return "-";
  }
}

std::string CodecName(const kvtier::v1::CodecSpec& codec) {
  std::string name = kvtier::v1::Codec_Name(codec.codec());
  if (absl::StartsWith(name, "CODEC_")) name = name.substr(6);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

std::string Seconds(const google::protobuf::Duration& d) {
  const int64_t s = d.seconds();
  if (s < 60) return absl::StrFormat("%.3fs", static_cast<double>(s) + d.nanos() / 1e9);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm%02ds", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%dd%02dh%02dm", s / 86400, (s / 3600) % 24, (s / 60) % 60);
}

namespace {

using google::protobuf::FieldDescriptor;

Json ScalarToJson(const google::protobuf::Message& m, const FieldDescriptor* f, int index) {
  const google::protobuf::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64: {
      const uint64_t v = rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
      if (f->type() == FieldDescriptor::TYPE_FIXED64) return NamespaceHex(v);  // ids
      return v;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f);
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name();
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string v = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
      return f->type() == FieldDescriptor::TYPE_BYTES ? LowerHex(v) : v;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ToJson(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
  }
  return nullptr;
}

}  // namespace

Json ToJson(const google::protobuf::Message& message) {
  const google::protobuf::Descriptor* d = message.GetDescriptor();
  if (d->full_name() == "google.protobuf.Timestamp") {
    const auto& t = static_cast<const google::protobuf::Timestamp&>(message);
    return absl::FormatTime(absl::RFC3339_full,
                            absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos()),
                            absl::UTCTimeZone());
  }
  if (d->full_name() == "google.protobuf.Duration") {
    const auto& dur = static_cast<const google::protobuf::Duration&>(message);
    return static_cast<double>(dur.seconds()) + dur.nanos() / 1e9;
  }
  const google::protobuf::Reflection* r = message.GetReflection();
  Json out = Json::object();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      Json list = Json::array();
      for (int j = 0; j < r->FieldSize(message, f); ++j) {
        list.push_back(ScalarToJson(message, f, j));
      }
      out[f->name()] = std::move(list);
      continue;
    }
    // Unset messages and unset oneof members are left out; other scalars always appear.
    const bool in_oneof = f->containing_oneof() != nullptr;
    if ((f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE || in_oneof) &&
        !r->HasField(message, f)) {
      continue;
    }
    out[f->name()] = ScalarToJson(message, f, -1);
  }
  return out;
}

void PrintJson(const Json& json) { std::cout << json.dump(2) << "\n"; }

void Table::Print(const std::string& indent) const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string pad(widths[i] - row[i].size(), ' ');
      if (i == 0) {
        line += row[i] + pad;
      } else {
        line += "  " + pad + row[i];
      }
    }
    std::cout << line << "\n";
  }
}

// ---- Arguments ----

int ParseNamespaceSelector(const Invocation& inv, bool required,
                           kvtier::v1::NamespaceSelector* out) {
  const std::optional<std::string> id = inv.Get("namespace");
  const bool match = inv.Has("tenant") || inv.Has("model") || inv.Has("partition");
  const bool all = inv.Has("all");
  const int given =
      static_cast<int>(id.has_value()) + static_cast<int>(match) + static_cast<int>(all);
  if (given > 1) {
    return UsageError(
        inv, "give one of --namespace=HEX, --tenant/--model/--partition" +
                 std::string(inv.command == "evict" || inv.command == "clear" ? ", --all" : ""));
  }
  if (given == 0) {
    if (required) {
      return UsageError(inv, inv.command +
                                 " needs --namespace=HEX, --tenant/--model/--partition "
                                 "or --all (nothing is removed by default)");
    }
    return kExitOk;
  }
  if (id.has_value()) {
    uint64_t value = 0;
    if (id->empty() || id->size() > 16 || !absl::SimpleHexAtoi(*id, &value)) {
      return UsageError(inv,
                        "--namespace takes a hexadecimal id (kvtierctl namespaces lists "
                        "them), not '" +
                            *id + "'");
    }
    out->set_namespace_id(value);
  } else if (match) {
    kvtier::v1::NamespaceMatch* m = out->mutable_match();
    m->set_tenant(inv.Get("tenant").value_or(""));
    m->set_model(inv.Get("model").value_or(""));
    m->set_partition(inv.Get("partition").value_or(""));
  } else {
    out->set_all(true);
  }
  return kExitOk;
}

int ParseTier(const Invocation& inv, const std::vector<std::string>& allow, kvtier::v1::Tier* out) {
  *out = kvtier::v1::TIER_UNSPECIFIED;
  const std::optional<std::string> tier = inv.Get("tier");
  if (!tier.has_value()) return kExitOk;
  if (std::find(allow.begin(), allow.end(), *tier) == allow.end()) {
    std::string names;
    for (const std::string& a : allow) names += (names.empty() ? "" : ", ") + a;
    return UsageError(inv, "--tier is one of " + names + ", not '" + *tier + "'");
  }
  *out = *tier == "gpu"    ? kvtier::v1::TIER_GPU
         : *tier == "host" ? kvtier::v1::TIER_HOST
                           : kvtier::v1::TIER_DISK;
  return kExitOk;
}

int ParseCount(const Invocation& inv, const std::string& flag, uint64_t* out) {
  const std::optional<std::string> text = inv.Get(flag);
  if (!text.has_value()) return kExitOk;
  if (!absl::SimpleAtoi(*text, out) || *out == 0) {
    return UsageError(inv, "--" + flag + " needs a positive integer, not '" + *text + "'");
  }
  return kExitOk;
}

int ParseHashes(const Invocation& inv, const std::vector<std::string>& texts,
                std::vector<std::string>* out) {
  for (const std::string& text : texts) {
    if (text.empty() || text.size() % 2 != 0 || text.size() > 64 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return std::isxdigit(c) != 0; })) {
      return UsageError(inv, "a block hash is 1 to 32 bytes in hex, not '" + text + "'");
    }
    std::string bytes;
    for (size_t i = 0; i < text.size(); i += 2) {
      bytes.push_back(static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16)));
    }
    out->push_back(std::move(bytes));
  }
  return kExitOk;
}

}  // namespace kvtier::ctl
