// The subcommands of `kvtier-codec` and the helpers they share. Each Run* function takes the parsed
// flags of its command, writes its result to stdout (diagnostics to stderr) and returns a status
// whose message is printed as "kvtier-codec: <message>"; UsageError statuses exit with code 2,
// all others with code 1. Single-threaded.
#ifndef KVTIER_TOOLS_CODEC_COMMANDS_H_
#define KVTIER_TOOLS_CODEC_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codec/codec.h"
#include "codec/cold_block.h"
#include "codec/page_layout.h"
#include "common/cli/command_line.h"

namespace kvtier::tools {

absl::Status RunLayout(const cli::Values& flags);     // layout_command.cc
absl::Status RunEncode(const cli::Values& flags);     // block_commands.cc
absl::Status RunDecode(const cli::Values& flags);     // block_commands.cc
absl::Status RunInspect(const cli::Values& flags);    // block_commands.cc
absl::Status RunRoundtrip(const cli::Values& flags);  // roundtrip_command.cc
absl::Status RunDemo(const cli::Values& flags);       // demo_command.cc

// Reads and validates a layout JSON file; errors are prefixed with the path.
absl::StatusOr<codec::PageLayout> LoadLayoutFile(const std::string& path);

// The codec named by --codec (and --alignment, when given). Usage errors for bad spellings.
absl::StatusOr<codec::CodecSpec> CodecSpecFromFlags(const cli::Values& flags);

// Codec::Create with an error that names the codec and the layout file.
absl::StatusOr<std::unique_ptr<codec::Codec>> CreateCodec(const codec::PageLayout& layout,
                                                          const codec::CodecSpec& spec,
                                                          absl::string_view layout_name);

// Context for a status, keeping its code and showing its name, since the tool prints only
// messages: "<context>: <CODE>: <message>" (common/annotate.h).
absl::Status WithContext(absl::string_view context, const absl::Status& status);

// "<path>: block <index> at offset <offset>: <CODE>: <codec message>".
absl::Status BlockError(absl::string_view path, uint64_t index, uint64_t offset,
                        const absl::Status& status);

// Reads and checks the header of the first block of a block file, which gives the file's block
// size. DataLoss names the file, "block 0 at offset 0" and the codec's reason.
absl::StatusOr<codec::ColdBlockHeader> ProbeFirstBlockHeader(const std::string& path);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_CODEC_COMMANDS_H_
