#include "core/transport/verbs/verbs_provider.h"

#include <thread>

#include "core/telemetry/publisher.h"
#include "core/transport/connect_retry.h"
#include "core/transport/published_listener.h"
#include "core/transport/verbs/cm_address.h"
#include "core/transport/verbs/verbs_connection.h"
#include "core/transport/verbs/verbs_connector.h"
#include "core/transport/verbs/verbs_context.h"
#include "core/transport/verbs/verbs_listener.h"

namespace rdma_interop::transport::verbs {
namespace {

// The URI's scheme and options; the error is an invalid-argument ConnectError.
Expected<VerbsOptions, ConnectError> check_uri(const ProviderUri& where) {
  if (where.scheme != "verbs") {
    return unexpected(connect_error(ConnectError::Kind::kInvalidArgument,
                                    "the verbs provider cannot use '" + where.to_string() + "'"));
  }
  if (where.host.empty()) {
    return unexpected(
        connect_error(ConnectError::Kind::kInvalidArgument,
                      "a verbs URI needs an address or device: verbs://ADDRESS:PORT"));
  }
  auto options = parse_verbs_options(where.query);
  if (!options)
    return unexpected(connect_error(ConnectError::Kind::kInvalidArgument, options.error()));
  return *options;
}

class VerbsProvider final : public Provider {
 public:
  std::string_view scheme() const override { return "verbs"; }

  Expected<std::unique_ptr<Listener>, ConnectError> listen(
      const ProviderUri& where, const cm::MpaPolicy& policy,
      const ListenOptions& listen_options) override {
    // rdma_cm shows no half-open stage, and this listener keeps no decision or overflow
    // timers: only the backlog and the reject policy apply here (verbs_listener.h). A drop
    // request is refused, not quietly served as reject: the caller's counters would lie.
    const int backlog = listen_options.backlog;
    if (listen_options.overflow == cm::BacklogOverflow::kDrop) {
      return unexpected(connect_error(
          ConnectError::Kind::kInvalidArgument,
          "the verbs listener has no drop policy: over its backlog it rejects (with the "
          "backlog-full marker); use overflow reject, or the tcp provider for drop"));
    }
    auto options = check_uri(where);
    if (!options) return unexpected(options.error());
    if (!options->source.empty()) {
      return unexpected(
          connect_error(ConnectError::Kind::kInvalidArgument,
                        "source= is where a connect starts from; a listener listens on "
                        "the URI's address (got '" +
                            where.to_string() + "')"));
    }
    if (auto e = policy_error(policy)) return unexpected(std::move(*e));
    if (backlog < 1) {
      return unexpected(
          connect_error(ConnectError::Kind::kInvalidArgument, "backlog must be at least 1"));
    }
    auto address = resolve_verbs_host(where.host, where.port);
    if (!address) {
      return unexpected(
          connect_error(ConnectError::Kind::kInvalidArgument,
                        "cannot listen on " + where.to_string() + ": " + address.error()));
    }
    std::shared_ptr<VerbsListenerState> state;
    std::optional<ConnectError> error;
    context_->loop().run([&] {
      auto channel = context_->channel();
      if (!channel) {
        error = connect_error(ConnectError::Kind::kUnreachable,
                              "cannot listen on " + where.to_string() + ": " + channel.error());
        return;
      }
      state = std::make_shared<VerbsListenerState>(context_->loop(), **channel, policy, *options,
                                                   backlog);
      error = state->start(*address);
    });
    if (error) return unexpected(std::move(*error));
    // Published like tcp's, so backlog-stat lists verbs listeners too.
    return publish_listener(std::make_unique<VerbsListener>(context_, std::move(state)), "verbs",
                            publisher_, cm::BacklogOverflow::kReject);
  }

  Expected<std::unique_ptr<Connection>, ConnectError> connect(
      const ProviderUri& where, const ConnectOptions& options) override {
    auto verbs_options = check_uri(where);
    if (!verbs_options) return unexpected(verbs_options.error());
    if (auto e = policy_error(options.policy)) return unexpected(std::move(*e));
    if (where.port == 0) {
      return unexpected(connect_error(
          ConnectError::Kind::kInvalidArgument,
          "connect needs a port: verbs://ADDRESS:PORT (got '" + where.to_string() + "')"));
    }
    auto address = resolve_verbs_host(where.host, where.port);
    if (!address)
      return unexpected(connect_error(ConnectError::Kind::kUnreachable, address.error()));
    std::optional<CmAddress> source;
    if (!verbs_options->source.empty()) {
      auto local = resolve_verbs_host(verbs_options->source, 0);
      if (!local) {
        return unexpected(connect_error(ConnectError::Kind::kInvalidArgument,
                                        "source=" + verbs_options->source + ": " + local.error()));
      }
      source = *local;
    }
    // Each attempt runs on the event thread (the CM channel's); the retries, as every
    // provider's, follow core/transport/connect_retry.h, sleeping on the caller's thread.
    RetrySchedule schedule(options);
    for (std::uint32_t attempts = 1;; ++attempts) {
      auto result = std::make_shared<SetupRendezvous>();
      context_->loop().post([context = context_.get(), peer = *address, source, options,
                             verbs_options = *verbs_options, result] {
        auto channel = context->channel();
        if (!channel) {
          result->set(SetupResult{
              nullptr, connect_error(ConnectError::Kind::kUnreachable, channel.error())});
          return;
        }
        std::make_shared<Connector>(context->loop(), **channel, peer, source, options,
                                    verbs_options, result)
            ->start();
      });
      // The connector's and the connection state's deadlines (options.timeout) guarantee an answer.
      SetupResult r = result->take();
      if (r.connection) {
        return std::unique_ptr<Connection>(
            std::make_unique<VerbsConnection>(context_, r.connection));
      }
      ConnectError error = r.error.value_or(ConnectError{});
      error.attempts = attempts;
      const auto wait = schedule.after_failure(error, attempts);
      if (!wait) return unexpected(std::move(error));
      std::this_thread::sleep_for(*wait);
    }
  }

 private:
  std::shared_ptr<VerbsContext> context_ = std::make_shared<VerbsContext>();
  std::shared_ptr<telemetry::Publisher> publisher_ = std::make_shared<telemetry::Publisher>();
};

}  // namespace

std::unique_ptr<Provider> make_verbs_provider() {
  return std::make_unique<VerbsProvider>();
}

}  // namespace rdma_interop::transport::verbs
