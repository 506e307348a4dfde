// enum_casters.h - the C++ enums Python has as the package's own enums: an MPA policy's, a
// listener's backlog policy's, a work completion's and the wire values'; and RTR sets.
//
// Each enum of core/cm/mpa_policy.h is, in Python, the str enum of rdma_interop.policy_enums
// whose values are the personality file's names (policy_names.h): cm::CrcMode::kOptional is
// Crc.OPTIONAL == "optional". A field takes the member or its name (MpaPolicy(crc="want")) and
// a name no member has is a ValueError, as the enum's own constructor says. An RtrSet is a
// frozenset of Rtr (any iterable of them, or of their names, on the way in). A listener's
// cm::BacklogOverflow is Overflow, named by cm::overflow_name ("drop", "reject"). A work
// completion's rdmap::WcStatus and WcOpcode are rdma_interop.completion_enums' WcStatus (named
// by rdmap::wc_status_name) and WcOpcode ("send", "rdma_write", "rdma_read", "recv"). A message
// endpoint's peer state (credit::ChannelState) is rdma_interop.messaging_enums' PeerState, named
// by credit::state_name. An MPA frame's wire::MpaFrameKind is rdma_interop.wire_enums' MpaKind
// ("request", "reply"); the numbered ones, wire::RdmapOpcode and wire::TermLayer, are IntEnums
// whose values are the wire's (wire_enums.RdmapOpcode, errors.TermLayer): a field takes the
// member or its number.
// A wire::TerminateCause is errors.TerminateCause, the (layer, etype, code) named tuple.
//
// Every translation unit that converts these types must include this header (a type_caster is
// part of the type's definition for pybind11); no py::enum_ binds them.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/cm/backlog_counters.h"
#include "core/cm/mpa_policy.h"
#include "core/credit/peer_channel.h"
#include "core/personality/policy_names.h"
#include "core/rdmap/work_request.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/mpa_frame.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::bindings {

// EnumNames<E>: the Python class E is given to Python as (module, cls), and each value's name
// (the Python member's value).
template <class E>
struct EnumNames;

// An MPA policy's enums: named as in personality files.
template <class E>
struct PolicyEnumNames {
  static constexpr char module[] = "rdma_interop.policy_enums";
  static std::string_view name(E value) { return personality::policy_name(value); }
  static std::optional<E> value(std::string_view name) {
    return personality::policy_value<E>(name);
  }
};

#define RDMA_INTEROP_POLICY_ENUM(Enum, Class)              \
  template <>                                              \
  struct EnumNames<cm::Enum> : PolicyEnumNames<cm::Enum> { \
    static constexpr char cls[] = Class;                   \
  }
RDMA_INTEROP_POLICY_ENUM(RtrType, "Rtr");
RDMA_INTEROP_POLICY_ENUM(CrcMode, "Crc");
RDMA_INTEROP_POLICY_ENUM(PeerToPeer, "PeerToPeer");
RDMA_INTEROP_POLICY_ENUM(OnNewerRevision, "OnNewerRevision");
RDMA_INTEROP_POLICY_ENUM(Refusal, "Refusal");
RDMA_INTEROP_POLICY_ENUM(OnMalformed, "OnMalformed");
RDMA_INTEROP_POLICY_ENUM(RtrReply, "RtrReply");
RDMA_INTEROP_POLICY_ENUM(NoCommonRtr, "NoCommonRtr");
RDMA_INTEROP_POLICY_ENUM(RtrCheck, "RtrCheck");
RDMA_INTEROP_POLICY_ENUM(RtrFromReply, "RtrFromReply");
#undef RDMA_INTEROP_POLICY_ENUM

// The value of E whose name(value) is `name`, among the values first..last.
template <class E, class Names>
std::optional<E> value_named(std::string_view name, E first, E last, Names names) {
  for (auto i = static_cast<int>(first); i <= static_cast<int>(last); ++i) {
    if (names(static_cast<E>(i)) == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

template <>
struct EnumNames<cm::BacklogOverflow> {
  static constexpr char module[] = "rdma_interop.policy_enums";
  static constexpr char cls[] = "Overflow";
  static std::string_view name(cm::BacklogOverflow value) { return cm::overflow_name(value); }
  static std::optional<cm::BacklogOverflow> value(std::string_view name) {
    return value_named(name, cm::BacklogOverflow::kDrop, cm::BacklogOverflow::kReject,
                       cm::overflow_name);
  }
};

template <>
struct EnumNames<rdmap::WcStatus> {
  static constexpr char module[] = "rdma_interop.completion_enums";
  static constexpr char cls[] = "WcStatus";
  static std::string_view name(rdmap::WcStatus value) { return rdmap::wc_status_name(value); }
  static std::optional<rdmap::WcStatus> value(std::string_view name) {
    return value_named(name, rdmap::WcStatus::kSuccess, rdmap::WcStatus::kBadResponse,
                       rdmap::wc_status_name);
  }
};

template <>
struct EnumNames<rdmap::WcOpcode> {
  static constexpr char module[] = "rdma_interop.completion_enums";
  static constexpr char cls[] = "WcOpcode";
  static std::string_view name(rdmap::WcOpcode value) {
    switch (value) {
      case rdmap::WcOpcode::kSend:
        return "send";
      case rdmap::WcOpcode::kRdmaWrite:
        return "rdma_write";
      case rdmap::WcOpcode::kRdmaRead:
        return "rdma_read";
      case rdmap::WcOpcode::kRecv:
        return "recv";
    }
    return "?";
  }
  static std::optional<rdmap::WcOpcode> value(std::string_view text) {
    return value_named(text, rdmap::WcOpcode::kSend, rdmap::WcOpcode::kRecv, name);
  }
};

template <>
struct EnumNames<wire::MpaFrameKind> {
  static constexpr char module[] = "rdma_interop.wire_enums";
  static constexpr char cls[] = "MpaKind";
  static std::string_view name(wire::MpaFrameKind value) {
    return value == wire::MpaFrameKind::kRequest ? "request" : "reply";
  }
  static std::optional<wire::MpaFrameKind> value(std::string_view text) {
    return value_named(text, wire::MpaFrameKind::kRequest, wire::MpaFrameKind::kReply, name);
  }
};

template <>
struct EnumNames<credit::ChannelState> {
  static constexpr char module[] = "rdma_interop.messaging_enums";
  static constexpr char cls[] = "PeerState";
  static std::string_view name(credit::ChannelState value) { return credit::state_name(value); }
  static std::optional<credit::ChannelState> value(std::string_view text) {
    return value_named(text, credit::ChannelState::kConnecting, credit::ChannelState::kClosed,
                       credit::state_name);
  }
};

template <class E>
pybind11::object python_enum_class() {
  return pybind11::module_::import(EnumNames<E>::module).attr(EnumNames<E>::cls);
}

// The caster of each of these enums: through the Python member's value, the value's name.
template <class E>
struct NamedEnumCaster {
  PYBIND11_TYPE_CASTER(E, pybind11::detail::const_name(EnumNames<E>::cls));

  bool load(pybind11::handle source, bool convert) {
    pybind11::object cls = python_enum_class<E>();
    if (!convert && !pybind11::isinstance(source, cls)) return false;
    // The enum's constructor takes a member or a value; its ValueError names the class.
    pybind11::object member = cls(source);
    auto parsed = EnumNames<E>::value(pybind11::cast<std::string>(member.attr("value")));
    if (!parsed) return false;
    value = *parsed;
    return true;
  }

  static pybind11::handle cast(E source, pybind11::return_value_policy, pybind11::handle) {
    return python_enum_class<E>()(std::string(EnumNames<E>::name(source))).release();
  }
};

// The enums whose Python class is an IntEnum of the wire's numbers: (module, cls).
template <class E>
struct IntEnumClass;

template <>
struct IntEnumClass<wire::RdmapOpcode> {
  static constexpr char module[] = "rdma_interop.wire_enums";
  static constexpr char cls[] = "RdmapOpcode";
};

template <>
struct IntEnumClass<wire::TermLayer> {
  static constexpr char module[] = "rdma_interop.errors";
  static constexpr char cls[] = "TermLayer";
};

// Their caster: through the member's number. A number no member has is the IntEnum's own
// ValueError, so no C++ value outside the enum is ever made.
template <class E>
struct IntEnumCaster {
  PYBIND11_TYPE_CASTER(E, pybind11::detail::const_name(IntEnumClass<E>::cls));

  static pybind11::object python_class() {
    return pybind11::module_::import(IntEnumClass<E>::module).attr(IntEnumClass<E>::cls);
  }

  bool load(pybind11::handle source, bool convert) {
    pybind11::object cls = python_class();
    // A plain number is the member's value: taken even where pybind11 does not convert, so
    // Terminate(2, 0, 2) is a cause's parts in its first overload, not the fields in order.
    bool number = PyLong_Check(source.ptr()) && !PyBool_Check(source.ptr());
    if (!convert && !number && !pybind11::isinstance(source, cls)) return false;
    if (pybind11::isinstance<pybind11::str>(source)) return false;
    value = static_cast<E>(pybind11::cast<int>(cls(source)));
    return true;
  }

  static pybind11::handle cast(E source, pybind11::return_value_policy, pybind11::handle) {
    return python_class()(static_cast<int>(source)).release();
  }
};

}  // namespace rdma_interop::bindings

namespace pybind11::detail {

#define RDMA_INTEROP_NAMED_ENUM(E) \
  template <>                      \
  struct type_caster<E> : rdma_interop::bindings::NamedEnumCaster<E> {}
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::RtrType);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::CrcMode);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::PeerToPeer);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::OnNewerRevision);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::Refusal);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::OnMalformed);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::RtrReply);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::NoCommonRtr);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::RtrCheck);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::RtrFromReply);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::cm::BacklogOverflow);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::rdmap::WcStatus);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::rdmap::WcOpcode);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::wire::MpaFrameKind);
RDMA_INTEROP_NAMED_ENUM(rdma_interop::credit::ChannelState);
#undef RDMA_INTEROP_NAMED_ENUM

template <>
struct type_caster<rdma_interop::wire::RdmapOpcode>
    : rdma_interop::bindings::IntEnumCaster<rdma_interop::wire::RdmapOpcode> {};
template <>
struct type_caster<rdma_interop::wire::TermLayer>
    : rdma_interop::bindings::IntEnumCaster<rdma_interop::wire::TermLayer> {};

// wire::TerminateCause <-> errors.TerminateCause, the (layer, etype, code) named tuple (any
// three-item sequence on the way in).
template <>
struct type_caster<rdma_interop::wire::TerminateCause> {
  PYBIND11_TYPE_CASTER(rdma_interop::wire::TerminateCause,
                       const_name("rdma_interop.errors.TerminateCause"));

  bool load(handle source, bool convert) {
    if (isinstance<str>(source) || !isinstance<sequence>(source)) return false;
    auto items = reinterpret_borrow<sequence>(source);
    if (items.size() != 3) return false;
    make_caster<rdma_interop::wire::TermLayer> layer;
    make_caster<std::uint8_t> etype;
    make_caster<std::uint8_t> code;
    if (!layer.load(items[0], convert) || !etype.load(items[1], convert) ||
        !code.load(items[2], convert)) {
      return false;
    }
    value = rdma_interop::wire::TerminateCause{cast_op<rdma_interop::wire::TermLayer>(layer),
                                               cast_op<std::uint8_t>(etype),
                                               cast_op<std::uint8_t>(code)};
    return true;
  }

  static handle cast(const rdma_interop::wire::TerminateCause& source, return_value_policy,
                     handle) {
    return module_::import("rdma_interop.errors")
        .attr("TerminateCause")(pybind11::cast(source.layer), source.etype, source.code)
        .release();
  }
};

// cm::RtrSet <-> frozenset[Rtr].
template <>
struct type_caster<rdma_interop::cm::RtrSet> {
  PYBIND11_TYPE_CASTER(rdma_interop::cm::RtrSet,
                       const_name("frozenset[rdma_interop.policy_enums.Rtr]"));

  bool load(handle source, bool convert) {
    if (isinstance<str>(source) || !hasattr(source, "__iter__")) return false;
    rdma_interop::cm::RtrSet set;
    for (handle item : reinterpret_borrow<object>(source)) {
      make_caster<rdma_interop::cm::RtrType> type;
      if (!type.load(item, convert)) return false;
      switch (cast_op<rdma_interop::cm::RtrType>(type)) {
        case rdma_interop::cm::RtrType::kSend:
          set.send = true;
          break;
        case rdma_interop::cm::RtrType::kWrite:
          set.write = true;
          break;
        case rdma_interop::cm::RtrType::kRead:
          set.read = true;
          break;
      }
    }
    value = set;
    return true;
  }

  static handle cast(const rdma_interop::cm::RtrSet& source, return_value_policy, handle) {
    list types;
    if (source.send) types.append(pybind11::cast(rdma_interop::cm::RtrType::kSend));
    if (source.write) types.append(pybind11::cast(rdma_interop::cm::RtrType::kWrite));
    if (source.read) types.append(pybind11::cast(rdma_interop::cm::RtrType::kRead));
    return reinterpret_steal<object>(PyFrozenSet_New(types.ptr())).release();
  }
};

}  // namespace pybind11::detail
