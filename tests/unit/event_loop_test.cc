// The runtime's event loop, the parts providers share: tasks posted from another thread run on
// the event thread in order, and the executor a shared completion queue holds posts there
// while the loop lives and refuses (dropping the task) once it is gone.
#include "core/runtime/event_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace rdma_interop::runtime {
namespace {

using namespace std::chrono_literals;

TEST(EventLoop, PostedTasksRunOnTheEventThreadInOrder) {
  EventLoop loop;
  std::vector<int> order;
  std::promise<std::thread::id> ran_on;
  for (int i = 0; i < 5; ++i) loop.post([&, i] { order.push_back(i); });
  loop.post([&] { ran_on.set_value(std::this_thread::get_id()); });
  auto id = ran_on.get_future();
  ASSERT_EQ(id.wait_for(5s), std::future_status::ready);
  EXPECT_NE(id.get(), std::this_thread::get_id());
  loop.run([] {});  // everything posted before has run
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(EventLoop, TheExecutorPostsWhileTheLoopLivesAndRefusesAfter) {
  auto loop = std::make_unique<EventLoop>();
  auto executor = loop->executor();
  std::promise<bool> in_loop;
  EXPECT_TRUE(executor([&] { in_loop.set_value(true); }));
  auto ran = in_loop.get_future();
  ASSERT_EQ(ran.wait_for(5s), std::future_status::ready);
  loop.reset();
  bool ran_after = false;
  EXPECT_FALSE(executor([&] { ran_after = true; })) << "the loop is gone: the task is refused";
  EXPECT_FALSE(ran_after);
}

}  // namespace
}  // namespace rdma_interop::runtime
