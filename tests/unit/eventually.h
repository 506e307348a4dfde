// eventually.h - waiting in a test for a state another thread reaches on its own time.
//
// Some outcomes are asynchronous by contract: a progress thread learns that its provider sent
// a Terminate after the peer may already have read it; a publisher writes its file on its next
// tick. A test polls for them with a deadline instead of asserting at once (a race) or sleeping
// a fixed time (slow, and still a race on a loaded machine).
#pragma once

#include <chrono>
#include <thread>

namespace rdma_interop::test_util {

// Polls `done` every 5 ms until it holds or `timeout` passes; says whether it held. `done`
// is checked once more at the deadline, so a slow last step still counts.
template <class Pred>
bool eventually(Pred done, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace rdma_interop::test_util
