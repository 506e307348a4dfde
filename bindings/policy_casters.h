// policy_casters.h - the enums of an MPA policy and of a listener's backlog policy, and RTR
// sets, as Python has them.
//
// Each enum of core/cm/mpa_policy.h is, in Python, the str enum of rdma_interop.policy_enums whose
// values are the personality file's names (policy_names.h): cm::CrcMode::kOptional is
// Crc.OPTIONAL == "optional". A field takes the member or its name (MpaPolicy(crc="want")) and
// a name no member has is a ValueError, as the enum's own constructor says. An RtrSet is a
// frozenset of Rtr (any iterable of them, or of their names, on the way in). A listener's
// cm::BacklogOverflow is Overflow, named by cm::overflow_name ("drop", "reject").
//
// Every translation unit that converts these types must include this header (a type_caster is
// part of the type's definition for pybind11); no py::enum_ binds them.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <string_view>

#include "core/cm/backlog_counters.h"
#include "core/cm/mpa_policy.h"
#include "core/personality/policy_names.h"

namespace rdma_interop::bindings {

// The rdma_interop.policy_enums class E is given to Python as.
template <class E>
struct PythonEnum;
template <>
struct PythonEnum<cm::RtrType> {
  static constexpr char name[] = "Rtr";
};
template <>
struct PythonEnum<cm::CrcMode> {
  static constexpr char name[] = "Crc";
};
template <>
struct PythonEnum<cm::PeerToPeer> {
  static constexpr char name[] = "PeerToPeer";
};
template <>
struct PythonEnum<cm::OnNewerRevision> {
  static constexpr char name[] = "OnNewerRevision";
};
template <>
struct PythonEnum<cm::Refusal> {
  static constexpr char name[] = "Refusal";
};
template <>
struct PythonEnum<cm::OnMalformed> {
  static constexpr char name[] = "OnMalformed";
};
template <>
struct PythonEnum<cm::RtrReply> {
  static constexpr char name[] = "RtrReply";
};
template <>
struct PythonEnum<cm::NoCommonRtr> {
  static constexpr char name[] = "NoCommonRtr";
};
template <>
struct PythonEnum<cm::RtrCheck> {
  static constexpr char name[] = "RtrCheck";
};
template <>
struct PythonEnum<cm::RtrFromReply> {
  static constexpr char name[] = "RtrFromReply";
};

template <>
struct PythonEnum<cm::BacklogOverflow> {
  static constexpr char name[] = "Overflow";
};

// Each value's name: the personality file's for an MPA policy's enums.
template <class E>
struct EnumNames {
  static std::string_view name(E value) { return personality::policy_name(value); }
  static std::optional<E> value(std::string_view name) {
    return personality::policy_value<E>(name);
  }
};
template <>
struct EnumNames<cm::BacklogOverflow> {
  static std::string_view name(cm::BacklogOverflow value) { return cm::overflow_name(value); }
  static std::optional<cm::BacklogOverflow> value(std::string_view name) {
    for (auto v : {cm::BacklogOverflow::kDrop, cm::BacklogOverflow::kReject}) {
      if (cm::overflow_name(v) == name) return v;
    }
    return std::nullopt;
  }
};

template <class E>
pybind11::object python_enum_class() {
  return pybind11::module_::import("rdma_interop.policy_enums").attr(PythonEnum<E>::name);
}

// The caster of every policy enum: through the Python enum's value, the file's name.
template <class E>
struct PolicyEnumCaster {
  PYBIND11_TYPE_CASTER(E, pybind11::detail::const_name("rdma_interop.policy_enums.") +
                              pybind11::detail::const_name(PythonEnum<E>::name));

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

}  // namespace rdma_interop::bindings

namespace pybind11::detail {

template <>
struct type_caster<rdma_interop::cm::RtrType>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::RtrType> {};
template <>
struct type_caster<rdma_interop::cm::CrcMode>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::CrcMode> {};
template <>
struct type_caster<rdma_interop::cm::PeerToPeer>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::PeerToPeer> {};
template <>
struct type_caster<rdma_interop::cm::OnNewerRevision>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::OnNewerRevision> {};
template <>
struct type_caster<rdma_interop::cm::Refusal>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::Refusal> {};
template <>
struct type_caster<rdma_interop::cm::OnMalformed>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::OnMalformed> {};
template <>
struct type_caster<rdma_interop::cm::RtrReply>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::RtrReply> {};
template <>
struct type_caster<rdma_interop::cm::NoCommonRtr>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::NoCommonRtr> {};
template <>
struct type_caster<rdma_interop::cm::RtrCheck>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::RtrCheck> {};
template <>
struct type_caster<rdma_interop::cm::RtrFromReply>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::RtrFromReply> {};

template <>
struct type_caster<rdma_interop::cm::BacklogOverflow>
    : rdma_interop::bindings::PolicyEnumCaster<rdma_interop::cm::BacklogOverflow> {};

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
