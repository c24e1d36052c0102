// GPU discovery. On the GPU machine this checks the device is one the kernels target (sm_80+,
// mapped host memory); elsewhere it checks the precise error and skips.
#include "kernels/device.h"

#include "gtest/gtest.h"

namespace kvtier::kernels {
namespace {

TEST(DeviceTest, ListsUsableDevicesOrExplainsWhyNot) {
  auto devices = ListDevices();
  if (!BuiltWithCuda()) {
    ASSERT_TRUE(absl::IsUnimplemented(devices.status())) << devices.status();
    GTEST_SKIP() << "built without CUDA: " << devices.status().message();
  }
  if (!devices.ok()) {
    ASSERT_TRUE(absl::IsUnavailable(devices.status())) << devices.status();
    EXPECT_NE(devices.status().message().find("CUDA"), absl::string_view::npos);
    GTEST_SKIP() << devices.status().message();
  }
  ASSERT_FALSE(devices->empty());
  for (const DeviceInfo& d : *devices) {
    EXPECT_GE(d.sm_major, 8) << d.name << " is older than sm_80";
    EXPECT_GT(d.memory_bytes, 0u);
    EXPECT_TRUE(d.can_map_host_memory) << d.name;
    RecordProperty("device", d.name);
  }
}

}  // namespace
}  // namespace kvtier::kernels
