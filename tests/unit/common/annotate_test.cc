// Annotate: the context goes in front of the message, the code and payloads stay, and OK passes
// through untouched.
#include "common/annotate.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

TEST(AnnotateTest, PutsTheContextBeforeTheMessageAndKeepsTheCode) {
  const absl::Status annotated =
      Annotate(absl::DataLossError("header checksum mismatch"), "block file 'b.bin'");
  EXPECT_EQ(annotated.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(annotated.message(), "block file 'b.bin': header checksum mismatch");
}

TEST(AnnotateTest, NestsOutwards) {
  const absl::Status inner = Annotate(absl::NotFoundError("no such key"), "layer 3");
  const absl::Status outer = Annotate(inner, "calibration file 'c.pt'");
  EXPECT_EQ(outer.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(outer.message(), "calibration file 'c.pt': layer 3: no such key");
}

TEST(AnnotateTest, LeavesOkAlone) {
  EXPECT_TRUE(Annotate(absl::OkStatus(), "anything").ok());
  EXPECT_EQ(Annotate(absl::OkStatus(), "anything").message(), "");
}

TEST(AnnotateTest, KeepsPayloads) {
  // common/cli marks usage errors with a payload; an annotated usage error must still be one.
  absl::Status status = absl::InvalidArgumentError("flag --codec: unknown codec 'x'");
  status.SetPayload("kvtier.test/marker", absl::Cord("1"));
  const absl::Status annotated = Annotate(status, "encode");
  ASSERT_TRUE(annotated.GetPayload("kvtier.test/marker").has_value());
  EXPECT_EQ(std::string(*annotated.GetPayload("kvtier.test/marker")), "1");
}

}  // namespace
}  // namespace kvtier
