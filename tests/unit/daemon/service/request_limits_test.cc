// RequestLimits: the contract's lengths at their exact bounds, the messages that quote a value
// cut short (never a megabyte back to the client), enum values outside their enums, and the
// namespace selector's members.
#include "daemon/service/request_limits.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kvtier::service {
namespace {

TEST(RequestLimitsTest, LengthsAtTheirBounds) {
  EXPECT_TRUE(CheckEngineId(std::string(kMaxEngineIdBytes, 'e')).ok());
  EXPECT_TRUE(CheckEngineId("e").ok());
  absl::Status empty = CheckEngineId("");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.message(), "engine_id is required");
  absl::Status longer = CheckEngineId(std::string(kMaxEngineIdBytes + 1, 'e'));
  EXPECT_EQ(longer.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(longer.message(),
            "engine_id '" + std::string(64, 'e') + "'... (65 bytes) is longer than 64 bytes");

  EXPECT_TRUE(CheckRequestId("request_id", std::string(kMaxRequestIdBytes, 'r')).ok());
  EXPECT_EQ(CheckRequestId("release.request_ids[3]", "").message(),
            "release.request_ids[3] is required");
  EXPECT_EQ(CheckRequestId("request_id", std::string(kMaxRequestIdBytes + 1, 'r')).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_TRUE(CheckLength("name", "", 0, 4).ok());  // optional: empty is fine
  EXPECT_EQ(CheckLength("name", "ab", 3, 4).message(), "name 'ab' is shorter than 3 bytes");
}

TEST(RequestLimitsTest, AHugeOrBinaryValueComesBackCutAndEscaped) {
  const std::string huge(1 << 20, 'e');
  absl::Status st = CheckEngineId(huge);
  EXPECT_EQ(st.message(),
            "engine_id '" + std::string(64, 'e') + "'... (1048576 bytes) is longer than 64 bytes");
  EXPECT_LT(st.message().size(), 200u);
  EXPECT_EQ(CheckLength("name", std::string("a\0z'", 4), 5, 8).message(),
            "name 'a\\x00z\\'' is shorter than 5 bytes");
}

TEST(RequestLimitsTest, WriteOptionsMustBeValuesOfTheirEnums) {
  EXPECT_TRUE(CheckWriteOptions(v1::Priority(), v1::WriteAck()).ok());
  absl::Status priority = CheckWriteOptions(static_cast<v1::Priority>(999), v1::WriteAck());
  EXPECT_EQ(priority.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(priority.message(), "priority 999 is not a Priority");
  absl::Status ack = CheckWriteOptions(v1::Priority(), static_cast<v1::WriteAck>(-1));
  EXPECT_EQ(ack.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ack.message(), "ack -1 is not a WriteAck");
}

TEST(RequestLimitsTest, Selectors) {
  v1::NamespaceSelector selector;
  EXPECT_TRUE(CheckSelector(selector).ok());  // unset: the method decides
  selector.set_namespace_id(42);
  EXPECT_TRUE(CheckSelector(selector).ok());
  selector.set_all(true);
  EXPECT_TRUE(CheckSelector(selector).ok());
  selector.set_all(false);
  absl::Status nothing = CheckSelector(selector);
  EXPECT_EQ(nothing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nothing.message(),
            "namespaces.all = false selects nothing: set it to true, or set namespace_id or match");

  selector.mutable_match()->set_tenant(std::string(kMaxTenantBytes, 't'));
  selector.mutable_match()->set_model(std::string(kMaxModelBytes, 'm'));
  selector.mutable_match()->set_partition(std::string(kMaxPartitionBytes, 'p'));
  EXPECT_TRUE(CheckSelector(selector).ok());
  selector.mutable_match()->set_partition(std::string(kMaxPartitionBytes + 1, 'p'));
  absl::Status partition = CheckSelector(selector);
  EXPECT_EQ(partition.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(partition.message(), "namespaces.match.partition '")) << partition;
  selector.mutable_match()->clear_partition();
  selector.mutable_match()->set_model(std::string(kMaxModelBytes + 1, 'm'));
  EXPECT_TRUE(absl::StartsWith(CheckSelector(selector).message(), "namespaces.match.model '"));
  selector.mutable_match()->set_tenant(std::string(kMaxTenantBytes + 1, 't'));
  EXPECT_TRUE(absl::StartsWith(CheckSelector(selector).message(), "namespaces.match.tenant '"))
      << "the tenant is checked first";
}

}  // namespace
}  // namespace kvtier::service
