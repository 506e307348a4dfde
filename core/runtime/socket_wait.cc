#include "core/runtime/socket_wait.h"

#include <liburing.h>
#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>

namespace rdma_interop::runtime {
namespace {

// user_data of the requests: the RECV, the wake POLLs (the tag plus a generation, so the
// completion of a POLL taken back is never read as the current one's), the rest.
constexpr std::uint64_t kRecvTag = 1;
constexpr std::uint64_t kOtherTag = 2;
constexpr std::uint64_t kPollBase = std::uint64_t{1} << 32;

std::atomic<bool> disabled{false};
// Bumped in a fork()ed child: a ring made before the fork is the parent's (SINGLE_ISSUER
// refuses the child), so each thread makes its own again.
std::atomic<std::uint64_t> fork_generation{0};
// Rings let go of, for ThreadSanitizer's sake: liburing maps and unmaps a ring with raw
// syscalls, which TSan does not see, so a new ring the kernel maps where an exited thread's
// was looked like memory two threads wrote without order. Releasing this before a ring is
// unmapped and acquiring it before one is mapped says what the kernel does: the unmap came
// first. (Found by the tsan tier; one atomic operation per ring made or let go.)
std::atomic<std::uint64_t> rings_let_go{0};

}  // namespace

struct SocketWait::Ring {
  io_uring ring{};
  std::uint64_t poll_tag = 0;    // the armed POLL's user_data; 0: none is armed
  std::uint64_t generation = 0;  // of the last POLL armed
  WakeFd armed;                  // what it watches
};

std::uint64_t new_wake_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

SocketWait* SocketWait::for_this_thread() {
  if (disabled.load(std::memory_order_relaxed)) return nullptr;
  static const int at_fork = pthread_atfork(nullptr, nullptr, [] {
    fork_generation.fetch_add(1, std::memory_order_relaxed);
  });
  (void)at_fork;
  struct Mine {
    std::unique_ptr<SocketWait> wait;
    std::uint64_t generation = 0;
    bool tried = false;
  };
  thread_local Mine mine;
  const std::uint64_t generation = fork_generation.load(std::memory_order_relaxed);
  if (mine.tried && mine.generation == generation) {
    return mine.wait && !mine.wait->broken_ ? mine.wait.get() : nullptr;
  }
  // A ring made before a fork (this is the child) is unmapped and closed, never entered; one
  // that failed is let go.
  mine.wait.reset();
  mine.tried = true;
  mine.generation = generation;
  // Made once per thread (and per fork); a refusal (ENOSYS, EPERM, EINVAL) is not asked again.
  auto ring = std::make_unique<Ring>();
  // Four entries: a POLL taken back, a POLL, the RECV; a cancel after them.
  (void)rings_let_go.load(std::memory_order_acquire);
  if (io_uring_queue_init(4, &ring->ring,
                          IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN) == 0) {
    mine.wait.reset(new SocketWait(ring.release()));
  }
  return mine.wait.get();
}

void SocketWait::set_enabled(bool enabled) {
  disabled.store(!enabled, std::memory_order_relaxed);
}

SocketWait::SocketWait(Ring* ring) : ring_(ring) {}

SocketWait::~SocketWait() {
  rings_let_go.fetch_add(1, std::memory_order_release);
  io_uring_queue_exit(&ring_->ring);  // the kernel cancels an armed POLL with the ring
  delete ring_;
}

SocketWait::Result SocketWait::receive(int socket, std::span<std::uint8_t> into, WakeFd wake,
                                       std::chrono::milliseconds timeout) {
  io_uring* ring = &ring_->ring;
  // Each wait waits for one completion, and looks at which it was: the RECV's or the armed
  // POLL's end it; any other (a POLL taken back, a cancel) is let go, and the wait goes on.
  // Nothing else is assumed of the order or the number of completions. Submission entries
  // are free: each call submits what it prepared.
  const bool same = ring_->poll_tag != 0 && wake.fd >= 0 && wake.id != 0 &&
                    wake.fd == ring_->armed.fd && wake.id == ring_->armed.id;
  if (!same) {
    if (ring_->poll_tag != 0) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      io_uring_prep_poll_remove(sqe, ring_->poll_tag);
      io_uring_sqe_set_data64(sqe, kOtherTag);
      ring_->poll_tag = 0;
    }
    if (wake.fd >= 0) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      io_uring_prep_poll_add(sqe, wake.fd, POLLIN);
      ring_->generation = (ring_->generation + 1) % kPollBase;
      ring_->poll_tag = kPollBase + ring_->generation;
      ring_->armed = wake;
      io_uring_sqe_set_data64(sqe, ring_->poll_tag);
    }
  }
  io_uring_sqe* recv = io_uring_get_sqe(ring);
  io_uring_prep_recv(recv, socket, into.data(), into.size(), 0);
  io_uring_sqe_set_data64(recv, kRecvTag);

  bool recv_done = false;
  bool woken = false;
  int recv_res = 0;
  const auto reap = [&] {
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(ring, head, cqe) {
      ++seen;
      const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kRecvTag) {
        recv_done = true;
        recv_res = cqe->res;
      } else if (ring_->poll_tag != 0 && tag == ring_->poll_tag) {
        ring_->poll_tag = 0;  // one-shot: it fired (or failed: the descriptor was bad)
        woken = true;
      }
    }
    io_uring_cq_advance(ring, seen);
  };
  const auto as_timespec = [](std::chrono::nanoseconds left) {
    const auto ns = std::max<std::int64_t>(left.count(), 0);
    return __kernel_timespec{ns / 1'000'000'000, ns % 1'000'000'000};
  };

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  __kernel_timespec ts = as_timespec(timeout);
  io_uring_cqe* first = nullptr;
  int waited = io_uring_submit_and_wait_timeout(ring, &first, 1, &ts, nullptr);
  reap();
  if (!recv_done && waited < 0 && waited != -ETIME && waited != -EINTR && waited != -EBUSY) {
    // The ring refused the submission itself, so nothing is in flight: this thread polls
    // from now on.
    broken_ = true;
    return Result{Result::Kind::kUnavailable, 0, -waited};
  }
  // Another completion came first (a POLL taken back), or a signal: wait on, to the end.
  while (!recv_done && !woken && waited != -ETIME) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) break;
    ts = as_timespec(left);
    waited = io_uring_submit_and_wait_timeout(ring, &first, 1, &ts, nullptr);
    reap();
  }
  if (!recv_done) {
    // Woken or timed out: the RECV is taken back before the buffer is the caller's again.
    // Its completion may still carry octets that came meanwhile.
    io_uring_sqe* cancel = io_uring_get_sqe(ring);
    io_uring_prep_cancel64(cancel, kRecvTag, 0);
    io_uring_sqe_set_data64(cancel, kOtherTag);
    // It comes at once: waited for without a timeout (a signal's EINTR repeats the wait).
    while (!recv_done) {
      (void)io_uring_submit_and_wait(ring, 1);
      reap();
    }
  }
  Result r;
  if (recv_res > 0) {
    r.kind = Result::Kind::kData;
    r.bytes = static_cast<std::size_t>(recv_res);
  } else if (recv_res == 0 && !into.empty()) {
    r.kind = Result::Kind::kEof;
  } else if (recv_res < 0 && recv_res != -ECANCELED && recv_res != -EINTR &&
             recv_res != -EAGAIN) {
    r.kind = Result::Kind::kError;
    r.error = -recv_res;
  } else {
    r.kind = woken ? Result::Kind::kWoken : Result::Kind::kTimeout;
  }
  return r;
}

}  // namespace rdma_interop::runtime
