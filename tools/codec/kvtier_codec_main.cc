// kvtier-codec: command-line access to the cold-block codecs: print page layouts, encode and decode
// files of pages, inspect block headers, measure round-trip error, and run the first-run demo.
// Exit codes: 0 success, 1 runtime error (bad data, I/O), 2 usage error. Errors go to stderr as
// "kvtier-codec: <message>".
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/cli/command_line.h"
#include "tools/codec/commands.h"

namespace kvtier::tools {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntimeError = 1;

// One flag of a command: a switch when `value_name` is empty.
struct FlagDef {
  std::string name;
  std::string value_name;  // e.g. "N", "FILE"
  std::string help;        // one line
};

struct Command {
  absl::string_view name;
  absl::string_view summary;  // one line for `kvtier-codec help`
  absl::string_view synopsis;
  absl::string_view description;
  std::vector<FlagDef> flags;
  absl::Status (*run)(const cli::Values& flags);
};

const std::vector<Command>& Commands() {
  static const std::vector<Command>* const commands = new std::vector<Command>{
      {"layout",
       "print the JSON form of a page layout (a family or a model preset)",
       "layout (--family gqa|mla|hybrid | --preset qwen3-8b|deepseek-v3) [geometry flags]",
       "Prints the JSON form of a page layout (codec/FORMAT.md, \"Layout JSON\") on stdout.\n"
       "Presets: qwen3-8b = gqa, 36 layers, 8 KV heads, head_dim 128, 32 tokens, bf16, RoPE over\n"
       "the whole K row; deepseek-v3 = mla, 61 layers, kv_lora_rank 512, rope_dim 64, 64 tokens,\n"
       "bf16, a lossless indexer of 132 bytes per token. Flags given with a preset override it.\n"
       "Flags for another family than the chosen one are an error.",
       {{"family", "F", "gqa, mla or hybrid"},
        {"preset", "P", "qwen3-8b or deepseek-v3"},
        {"layers", "N", "number of layers (all families)"},
        {"kv-heads", "H", "KV heads per layer (gqa, hybrid)"},
        {"head-dim", "D", "elements per K/V row (gqa, hybrid)"},
        {"tokens", "T", "tokens per page (all families)"},
        {"dtype", "T", "bf16 (default), fp16 or fp8_e4m3"},
        {"rope-start", "S", "first RoPE element of a K row (gqa, hybrid; default 0)"},
        {"rope-len", "L", "RoPE elements per K row; 0 = the whole row (gqa, hybrid; default 0)"},
        {"kv-lora-rank", "R", "NoPE width of the MLA latent (mla; default 512)"},
        {"rope-dim", "R", "RoPE width of the MLA latent (mla; default 64)"},
        {"indexer-bytes-per-token", "B", "adds a lossless indexer buffer per layer (mla)"},
        {"attention-layers", "LIST", "comma-separated attention layers, e.g. 3,7,11 (hybrid)"},
        {"state-bytes", "B", "recurrent state bytes per state layer per page (hybrid)"}},
       &RunLayout},
      {"encode",
       "encode a file of flat pages into a file of cold blocks",
       "encode --layout L.json --codec C [--alignment A] --in pages.bin --out blocks.bin",
       "Encodes a file of flat pages (FlatPageBytes(layout) bytes each: every buffer's rows back\n"
       "to back in layout order, little-endian) into a file of cold blocks, one per page. Prints "
       "a\n"
       "summary (pages, hot bytes, block bytes, ratio) on stderr.",
       {{"layout", "FILE", "layout JSON (from 'kvtier-codec layout')"},
        {"codec", "C", "raw, nvfp4, nvfp4+rope, nvfp4x2 or nvfp4x2+rope"},
        {"alignment", "A",
         "block size alignment in bytes, a power of two in [16, 65536] "
         "(default 4096)"},
        {"in", "FILE", "input pages"},
        {"out", "FILE", "output blocks (written as FILE.tmp, renamed when complete)"}},
       &RunEncode},
      {"decode",
       "decode a file of cold blocks into a file of flat pages, checking each",
       "decode --layout L.json --in blocks.bin --out pages.bin [--codec C [--alignment A]]",
       "Decodes a file of cold blocks into a file of flat pages. The codec and alignment are read\n"
       "from the first block's header unless --codec is given. Every block is checked (header and\n"
       "payload checksums, codec, layout) before its page is written; the first bad block stops\n"
       "the command with its index and byte offset.",
       {{"layout", "FILE", "layout JSON the blocks were written for"},
        {"in", "FILE", "input blocks"},
        {"out", "FILE", "output pages (written as FILE.tmp, renamed when complete)"},
        {"codec", "C", "expected codec (default: from the first block)"},
        {"alignment", "A", "expected block alignment, with --codec (default 4096)"}},
       &RunDecode},
      {"inspect",
       "print the header of one block of a block file",
       "inspect --in blocks.bin [--block N] [--json]",
       "Prints the header of one block of a block file (default the first), human-readable or as\n"
       "JSON. Needs no layout: the block size is found from the first header.",
       {{"in", "FILE", "block file"},
        {"block", "N", "index of the block to show (default 0)"},
        {"json", "", "print the header as JSON"}},
       &RunInspect},
      {"roundtrip",
       "encode and decode pages, report error and compression per buffer",
       "roundtrip --layout L.json --codec C (--in pages.bin | --generate N [--sigma S] "
       "[--seed X]) [--trips K] [--json]",
       "Encodes and decodes every page K times (each trip starts from the previous trip's output)\n"
       "and compares the last trip with the input, per buffer: max abs error, relative RMSE\n"
       "sqrt(sum (x-y)^2 / sum x^2), SNR 10*log10(sum x^2 / sum (x-y)^2) in dB (inf when exact),\n"
       "compression ratio and bytes. NaN/Inf inputs are left out of the error sums and counted.\n"
       "Lossless buffers report whether their bytes came back exactly. A buffer's block bytes are\n"
       "its own sections (FP4 data, scales, lossless row parts, whole lossless data) plus a share\n"
       "of header and padding proportional to them; ratio = hot bytes / block bytes. In --json,\n"
       "values that are infinite (SNR of an exact round trip) are null.",
       {{"layout", "FILE", "layout JSON"},
        {"codec", "C", "raw, nvfp4, nvfp4+rope, nvfp4x2 or nvfp4x2+rope"},
        {"alignment", "A", "block size alignment in bytes (default 4096)"},
        {"in", "FILE", "pages to round-trip"},
        {"generate", "N", "round-trip N generated pages instead: N(0, sigma) values"},
        {"sigma", "S", "standard deviation of generated values (default 1)"},
        {"seed", "X", "seed of the generator (default 1)"},
        {"trips", "K", "encode/decode cycles per page (default 1)"},
        {"json", "", "print the report as JSON"}},
       &RunRoundtrip},
      {"demo",
       "the first-run demonstration on Qwen3-8B and DeepSeek-V3 pages",
       "demo [--pages N] [--seed X]",
       "The first-run demonstration: generates Qwen3-8B and DeepSeek-V3 pages (N(0, 1) values "
       "with\n"
       "two outlier channels x20), runs raw, nvfp4, nvfp4+rope and nvfp4x2 over them and prints\n"
       "block size, compression, error and round-trip stability for each.",
       {{"pages", "N", "pages per model (default 8)"}, {"seed", "X", "generator seed (default 1)"}},
       &RunDemo},
  };
  return *commands;
}

int Main(int argc, char** argv) {
  cli::CommandLine command_line("kvtier-codec");
  command_line.root().SetFooter(
      "exit codes: 0 success, 1 runtime error, 2 usage error.\n"
      "Flags take their value as '--flag value' or '--flag=value'.");
  for (const Command& command : Commands()) {
    cli::Command& sub = command_line.root().AddSubcommand(command.name, command.summary);
    sub.SetUsage(command.synopsis).SetDescription(command.description);
    for (const FlagDef& flag : command.flags) {
      if (flag.value_name.empty()) {
        sub.AddSwitch(flag.name, flag.help);
      } else {
        sub.AddFlag(flag.name, flag.value_name, flag.help);
      }
    }
  }
  cli::Values flags;
  if (std::optional<int> exit_status = command_line.Parse(argc, argv, &flags)) {
    return *exit_status;
  }
  for (const Command& command : Commands()) {
    if (command.name != flags.command()) continue;
    absl::Status status = command.run(flags);
    if (status.ok()) return kExitOk;
    if (cli::IsUsageError(status)) return flags.PrintUsageError(status.message());
    absl::FPrintF(stderr, "kvtier-codec: %s\n", status.message());
    return kExitRuntimeError;
  }
  return flags.PrintUsageError("no command");
}

}  // namespace
}  // namespace kvtier::tools

int main(int argc, char** argv) { return kvtier::tools::Main(argc, argv); }
