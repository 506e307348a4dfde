// token_bucket.h - paces one stream of messages at a fixed rate, as plain values.
//
// Tokens accrue at `rate` per second up to `burst`; each message takes one. The cap keeps a
// sender that fell behind (a descheduled thread, a peer that refused for a while) from
// flooding afterwards: it catches up at most `burst` messages, the rest are simply not sent.
#pragma once

#include <chrono>

namespace rdma_interop::mesh {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  // rate > 0 messages/s; burst >= 1. Starts with one token at `start`.
  TokenBucket(double rate, double burst, Clock::time_point start);

  // Adds the tokens accrued up to `now` (time never runs backwards here).
  void refill(Clock::time_point now);
  // Takes a token if there is a whole one (after refill).
  bool take();
  double tokens() const { return tokens_; }
  // When the next whole token is there (now, if one is).
  Clock::time_point next_due() const;

 private:
  double rate_;
  double burst_;
  double tokens_ = 1;
  Clock::time_point last_;
};

}  // namespace rdma_interop::mesh
