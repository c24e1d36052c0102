// BuildInfo as this build made it: the project version, a revision that names a commit of the
// source tree (when it is a git checkout and no revision was given), CUDA architectures exactly
// when the build has CUDA, and the --version text built from them.
#include "common/build_info/build_info.h"

#include <cstdio>
#include <optional>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace kvtier::build_info {
namespace {

// Runs `cmd` in a shell; its stdout, or nullopt when it fails.
std::optional<std::string> Output(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[256];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(out));
}

TEST(BuildInfoTest, VersionIsTheProjectVersion) {
  EXPECT_EQ(Get().version, KVTIER_TEST_PROJECT_VERSION);
}

TEST(BuildInfoTest, RevisionNamesACommitOfTheSourceTree) {
  const std::string revision(Get().revision);
  ASSERT_FALSE(revision.empty());
  if (!std::string(KVTIER_TEST_GIT_REVISION).empty()) {
    EXPECT_EQ(revision, KVTIER_TEST_GIT_REVISION);  // the cache variable wins
    return;
  }
  const std::string git = "git -C '" KVTIER_TEST_SOURCE_DIR "' ";
  const std::optional<std::string> top = Output(git + "rev-parse --show-toplevel 2>/dev/null");
  if (!top.has_value()) {
    EXPECT_EQ(revision, "unknown") << "the source tree is not a git checkout";
    return;
  }
  ASSERT_TRUE(std::regex_match(revision, std::regex("[0-9a-f]{4,40}(-dirty)?"))) << revision;
  // A commit of this repository (a later commit since the build does not make it wrong).
  const std::string hash(absl::StripSuffix(revision, "-dirty"));
  EXPECT_TRUE(Output(git + "cat-file -e " + hash + "^{commit} 2>/dev/null").has_value())
      << revision << " is not a commit of " KVTIER_TEST_SOURCE_DIR;
}

TEST(BuildInfoTest, CudaArchitecturesExactlyWithCuda) {
  const BuildInfo& b = Get();
  if (KVTIER_TEST_HAVE_CUDA) {
    EXPECT_TRUE(absl::StartsWith(b.cuda_archs, "sm_")) << b.cuda_archs;
    EXPECT_FALSE(b.cuda_version.empty());
  } else {
    EXPECT_EQ(b.cuda_archs, "");
    EXPECT_EQ(b.cuda_version, "");
  }
  EXPECT_FALSE(b.liburing_version.empty());  // liburing is a required dependency
  EXPECT_FALSE(b.compiler.empty());
}

TEST(BuildInfoTest, VersionTextStartsWithProgramVersionAndRevision) {
  const BuildInfo& b = Get();
  const std::string text = VersionText("kvtierd", {{"kernel", "grants io_uring rings"}});
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  ASSERT_GE(lines.size(), 6u) << text;
  EXPECT_EQ(lines[0],
            "kvtierd " + std::string(b.version) + " (revision " + std::string(b.revision) + ")");
  EXPECT_TRUE(absl::StartsWith(lines[1], "  build: ")) << text;
  EXPECT_TRUE(absl::StartsWith(lines[2], "  cuda: ")) << text;
  if (b.cuda_archs.empty()) {
    EXPECT_EQ(lines[2], "  cuda: no (built without CUDA: shared-memory pools only)");
  }
  EXPECT_EQ(lines[3], "  io_uring: liburing " + std::string(b.liburing_version));
  EXPECT_TRUE(absl::StartsWith(lines[4], "  tls: ")) << text;
  EXPECT_EQ(lines[5], "  kernel: grants io_uring rings");
  EXPECT_TRUE(absl::EndsWith(text, "\n"));
}

}  // namespace
}  // namespace kvtier::build_info
