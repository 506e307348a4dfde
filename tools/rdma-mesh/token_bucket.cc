#include "tools/rdma-mesh/token_bucket.h"

#include <algorithm>

namespace rdma_interop::mesh {

TokenBucket::TokenBucket(double rate, double burst, Clock::time_point start)
    : rate_(rate > 0 ? rate : 1), burst_(std::max(1.0, burst)), last_(start) {}

void TokenBucket::refill(Clock::time_point now) {
  if (now <= last_) return;
  tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * rate_);
  last_ = now;
}

bool TokenBucket::take() {
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

TokenBucket::Clock::time_point TokenBucket::next_due() const {
  if (tokens_ >= 1) return last_;
  return last_ + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>((1 - tokens_) / rate_));
}

}  // namespace rdma_interop::mesh
