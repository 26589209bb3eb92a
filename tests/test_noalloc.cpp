// The evaluation inside search allocates nothing per configuration once its cache is warm:
// global operator new is counted while a second pass costs the same layouts.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "capsim/core/eval_cache.hpp"
#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/step.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"
#include "eval_layouts.hpp"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
int* volatile escaped = nullptr;
}  // namespace

// The replacements below pair malloc with free by design; GCC's mismatched-new-delete
// check sees only the replaced operator new's name.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace capsim {
namespace {

void check_model(const std::string& model, int64_t gpus, int64_t global_batch) {
  Scenario s = testing::on_cluster(model, "a100-sxm4-80gb", gpus, 200);
  TrainingPlan base;
  base.global_batch = global_batch;
  base.seq_len = 2048;
  const hw::RooflineCostModel cost(s.system);
  std::vector<TrainingPlan> plans;
  for (const TrainingPlan& t : testing::spread_layouts(s.model, base, gpus, 400, 11)) {
    s.training = t;
    if (check_training_layout(s).empty()) plans.push_back(t);
  }
  ASSERT_GE(plans.size(), 200u);
  // The counter sees allocations at all.
  counting = true;
  escaped = new int(1);
  counting = false;
  delete escaped;
  ASSERT_EQ(allocations.load(), 1);
  EvalCache cache;
  TrainingMemory mem;
  double sink = 0;
  for (int pass = 0; pass < 2; ++pass) {
    allocations = 0;
    counting = pass == 1;
    for (const TrainingPlan& t : plans) {
      training_memory(s.model, s.system, t, mem, &cache);
      sink += mem.peak().total_bytes + analytical_step(s.model, s.system, t, cost, StepOptions{}, &cache).step_s;
    }
    counting = false;
  }
  EXPECT_GT(sink, 0.0);
  EXPECT_EQ(allocations.load(), 0) << "allocations while costing " << plans.size() << " layouts with a warm cache";
}

TEST(NoAllocation, DenseLayoutsWithWarmCache) { check_model("gpt3-175b", 1024, 1536); }
TEST(NoAllocation, MoeLayoutsWithWarmCache) { check_model("mixtral-8x7b", 256, 1024); }

}  // namespace
}  // namespace capsim
