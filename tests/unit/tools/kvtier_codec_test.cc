// End-to-end tests of the `kvtier-codec` executable: each test runs the real binary (built by the
// same CMake build, path in KVTIER_CODEC_BINARY) in a fresh temporary directory and checks what a
// user sees: files and their sizes, stdout JSON, exit codes and error messages.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/coding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace kvtier::tools {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kBinary[] = KVTIER_CODEC_BINARY;

// The test layout: GQA, 2 layers x 2 KV heads x head_dim 32 x 16 tokens, BF16, RoPE on [16, 32).
// A flat page is 2 layers * (K + V) * 2 heads * 16 tokens * 32 elements * 2 bytes.
constexpr uint64_t kPageBytes = 2 * 2 * 2 * 16 * 32 * 2;
constexpr int kPages = 3;

struct ToolResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::filesystem::path& path, absl::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << path;
}

class KvtierCodecToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::path(::testing::TempDir()) / "kvtier_codec_XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(absl::string_view name) const { return (dir_ / std::string(name)).string(); }

  // Runs kvtier-codec with `args`; stdout and stderr are captured through files.
  ToolResult Run(const std::vector<std::string>& args) {
    const std::string out_path = Path("stdout.txt");
    const std::string err_path = Path("stderr.txt");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(kBinary));
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int spawn_error = posix_spawn(&pid, kBinary, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ToolResult result;
    if (spawn_error != 0) {
      ADD_FAILURE() << "cannot run " << kBinary << ": " << std::strerror(spawn_error);
      return result;
    }
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) {
      ADD_FAILURE() << "waitpid failed: " << std::strerror(errno);
      return result;
    }
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.out = ReadFile(out_path);
    result.err = ReadFile(err_path);
    return result;
  }

  // Writes the test layout to L.json and kPages pages of finite BF16 values to pages.bin.
  void WriteLayoutAndPages() {
    ToolResult layout =
        Run({"layout", "--family", "gqa", "--layers", "2", "--kv-heads=2", "--head-dim", "32",
             "--tokens", "16", "--rope-start", "16", "--rope-len=16"});
    ASSERT_EQ(layout.exit_code, 0) << layout.err;
    WriteFile(dir_ / "L.json", layout.out);
    std::string pages(kPageBytes * kPages, '\0');
    for (size_t i = 0; i < pages.size() / 2; ++i) {
      const float value = 3.0f * std::sin(0.37f * static_cast<float>(i)) + 0.01f;
      uint32_t bits;
      std::memcpy(&bits, &value, sizeof(bits));
      EncodeFixed16(pages.data() + 2 * i,
                    static_cast<uint16_t>(bits >> 16));  // BF16 by truncation: exact, finite
    }
    WriteFile(dir_ / "pages.bin", pages);
  }

  // Encodes pages.bin into `blocks` and returns the block size that `inspect --json` reports.
  uint64_t EncodeAndInspect(absl::string_view codec, absl::string_view blocks) {
    ToolResult encode = Run({"encode", "--layout", Path("L.json"), "--codec", std::string(codec),
                             "--in", Path("pages.bin"), "--out", Path(blocks)});
    EXPECT_EQ(encode.exit_code, 0) << encode.err;
    EXPECT_THAT(encode.err, AllOf(HasSubstr("3 pages"), HasSubstr("ratio")));
    ToolResult inspect = Run({"inspect", "--in", Path(blocks), "--json"});
    EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
    nlohmann::json header = nlohmann::json::parse(inspect.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(header.is_discarded()) << inspect.out;
    if (header.is_discarded()) return 0;
    EXPECT_EQ(header.value("codec", ""), absl::StrCat(absl::StripSuffix(codec, "+rope")));
    EXPECT_EQ(header["buffers"].size(), 4u);
    return header.value("block_bytes", uint64_t{0});
  }

  std::filesystem::path dir_;
};

TEST_F(KvtierCodecToolTest, PresetsPrintLayoutJson) {
  ToolResult qwen = Run({"layout", "--preset", "qwen3-8b"});
  ASSERT_EQ(qwen.exit_code, 0) << qwen.err;
  nlohmann::json j = nlohmann::json::parse(qwen.out);
  EXPECT_EQ(j["tokens_per_page"], 32);
  ASSERT_EQ(j["buffers"].size(), 72u);  // K and V of 36 layers
  EXPECT_EQ(j["buffers"][0]["head_dim"], 128);
  EXPECT_EQ(j["buffers"][0]["heads"], 8);

  ToolResult deepseek = Run({"layout", "--preset=deepseek-v3", "--layers", "2"});
  ASSERT_EQ(deepseek.exit_code, 0) << deepseek.err;
  j = nlohmann::json::parse(deepseek.out);
  EXPECT_EQ(j["tokens_per_page"], 64);
  ASSERT_EQ(j["buffers"].size(), 4u);  // latent and indexer of 2 layers (--layers overrides)
  EXPECT_EQ(j["buffers"][0]["head_dim"], 576);
}

TEST_F(KvtierCodecToolTest, RawRoundTripsFilesExactly) {
  WriteLayoutAndPages();
  const uint64_t block_bytes = EncodeAndInspect("raw", "blocks.bin");
  ASSERT_GT(block_bytes, kPageBytes);  // header plus every byte
  EXPECT_EQ(std::filesystem::file_size(dir_ / "blocks.bin"), kPages * block_bytes);

  ToolResult decode = Run({"decode", "--layout", Path("L.json"), "--in", Path("blocks.bin"),
                           "--out", Path("decoded.bin")});
  ASSERT_EQ(decode.exit_code, 0) << decode.err;
  EXPECT_EQ(ReadFile(dir_ / "decoded.bin"), ReadFile(dir_ / "pages.bin"));
}

TEST_F(KvtierCodecToolTest, Nvfp4EncodeDecodeAndRoundtripReport) {
  WriteLayoutAndPages();
  const uint64_t block_bytes = EncodeAndInspect("nvfp4", "blocks.bin");
  ASSERT_GT(block_bytes, 0u);
  EXPECT_LT(block_bytes, kPageBytes);
  EXPECT_EQ(std::filesystem::file_size(dir_ / "blocks.bin"), kPages * block_bytes);

  ToolResult decode = Run({"decode", "--layout", Path("L.json"), "--in", Path("blocks.bin"),
                           "--out", Path("decoded.bin")});
  ASSERT_EQ(decode.exit_code, 0) << decode.err;
  EXPECT_EQ(std::filesystem::file_size(dir_ / "decoded.bin"), kPages * kPageBytes);
  EXPECT_NE(ReadFile(dir_ / "decoded.bin"), ReadFile(dir_ / "pages.bin"));  // lossy

  ToolResult roundtrip = Run({"roundtrip", "--layout", Path("L.json"), "--codec", "nvfp4", "--in",
                              Path("pages.bin"), "--trips", "2", "--json"});
  ASSERT_EQ(roundtrip.exit_code, 0) << roundtrip.err;
  nlohmann::json report = nlohmann::json::parse(roundtrip.out);
  EXPECT_EQ(report["pages"], kPages);
  EXPECT_EQ(report["trips"], 2);
  EXPECT_EQ(report["block_bytes"], block_bytes);
  ASSERT_EQ(report["buffers"].size(), 4u);
  for (const nlohmann::json& buffer : report["buffers"]) {
    EXPECT_FALSE(buffer["lossless"].get<bool>());
    EXPECT_GT(buffer["rel_rmse"].get<double>(), 0.0) << buffer;
    EXPECT_LT(buffer["rel_rmse"].get<double>(), 0.2) << buffer;
    EXPECT_GT(buffer["snr_db"].get<double>(), 14.0) << buffer;
  }
  const nlohmann::json& total = report["total"];
  EXPECT_DOUBLE_EQ(total["ratio"].get<double>(),
                   static_cast<double>(kPageBytes) / static_cast<double>(block_bytes));
  double share_sum = 0;
  for (const nlohmann::json& buffer : report["buffers"]) {
    share_sum += buffer["block_share_bytes"].get<double>();
  }
  EXPECT_NEAR(share_sum, static_cast<double>(block_bytes), 1e-6 * block_bytes);

  // Lossless RoPE keeps elements [16, 32) of K exact, so K loses less than V.
  ToolResult rope = Run({"roundtrip", "--layout", Path("L.json"), "--codec", "nvfp4+rope",
                         "--generate", "2", "--sigma", "0.5", "--seed", "7", "--json"});
  ASSERT_EQ(rope.exit_code, 0) << rope.err;
  report = nlohmann::json::parse(rope.out);
  EXPECT_LT(report["buffers"][0]["rel_rmse"].get<double>(),
            report["buffers"][1]["rel_rmse"].get<double>());
}

TEST_F(KvtierCodecToolTest, RawRoundtripReportsExactness) {
  WriteLayoutAndPages();
  ToolResult roundtrip =
      Run({"roundtrip", "--layout", Path("L.json"), "--codec", "raw", "--generate", "2", "--json"});
  ASSERT_EQ(roundtrip.exit_code, 0) << roundtrip.err;
  nlohmann::json report = nlohmann::json::parse(roundtrip.out);
  EXPECT_TRUE(report["total"]["exact"].get<bool>());
  EXPECT_EQ(report["total"]["rel_rmse"], 0.0);
  EXPECT_TRUE(report["total"]["snr_db"].is_null());  // infinite

  ToolResult text =
      Run({"roundtrip", "--layout", Path("L.json"), "--codec", "raw", "--generate", "1"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out,
              AllOf(HasSubstr("k.0"), HasSubstr("v.1"), HasSubstr("total"), HasSubstr("inf")));
}

TEST_F(KvtierCodecToolTest, FlippedByteFailsDecodeNamingBlockAndOffset) {
  WriteLayoutAndPages();
  const uint64_t block_bytes = EncodeAndInspect("nvfp4", "blocks.bin");
  ASSERT_GT(block_bytes, 0u);
  std::string blocks = ReadFile(dir_ / "blocks.bin");
  blocks[block_bytes + block_bytes / 3] ^= 0x10;  // inside block 1's payload
  WriteFile(dir_ / "blocks.bin", blocks);

  ToolResult decode = Run({"decode", "--layout", Path("L.json"), "--in", Path("blocks.bin"),
                           "--out", Path("decoded.bin")});
  EXPECT_EQ(decode.exit_code, 1);
  EXPECT_THAT(decode.err,
              AllOf(HasSubstr("kvtier-codec: "),
                    HasSubstr(absl::StrCat("blocks.bin: block 1 at offset ", block_bytes, ": ")),
                    HasSubstr("DATA_LOSS")));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "decoded.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "decoded.bin.tmp"));
}

TEST_F(KvtierCodecToolTest, TruncatedFilesFailNamingTheirSize) {
  WriteLayoutAndPages();
  const uint64_t block_bytes = EncodeAndInspect("nvfp4", "blocks.bin");
  ASSERT_GT(block_bytes, 0u);

  std::string pages = ReadFile(dir_ / "pages.bin");
  WriteFile(dir_ / "short_pages.bin", absl::string_view(pages).substr(0, pages.size() - 1));
  ToolResult encode = Run({"encode", "--layout", Path("L.json"), "--codec", "nvfp4", "--in",
                           Path("short_pages.bin"), "--out", Path("x.bin")});
  EXPECT_EQ(encode.exit_code, 1);
  EXPECT_THAT(encode.err, AllOf(HasSubstr("short_pages.bin"),
                                HasSubstr(absl::StrCat("size ", pages.size() - 1, " bytes")),
                                HasSubstr(absl::StrCat(kPageBytes))));

  std::string blocks = ReadFile(dir_ / "blocks.bin");
  WriteFile(dir_ / "short_blocks.bin", absl::string_view(blocks).substr(0, blocks.size() - 16));
  ToolResult decode = Run({"decode", "--layout", Path("L.json"), "--in", Path("short_blocks.bin"),
                           "--out", Path("x.pages")});
  EXPECT_EQ(decode.exit_code, 1);
  EXPECT_THAT(decode.err, AllOf(HasSubstr("short_blocks.bin"),
                                HasSubstr(absl::StrCat("size ", blocks.size() - 16, " bytes")),
                                HasSubstr(absl::StrCat(block_bytes))));
}

TEST_F(KvtierCodecToolTest, BlocksOfAnotherLayoutFailDecode) {
  WriteLayoutAndPages();
  ASSERT_GT(EncodeAndInspect("nvfp4", "blocks.bin"), 0u);
  ToolResult other = Run({"layout", "--family", "gqa", "--layers", "2", "--kv-heads", "2",
                          "--head-dim", "32", "--tokens", "16", "--dtype", "fp16"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  WriteFile(dir_ / "other.json", other.out);
  ToolResult decode = Run({"decode", "--layout", Path("other.json"), "--in", Path("blocks.bin"),
                           "--out", Path("x.pages")});
  EXPECT_EQ(decode.exit_code, 1);
  EXPECT_THAT(decode.err, AllOf(HasSubstr("blocks.bin"), HasSubstr("fingerprint")));
}

// A FIFO or a directory given as an input is refused at once, naming it (the tool used to wait
// in open() for a writer to the FIFO; the timeout turns such a hang into a failure).
TEST_F(KvtierCodecToolTest, InputsThatAreNotRegularFilesAreRefusedAtOnce) {
  const std::string fifo = Path("input.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", "--in", fifo},
        std::vector<std::string>{"decode", "--layout", fifo, "--in", fifo, "--out",
                                 Path("out.bin")}}) {
    std::string cmd = "timeout -s KILL 20 " + std::string(kBinary);
    for (const std::string& arg : args) cmd += " '" + arg + "'";
    cmd += " > '" + Path("output.txt") + "' 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << cmd;
    EXPECT_EQ(WEXITSTATUS(status), 1) << cmd << " (137: it hung on the FIFO)";
    EXPECT_THAT(ReadFile(Path("output.txt")),
                HasSubstr("input file " + fifo + " is a FIFO (named pipe), not a regular file"))
        << cmd;
  }
  ToolResult directory = Run({"inspect", "--in", dir_.string()});
  EXPECT_EQ(directory.exit_code, 1);
  EXPECT_THAT(directory.err, HasSubstr(dir_.string() + " is a directory, not a regular file"));
}

TEST_F(KvtierCodecToolTest, UsageErrorsExitWithCodeTwo) {
  WriteLayoutAndPages();
  ToolResult unknown_flag = Run({"encode", "--layout", Path("L.json"), "--codec", "nvfp4", "--in",
                                 Path("pages.bin"), "--out", Path("x.bin"), "--frobnicate=3"});
  EXPECT_EQ(unknown_flag.exit_code, 2);
  EXPECT_THAT(unknown_flag.err, HasSubstr("unknown flag --frobnicate"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.bin"));

  EXPECT_EQ(Run({"encode", "--layout"}).exit_code, 2);                            // missing value
  EXPECT_EQ(Run({"encode", "--layout", Path("L.json")}).exit_code, 2);            // missing flags
  EXPECT_EQ(Run({"layout", "--family", "mla", "--kv-heads", "8"}).exit_code, 2);  // wrong family
  EXPECT_EQ(Run({"layout", "--preset", "llama"}).exit_code, 2);
  EXPECT_EQ(Run({"roundtrip", "--layout", Path("L.json"), "--codec", "nvfp9", "--generate", "1"})
                .exit_code,
            2);
  EXPECT_EQ(Run({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(Run({}).exit_code, 2);

  ToolResult twice = Run({"inspect", "--in", Path("pages.bin"), "--in", Path("pages.bin")});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, HasSubstr("kvtier-codec: --in given more than once"));
  ToolResult no_value = Run({"inspect", "--in"});
  EXPECT_THAT(no_value.err, HasSubstr("kvtier-codec: --in needs a value"));
  EXPECT_THAT(no_value.err, HasSubstr("usage: kvtier-codec inspect --in blocks.bin"));

  ToolResult help = Run({"decode", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, AllOf(HasSubstr("usage: kvtier-codec decode"), HasSubstr("--layout FILE"),
                              HasSubstr("payload checksums")));
  EXPECT_EQ(Run({"help", "decode"}).out, help.out);
  ToolResult top = Run({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_THAT(top.out, AllOf(HasSubstr("  roundtrip"), HasSubstr("2 usage error")));
}

TEST_F(KvtierCodecToolTest, FlagsTakeTheirValueAfterASpaceOrAnEqualsSign) {
  WriteLayoutAndPages();
  ToolResult spaced = Run({"encode", "--layout", Path("L.json"), "--codec", "nvfp4", "--in",
                           Path("pages.bin"), "--out", Path("a.bin")});
  ASSERT_EQ(spaced.exit_code, 0) << spaced.err;
  ToolResult joined = Run({"encode", "--layout=" + Path("L.json"), "--codec=nvfp4",
                           "--in=" + Path("pages.bin"), "--out=" + Path("b.bin")});
  ASSERT_EQ(joined.exit_code, 0) << joined.err;
  EXPECT_EQ(ReadFile(dir_ / "a.bin"), ReadFile(dir_ / "b.bin"));
  EXPECT_FALSE(ReadFile(dir_ / "a.bin").empty());
}

TEST_F(KvtierCodecToolTest, InspectPrintsTheChosenBlock) {
  WriteLayoutAndPages();
  ASSERT_GT(EncodeAndInspect("nvfp4x2", "blocks.bin"), 0u);
  ToolResult text = Run({"inspect", "--in", Path("blocks.bin"), "--block", "2"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, AllOf(HasSubstr("block 2 of 3"), HasSubstr("nvfp4x2")));
  ToolResult out_of_range = Run({"inspect", "--in", Path("blocks.bin"), "--block", "3"});
  EXPECT_EQ(out_of_range.exit_code, 1);
  EXPECT_THAT(out_of_range.err, HasSubstr("block 3 out of range"));
}

}  // namespace
}  // namespace kvtier::tools
