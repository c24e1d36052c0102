// EngineRef: a request's Enter, copies of its ref and its leaving allocate no memory (the hold is
// counted in the engine, not in a control block per request). Counts this thread's allocations
// with a replaced global operator new, so it is built apart and not under a sanitizer (which
// replaces operator new itself).
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "daemon/service/engine_registry.h"
#include "gtest/gtest.h"

// The replacement pairs malloc with free throughout; GCC cannot see that across inlined calls.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
thread_local bool counting_allocations = false;
thread_local int allocations = 0;
}  // namespace

void* operator new(std::size_t size) {
  if (counting_allocations) ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace kvtier::service {
namespace {

TEST(EngineRefAllocTest, EnterCopyAndLeaveAllocateNothing) {
  EngineRegistry registry({});
  auto engine = std::make_shared<Engine>();
  engine->id = "a1";
  engine->tenant = "alice";
  engine->lease = absl::Minutes(5);
  ASSERT_TRUE(registry.Add(engine).ok());
  const std::string id = "a1", tenant = "alice";
  registry.Enter(id, &tenant).reset();  // the mutex's first use, outside the count
  allocations = 0;
  counting_allocations = true;
  int entered = 0;
  for (int i = 0; i < 100; ++i) {
    EngineRef ref = registry.Enter(id, &tenant);
    EngineRef copy = ref;
    EngineRef moved = std::move(ref);
    entered += moved && copy ? 1 : 0;
  }
  counting_allocations = false;
  EXPECT_EQ(entered, 100);
  EXPECT_EQ(allocations, 0) << "allocations in 100 requests";
  EXPECT_NE(registry.Take(id, /*only_if_expired=*/false), nullptr);
}

}  // namespace
}  // namespace kvtier::service
