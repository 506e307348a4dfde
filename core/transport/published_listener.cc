#include "core/transport/published_listener.h"

#include <utility>
#include <vector>

#include "core/telemetry/listener_snapshot.h"

namespace rdma_interop::transport {
namespace {

class PublishedListener final : public Listener {
 public:
  PublishedListener(std::unique_ptr<Listener> inner, std::string scheme,
                    std::shared_ptr<telemetry::Publisher> publisher, cm::BacklogOverflow overflow)
      : inner_(std::move(inner)) {
    const std::string address = inner_->local_address();
    registration_ = telemetry::PublisherRegistration(
        std::move(publisher),
        [listener = inner_.get(), address, scheme = std::move(scheme), overflow] {
          telemetry::ListenerSnapshot s;
          s.local_address = address;
          s.scheme = scheme;
          s.overflow = overflow;
          s.counters = listener->counters();
          return s;
        });
  }
  ~PublishedListener() override { registration_.reset(); }

  std::string local_address() const override { return inner_->local_address(); }
  std::unique_ptr<PendingConnection> next_request(Millis timeout) override {
    return inner_->next_request(timeout);
  }
  Counters counters() const override { return inner_->counters(); }
  std::vector<SetupFailure> take_setup_failures() override { return inner_->take_setup_failures(); }
  std::vector<BacklogEvent> take_backlog_events() override { return inner_->take_backlog_events(); }
  void close() override {
    // A closed listener no longer listens: it leaves backlog-stat at once.
    registration_.reset();
    inner_->close();
  }

 private:
  std::unique_ptr<Listener> inner_;
  telemetry::PublisherRegistration registration_;
};

}  // namespace

std::unique_ptr<Listener> publish_listener(std::unique_ptr<Listener> inner, std::string scheme,
                                           std::shared_ptr<telemetry::Publisher> publisher,
                                           cm::BacklogOverflow overflow) {
  return std::make_unique<PublishedListener>(std::move(inner), std::move(scheme),
                                             std::move(publisher), overflow);
}

}  // namespace rdma_interop::transport
