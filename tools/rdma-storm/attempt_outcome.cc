#include "tools/rdma-storm/attempt_outcome.h"

#include <cerrno>

#include "core/cm/cm_failure.h"
#include "core/transport/connect_retry.h"

namespace rdma_interop::storm {

std::string_view outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kConnected: return "connected";
    case Outcome::kOverflowRejected: return "overflow_rejected";
    case Outcome::kAppRejected: return "app_rejected";
    case Outcome::kExpired: return "expired";
    case Outcome::kTcpTimeout: return "tcp_timeout";
    case Outcome::kGaveUp: return "gave_up";
    case Outcome::kOther: return "other";
  }
  return "other";
}

namespace {

TryResult outcome_of(const transport::ConnectError& error) {
  using Kind = transport::ConnectError::Kind;
  switch (error.kind) {
    case Kind::kTimeout:
      // The whole connect deadline passed: the listener kept us waiting (drop policy).
      return {Outcome::kExpired, {}};
    case Kind::kUnreachable:
      // No SYN-ACK in time is the network's (or the kernel's accept queue), never the
      // server's decision: kept apart from expired, which the server's counters reconcile.
      if (error.sys_errno == ETIMEDOUT) return {Outcome::kTcpTimeout, {}};
      return {Outcome::kOther, "unreachable"};
    case Kind::kAddressInUse:
    case Kind::kInvalidArgument:
      return {Outcome::kOther, std::string(transport::kind_name(error.kind))};
    case Kind::kSetup:
      break;
  }
  if (!error.failure) return {Outcome::kOther, "setup"};
  switch (*error.failure) {
    case cm::CmFailure::kBacklogFull:  // the listener's overflow Reject (its marker)
      return {Outcome::kOverflowRejected, {}};
    case cm::CmFailure::kPeerRejected:
      return {Outcome::kAppRejected, {}};
    case cm::CmFailure::kReplyTimeout:
    case cm::CmFailure::kConnectionReset:
    case cm::CmFailure::kConnectionClosed:
      return {Outcome::kExpired, {}};
    default:
      return {Outcome::kOther, std::string(cm::failure_name(*error.failure))};
  }
}

}  // namespace

TryResult classify(const transport::ConnectError& error) {
  TryResult result = outcome_of(error);
  result.failure = error;
  return result;
}

bool worth_retry(const TryResult& result) {
  return result.failure && transport::retryable(*result.failure);
}

bool never_reached(const TryResult& result) {
  return result.outcome == Outcome::kTcpTimeout ||
         (result.outcome == Outcome::kOther && result.other_name == "unreachable");
}

}  // namespace rdma_interop::storm
