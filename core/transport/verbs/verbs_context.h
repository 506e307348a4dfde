// verbs_context.h - what every object of one verbs provider shares: the event thread and,
// opened on first use, the rdma_cm event channel on it.
//
// The provider, its listeners, pending requests and connections each hold the context, so
// the thread and channel outlive the Provider object while any of them exists; the last
// one to go closes the channel and joins the thread (never from the event thread: only
// application-side handles hold the context).
#pragma once

#include <memory>
#include <string>

#include "core/runtime/event_loop.h"
#include "core/transport/verbs/cm_channel.h"
#include "core/util/expected.h"

namespace rdma_interop::transport::verbs {

class VerbsContext {
 public:
  VerbsContext() : loop_(std::make_unique<runtime::EventLoop>()) {}
  ~VerbsContext() {
    loop_->run([this] {
      if (channel_) channel_->close();
      channel_.reset();
    });
  }
  VerbsContext(const VerbsContext&) = delete;
  VerbsContext& operator=(const VerbsContext&) = delete;

  runtime::EventLoop& loop() { return *loop_; }

  // Event thread: the channel, opened now if not yet (tried again on every call while it
  // fails: rdma_ucm may be loaded later). The error is a sentence.
  Expected<CmChannel*, std::string> channel() {
    if (!channel_) {
      auto opened = CmChannel::open(*loop_);
      if (!opened) return unexpected(opened.error());
      channel_ = std::move(*opened);
    }
    return channel_.get();
  }

 private:
  std::unique_ptr<runtime::EventLoop> loop_;
  std::shared_ptr<CmChannel> channel_;  // event thread only
};

}  // namespace rdma_interop::transport::verbs
