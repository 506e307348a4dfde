#include "core/messaging/handler_queue.h"

#include <utility>
#include <variant>

namespace rdma_interop::messaging {
namespace {
// The queue whose handlers this thread runs now (null on every other thread).
thread_local const HandlerQueue* runner_of = nullptr;
}  // namespace

HandlerQueue::HandlerQueue(AfterDelivery after_delivery)
    : after_delivery_(std::move(after_delivery)) {}

void HandlerQueue::set(MessageHandler handler) {
  std::lock_guard lock(mu_);
  on_message_ = std::move(handler);
}

void HandlerQueue::set(ReadyHandler handler) {
  std::lock_guard lock(mu_);
  on_ready_ = std::move(handler);
}

void HandlerQueue::set_failure(FailureHandler handler) {
  std::lock_guard lock(mu_);
  on_failure_ = std::move(handler);
}

void HandlerQueue::set_close(CloseHandler handler) {
  std::lock_guard lock(mu_);
  on_close_ = std::move(handler);
}

bool HandlerQueue::takes_messages() const {
  std::lock_guard lock(mu_);
  return on_message_ && !stopped_;
}

void HandlerQueue::queue(Callback callback) {
  std::lock_guard lock(mu_);
  if (!stopped_) waiting_.push_back(std::move(callback));
}

bool HandlerQueue::waiting() const {
  std::lock_guard lock(mu_);
  return !waiting_.empty() && !running_ && !stopped_;
}

bool HandlerQueue::running_here() const {
  return runner_of == this;
}

void HandlerQueue::run() {
  {
    std::lock_guard lock(mu_);
    if (running_ || stopped_ || waiting_.empty()) return;
    running_ = true;
  }
  const HandlerQueue* outer = std::exchange(runner_of, this);
  for (;;) {
    Callback next;
    MessageHandler on_message;
    ReadyHandler on_ready;
    FailureHandler on_failure;
    CloseHandler on_close;
    {
      std::lock_guard lock(mu_);
      if (stopped_ || waiting_.empty()) {
        running_ = false;
        done_.notify_all();
        break;
      }
      next = std::move(waiting_.front());
      waiting_.pop_front();
      // The one handler this callback runs, copied under the lock: set() may replace it.
      if (std::holds_alternative<Delivery>(next)) {
        on_message = on_message_;
      } else if (std::holds_alternative<Ready>(next)) {
        on_ready = on_ready_;
      } else if (std::get<Ended>(next).failed) {
        on_failure = on_failure_;
      } else {
        on_close = on_close_;
      }
    }
    if (const auto* d = std::get_if<Delivery>(&next)) {
      if (on_message) on_message(d->message);
      after_delivery_(*d);
    } else if (const auto* r = std::get_if<Ready>(&next)) {
      if (on_ready) on_ready(r->peer);
    } else if (const auto* e = std::get_if<Ended>(&next)) {
      if (e->failed && on_failure) on_failure(e->peer, e->detail);
      if (!e->failed && on_close) on_close(e->peer, e->detail);
    }
  }
  runner_of = outer;
}

void HandlerQueue::stop() {
  std::unique_lock lock(mu_);
  stopped_ = true;
  waiting_.clear();
  // From a handler the runner is this thread: it cannot wait for itself.
  if (runner_of != this) done_.wait(lock, [&] { return !running_; });
}

}  // namespace rdma_interop::messaging
