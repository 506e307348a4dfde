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

ConnectError error_of(ConnectError::Kind kind, std::string detail) {
  ConnectError e;
  e.kind = kind;
  e.detail = std::move(detail);
  return e;
}

// The URI's scheme and options; the error is an invalid-argument ConnectError.
Expected<VerbsOptions, ConnectError> check_uri(const ProviderUri& where) {
  if (where.scheme != "verbs") {
    return unexpected(error_of(ConnectError::Kind::kInvalidArgument,
                               "the verbs provider cannot use '" + where.to_string() + "'"));
  }
  if (where.host.empty()) {
    return unexpected(error_of(ConnectError::Kind::kInvalidArgument,
                               "a verbs URI needs an address or device: verbs://ADDRESS:PORT"));
  }
  auto options = parse_verbs_options(where.query);
  if (!options) return unexpected(error_of(ConnectError::Kind::kInvalidArgument, options.error()));
  return *options;
}

std::optional<ConnectError> check_policy(const cm::MpaPolicy& policy) {
  const auto problems = cm::validate(policy);
  if (problems.empty()) return std::nullopt;
  std::string detail = "unusable MPA policy:";
  for (const auto& p : problems) detail += " " + p + ";";
  detail.pop_back();
  return error_of(ConnectError::Kind::kInvalidArgument, std::move(detail));
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
      return unexpected(
          error_of(ConnectError::Kind::kInvalidArgument,
                   "the verbs listener has no drop policy: over its backlog it rejects (with the "
                   "backlog-full marker); use overflow reject, or the tcp provider for drop"));
    }
    auto options = check_uri(where);
    if (!options) return unexpected(options.error());
    if (!options->source.empty()) {
      return unexpected(error_of(ConnectError::Kind::kInvalidArgument,
                                 "source= is where a connect starts from; a listener listens on "
                                 "the URI's address (got '" +
                                     where.to_string() + "')"));
    }
    if (auto e = check_policy(policy)) return unexpected(std::move(*e));
    if (backlog < 1) {
      return unexpected(
          error_of(ConnectError::Kind::kInvalidArgument, "backlog must be at least 1"));
    }
    auto address = resolve_verbs_host(where.host, where.port);
    if (!address) {
      return unexpected(error_of(ConnectError::Kind::kInvalidArgument,
                                 "cannot listen on " + where.to_string() + ": " + address.error()));
    }
    std::shared_ptr<VerbsListenerCore> core;
    std::optional<ConnectError> error;
    context_->loop().run([&] {
      auto channel = context_->channel();
      if (!channel) {
        error = error_of(ConnectError::Kind::kUnreachable,
                         "cannot listen on " + where.to_string() + ": " + channel.error());
        return;
      }
      core = std::make_shared<VerbsListenerCore>(context_->loop(), **channel, policy, *options,
                                                 backlog);
      error = core->start(*address);
    });
    if (error) return unexpected(std::move(*error));
    // Published like tcp's, so backlog-stat lists verbs listeners too.
    return publish_listener(std::make_unique<VerbsListener>(context_, std::move(core)), "verbs",
                            publisher_, cm::BacklogOverflow::kReject);
  }

  Expected<std::unique_ptr<Connection>, ConnectError> connect(
      const ProviderUri& where, const ConnectOptions& options) override {
    auto verbs_options = check_uri(where);
    if (!verbs_options) return unexpected(verbs_options.error());
    if (auto e = check_policy(options.policy)) return unexpected(std::move(*e));
    if (where.port == 0) {
      return unexpected(
          error_of(ConnectError::Kind::kInvalidArgument,
                   "connect needs a port: verbs://ADDRESS:PORT (got '" + where.to_string() + "')"));
    }
    auto address = resolve_verbs_host(where.host, where.port);
    if (!address) return unexpected(error_of(ConnectError::Kind::kUnreachable, address.error()));
    std::optional<CmAddress> source;
    if (!verbs_options->source.empty()) {
      auto local = resolve_verbs_host(verbs_options->source, 0);
      if (!local) {
        return unexpected(error_of(ConnectError::Kind::kInvalidArgument,
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
          result->set(
              SetupResult{nullptr, error_of(ConnectError::Kind::kUnreachable, channel.error())});
          return;
        }
        std::make_shared<Connector>(context->loop(), **channel, peer, source, options,
                                    verbs_options, result)
            ->start();
      });
      // The connector's and the core's deadlines (options.timeout) guarantee an answer.
      SetupResult r = result->take();
      if (r.core) {
        return std::unique_ptr<Connection>(std::make_unique<VerbsConnection>(context_, r.core));
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
