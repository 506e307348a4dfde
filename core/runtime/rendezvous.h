// rendezvous.h - a value handed from one thread to one waiting thread, once.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

namespace rdma_interop::runtime {

template <class T>
class Rendezvous {
 public:
  // The first answer wins; later ones are dropped.
  void set(T value) {
    std::lock_guard lock(mu_);
    if (value_) return;
    value_.emplace(std::move(value));
    // Under the lock: the taker often owns the rendezvous (on its stack) and destroys it as
    // soon as take() returns, which it cannot do before this notify is done.
    cv_.notify_all();
  }
  bool ready() const {
    std::lock_guard lock(mu_);
    return value_.has_value();
  }
  T take() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return value_.has_value(); });
    return std::move(*value_);
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<T> value_;
};

}  // namespace rdma_interop::runtime
