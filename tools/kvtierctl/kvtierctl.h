// kvtierctl's pieces: the parsed command line, the connection to kvtierd, output helpers and the
// command table. Each command is a function from an Invocation to an exit status.
#ifndef KVTIER_TOOLS_KVTIERCTL_KVTIERCTL_H_
#define KVTIER_TOOLS_KVTIERCTL_KVTIERCTL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/cli/command_line.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace kvtier::ctl {

// Exit statuses scripts can rely on (docs/KVTIERCTL.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;   // kvtierd unreachable or refused; an invalid config file
inline constexpr int kExitUsage = 2;    // bad arguments: a usage message on stderr
inline constexpr int kExitCorrupt = 3;  // verify found corrupt or unreadable blocks
inline constexpr int kExitTimeout = 4;  // the deadline passed first (drain goes on; verify partial)

using Json = nlohmann::ordered_json;

// The command line after parsing (common/cli): the command ("stats", "config validate"), its
// flags and its positional arguments.
struct Invocation {
  std::string command;
  cli::Values args;
  std::vector<std::string> positional;

  bool Has(const std::string& name) const { return args.Has(name); }
  // The last value of --name; nullopt when absent.
  std::optional<std::string> Get(const std::string& name) const { return args.Get(name); }
  std::vector<std::string> GetAll(const std::string& name) const { return args.GetAll(name); }
  bool json() const { return Has("json"); }
};

// Prints "kvtierctl: MESSAGE" and the command's usage to stderr; returns kExitUsage.
int UsageError(const Invocation& inv, const std::string& message);

// Reads the input file `path` that flag `flag` names ("--hash-file") into `out`, at most
// `max_bytes`. A FIFO, socket, device or directory is refused without being read (see
// common/file_reading.h). False after "kvtierctl: MESSAGE" on stderr (the message names the flag,
// the path and why). Blocks on the file system.
bool ReadInputFile(const std::string& flag, const std::string& path, uint64_t max_bytes,
                   std::string* out);

// The connection to kvtierd built from the global flags (--socket, --address, TLS, --token-file,
// --timeout).
class Connection {
 public:
  // Exit status (kExitUsage) and a message on stderr when the flags are inconsistent.
  static std::unique_ptr<Connection> Open(const Invocation& inv, double default_timeout_s,
                                          int* exit_status);

  kvtier::v1::KvTier::Stub& stub() { return *stub_; }
  kvtier::v1::KvTierAdmin::Stub& admin() { return *admin_; }
  const std::string& address() const { return address_; }
  double timeout_s() const { return timeout_s_; }

  // A context with the token and the deadline (--timeout, or the command's default).
  std::unique_ptr<grpc::ClientContext> Context() const;
  // Prints "kvtierctl: WHAT failed: MESSAGE" (with a hint when kvtierd is unreachable); returns
  // kExitTimeout for DEADLINE_EXCEEDED, kExitFailed otherwise.
  int Fail(const std::string& what, const grpc::Status& status) const;

 private:
  std::string address_;
  std::string token_;
  double timeout_s_ = 5;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kvtier::v1::KvTier::Stub> stub_;
  std::unique_ptr<kvtier::v1::KvTierAdmin::Stub> admin_;
};

// ---- Output ----

// "1.5 GiB", "512 B".
std::string Bytes(uint64_t bytes);
// "83.3%", or "-" when the denominator is 0.
std::string Percent(uint64_t part, uint64_t whole);
// "3.57x", or "-" when the denominator is 0.
std::string Ratio(uint64_t numerator, uint64_t denominator);
std::string NamespaceHex(uint64_t id);  // 16 hex digits
const char* TierName(kvtier::v1::Tier tier);
std::string CodecName(const kvtier::v1::CodecSpec& codec);
std::string Seconds(const google::protobuf::Duration& d);  // "1h02m03s", "0.250s"

// A message as JSON for scripts: field names as in the .proto files, every scalar field present,
// 64-bit counters as numbers, fixed64 ids (namespace and incarnation ids) as 16 hex digits, bytes
// (block hashes) as hex, enums by name, Timestamps as RFC 3339 and Durations as seconds.
Json ToJson(const google::protobuf::Message& message);
// Writes `json` to stdout, indented, with a final newline.
void PrintJson(const Json& json);

// A table with left-aligned first column and right-aligned others, printed to stdout.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// ---- Arguments shared by commands ----

// Parses --namespace=HEX, or --tenant/--model/--partition, or --all into `out`. `required`: one of
// them must be given. Returns kExitOk, or kExitUsage after a message.
int ParseNamespaceSelector(const Invocation& inv, bool required,
                           kvtier::v1::NamespaceSelector* out);
// Parses --tier=gpu|host|disk; `allow` lists the accepted names. Unset: TIER_UNSPECIFIED.
int ParseTier(const Invocation& inv, const std::vector<std::string>& allow, kvtier::v1::Tier* out);
// A positive integer flag; kExitUsage after a message when malformed.
int ParseCount(const Invocation& inv, const std::string& flag, uint64_t* out);
// Hex block hashes, 1 to 32 bytes each.
int ParseHashes(const Invocation& inv, const std::vector<std::string>& texts,
                std::vector<std::string>* out);

// ---- Commands ----

int RunStatus(const Invocation& inv);
int RunStats(const Invocation& inv);
int RunNamespaces(const Invocation& inv);
int RunLookup(const Invocation& inv);
int RunEvict(const Invocation& inv);
int RunClear(const Invocation& inv);
int RunVerify(const Invocation& inv);
int RunDrain(const Invocation& inv);
int RunWatch(const Invocation& inv);
// watch --format=vllm (kv_events_watch.cc).
int RunWatchVllm(const Invocation& inv);
int RunConfigValidate(const Invocation& inv);
int RunConfigDefault(const Invocation& inv);

}  // namespace kvtier::ctl

#endif  // KVTIER_TOOLS_KVTIERCTL_KVTIERCTL_H_
