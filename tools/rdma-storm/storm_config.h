// storm_config.h - one connect storm, as the command line describes it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/cm/personality.h"
#include "core/transport/provider_uri.h"

namespace rdma_interop::storm {

using Millis = std::chrono::milliseconds;

struct StormConfig {
  transport::ProviderUri target;   // tcp://ADDR:PORT or verbs://ADDR:PORT
  cm::Personality personality;     // the initiator's MPA policy and private data
  std::uint64_t attempts = 1000;   // in total, split evenly across the client threads
  unsigned concurrency = 16;       // client threads, each one connect at a time
  double duration_limit_s = 120;   // no attempt starts after this; running ones finish
  unsigned retries = 0;            // further tries of a retryable failure (connect_retry.h)
  Millis retry_backoff{20};        // full jitter, as connect_retry.h's retry_delay()
  Millis retry_backoff_max{1000};
  Millis hold{0};                  // how long each connection stays established
  Millis try_timeout{15000};       // one try: TCP connect + MPA setup
  std::uint64_t seed = 1;          // the jitter's RNGs: thread i uses seed + i
  // Who retries. kProvider: ConnectOptions::retries (the initiator's own policy, what
  // applications use); the provider reports the tries of a failed connect but not those
  // behind a success, so per-try tallies are then inexact. kStorm: our loop, one provider
  // connect per try, every try's outcome counted (what reconciling against the server's
  // per-Request counters needs).
  enum class RetryMode : std::uint8_t { kProvider, kStorm } retry_mode = RetryMode::kProvider;
  bool raw_tcp = false;            // baseline: TCP connect, then wait for one byte
  double progress_interval_s = 1;  // stderr progress lines on runs longer than this; 0: none
};

}  // namespace rdma_interop::storm
