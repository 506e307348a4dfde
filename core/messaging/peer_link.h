// peer_link.h - one peer of a message endpoint: its credit channel (the decisions and the
// buffers, core/credit/peer_channel.h) joined to its connection. The link carries the
// channel's work requests to the connection, naming each by a wr_id that says whose it is,
// and hands what the channel found for the application (a message, a peer ready again, an
// end) to a HandlerSink.
//
// Threading: `mu` guards the channel and the link's state; it is taken after the endpoint's
// dispatch lock and before the provider's. Work requests go to the provider with `mu` let
// go, by one thread at a time and in the channel's order: carry_out() lets the thread that
// is posting take what others add meanwhile, so no thread waits for another's sendmsg while
// holding `mu`. `conn` is used without `mu` by that thread and by receiving threads, so it
// is taken out only once none is left (take_connection()); any other use of `conn`
// (registering memory) holds `mu`, which keeps it in place. A kPostWrite's message is
// posted only if the write was: carry_out() refuses it to the channel otherwise.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/credit/peer_channel.h"
#include "core/messaging/message.h"
#include "core/transport/provider.h"

namespace rdma_interop::messaging {

// wr_id: the peer in the high 32 bits, then a send flag, then the buffer index. Peer ids are
// never reused, so a completion of a peer already gone finds nothing and is ignored. A
// message id names the receive buffer its message sits in (the layout of a receive's wr_id).
std::uint64_t make_wr_id(PeerId peer, bool send, std::uint32_t index);
PeerId wr_peer(std::uint64_t wr_id);
bool wr_is_send(std::uint64_t wr_id);
std::uint32_t wr_index(std::uint64_t wr_id);
MessageId make_message_id(PeerId peer, std::uint32_t index);

class PeerLink;

// What a handler is run for, in the order the channel found it.
struct Delivery {
  std::shared_ptr<PeerLink> link;  // the message's buffer lives there until it is let go
  Message message;
};
struct Ready {
  PeerId peer = 0;
};
struct Ended {
  PeerId peer = 0;
  bool failed = false;  // else closed in order by the peer
  std::string detail;
};
using Callback = std::variant<Delivery, Ready, Ended>;

// Where a link puts what it found for the application (HandlerQueue).
class HandlerSink {
 public:
  virtual ~HandlerSink() = default;
  // False when nobody takes messages: the link lets each one go as it arrives.
  virtual bool takes_messages() const = 0;
  virtual void queue(Callback callback) = 0;
};

class PeerLink : public std::enable_shared_from_this<PeerLink> {
 public:
  PeerLink(PeerId id, std::string name, std::string scheme, const credit::ChannelConfig& config);
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // The receive buffers, for QpCaps::initial_recvs: posted before the first message can come.
  std::vector<transport::InitialRecv> initial_receives() const;
  // `mu` held, `conn` just set: registers the buffers with the connection.
  void register_buffers();

  // Carries out the channel's actions, in order (a kPostWrite as an RDMA Write from its
  // slot's wr_id). Called with `lock` held on `mu`; posts go to
  // the provider with it let go, and it is held again on return. If another thread is
  // carrying out this link's actions, ours are left to it.
  void carry_out(std::unique_lock<std::mutex>& lock, HandlerSink& sink);
  // `mu` held: a borrowed write (credit::TaggedWrite::borrowed) of `length` octets sent now
  // would be posted by this very thread before carry_out() returns, inline: no other thread
  // is posting, nothing waits to be posted, and the connection takes inline requests that
  // long.
  bool posts_at_once(std::uint32_t length) const;
  // `mu` held: the connection, once no thread is posting on it (it waits for that one).
  std::unique_ptr<transport::Connection> take_connection(std::unique_lock<std::mutex>& lock);

  const PeerId id;
  const std::string name;
  std::string scheme;  // the provider's ("tcp", "verbs"), for telemetry; `mu`
  std::mutex mu;
  std::condition_variable cv;   // its queue has room, it ended, its work drained, posting ended
  credit::PeerChannel channel;  // `mu`
  // Threads in MessageEndpoint::receive, using `conn` without `mu` (`mu`):
  // take_connection() writes their wake descriptors and waits for them to leave.
  std::uint32_t receivers = 0;
  std::vector<int> receiver_wakes;

 private:
  using Refusals = std::vector<std::pair<credit::ChannelAction, std::string>>;
  void carry_out_one(const credit::ChannelAction& a, HandlerSink& sink, Refusals& refused,
                     std::vector<std::uint32_t>& unhandled);
  // The posts of `run` (sends and writes) in one Connection::post_sends; how many went. The
  // one refused, if any, is added to `refused` with its reason; those after it were not tried.
  std::size_t post_run(std::span<const credit::ChannelAction> run, Refusals& refused);
  // The work request of a kPostSend or kPostWrite.
  rdmap::SendWr send_wr(const credit::ChannelAction& a) const;
  void take_actions();

  std::uint32_t rx_stag_ = 0;
  std::uint32_t tx_stag_ = 0;
  std::vector<credit::ChannelAction> outbox_;  // taken from the channel, not carried out yet
  bool posting_ = false;                       // a thread carries the outbox out now
  std::vector<credit::ChannelAction> scratch_;
  // The posting thread's (under `posting_`, without `mu`): what it carries out now, what the
  // provider refused and the messages nobody took.
  std::vector<credit::ChannelAction> batch_;
  Refusals refused_;
  std::vector<std::uint32_t> unhandled_;
  std::vector<rdmap::SendWr> wrs_;  // post_run's, under `posting_`

 public:
  // Last member: destroyed first, so the provider stops touching the buffers above before
  // they are freed. `mu`; used without it by the posting thread (see the top).
  std::unique_ptr<transport::Connection> conn;
};

}  // namespace rdma_interop::messaging
