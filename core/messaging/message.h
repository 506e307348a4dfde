// message.h - what a message endpoint hands its application: a received message, named by
// the peer it came from and an id for reply(), hold() and release(); and the handlers that
// receive messages and a peer's news (core/messaging/message_endpoint.h runs them).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace rdma_interop::messaging {

using PeerId = std::uint32_t;     // never reused within an endpoint
using MessageId = std::uint64_t;  // a received message, for reply() / hold() / release()

struct Message {
  PeerId peer = 0;
  MessageId id = 0;
  std::span<const std::uint8_t> payload;
};

using MessageHandler = std::function<void(const Message&)>;
using ReadyHandler = std::function<void(PeerId)>;  // a peer that refused a send has room again
using FailureHandler = std::function<void(PeerId, const std::string&)>;  // its connection failed
using CloseHandler = std::function<void(PeerId, const std::string&)>;    // it closed in order

}  // namespace rdma_interop::messaging
