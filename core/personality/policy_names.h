// policy_names.h - the name a personality file gives each value of an MPA policy's enums
// ("want", "when-asked", "all-common"...): one table per enum, spelled once.
//
// The JSON codec reads and writes these names; the Python binding gives each enum to Python
// as the package's str enum whose values they are (rdma_interop.provider.Crc("want")), so a
// personality file, a policy in Python and the C++ value name a choice the same way.
#pragma once

#include <optional>
#include <string_view>
#include <utility>

#include "core/cm/mpa_policy.h"

namespace rdma_interop::personality {

// PolicyNames<E>::table: every value of E with its name, in declaration order.
template <class E>
struct PolicyNames;

#define RDMA_INTEROP_POLICY_NAMES(Enum, ...)                                      \
  template <>                                                                     \
  struct PolicyNames<cm::Enum> {                                                  \
    static constexpr std::pair<std::string_view, cm::Enum> table[] = __VA_ARGS__; \
  }

RDMA_INTEROP_POLICY_NAMES(RtrType, {{"send", cm::RtrType::kSend},
                                    {"write", cm::RtrType::kWrite},
                                    {"read", cm::RtrType::kRead}});
RDMA_INTEROP_POLICY_NAMES(CrcMode, {{"want", cm::CrcMode::kWant},
                                    {"optional", cm::CrcMode::kOptional},
                                    {"refuse", cm::CrcMode::kRefuse}});
RDMA_INTEROP_POLICY_NAMES(PeerToPeer, {{"off", cm::PeerToPeer::kOff},
                                       {"when-asked", cm::PeerToPeer::kWhenAsked},
                                       {"on", cm::PeerToPeer::kOn},
                                       {"required", cm::PeerToPeer::kRequired}});
RDMA_INTEROP_POLICY_NAMES(OnNewerRevision, {{"reply", cm::OnNewerRevision::kReplyOwnRevision},
                                            {"reset", cm::OnNewerRevision::kReset},
                                            {"close", cm::OnNewerRevision::kClose}});
RDMA_INTEROP_POLICY_NAMES(Refusal,
                          {{"reject", cm::Refusal::kReject}, {"reset", cm::Refusal::kReset}});
RDMA_INTEROP_POLICY_NAMES(OnMalformed,
                          {{"reset", cm::OnMalformed::kReset}, {"close", cm::OnMalformed::kClose}});
RDMA_INTEROP_POLICY_NAMES(RtrReply, {{"chosen", cm::RtrReply::kChosen},
                                     {"own", cm::RtrReply::kOwn},
                                     {"all-common", cm::RtrReply::kAllCommon}});
RDMA_INTEROP_POLICY_NAMES(NoCommonRtr, {{"refuse", cm::NoCommonRtr::kRefuse},
                                        {"propose", cm::NoCommonRtr::kPropose},
                                        {"offer-all", cm::NoCommonRtr::kOfferAll},
                                        {"decline", cm::NoCommonRtr::kDecline}});
RDMA_INTEROP_POLICY_NAMES(RtrCheck,
                          {{"agreed", cm::RtrCheck::kAgreed}, {"any", cm::RtrCheck::kAny}});
RDMA_INTEROP_POLICY_NAMES(RtrFromReply, {{"exact", cm::RtrFromReply::kExact},
                                         {"preference", cm::RtrFromReply::kPreference}});

#undef RDMA_INTEROP_POLICY_NAMES

// The name of `value`; "?" for a value outside the table (a cast, never a parsed file).
template <class E>
constexpr std::string_view policy_name(E value) {
  for (const auto& [name, v] : PolicyNames<E>::table) {
    if (v == value) return name;
  }
  return "?";
}

// The value named `name`; nullopt for a name the table does not have.
template <class E>
constexpr std::optional<E> policy_value(std::string_view name) {
  for (const auto& [n, v] : PolicyNames<E>::table) {
    if (n == name) return v;
  }
  return std::nullopt;
}

}  // namespace rdma_interop::personality
