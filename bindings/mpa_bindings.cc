// mpa_bindings.cc - MPA Request/Reply frames (core/wire/mpa_frame.h).
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>

#include "bindings.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/mpa_frame.h"

namespace rdma_interop::bindings {

namespace {

wire::MpaLimits limits_of(std::size_t private_data_limit, bool reject_reserved_bits) {
  wire::MpaLimits limits;
  limits.private_data_limit = private_data_limit;
  limits.reject_reserved_bits = reject_reserved_bits;
  return limits;
}

}  // namespace

void bind_mpa(py::module_& m) {
  using wire::MpaEnhancedParams;
  using wire::MpaFrame;

  m.attr("MPA_HEADER_LEN") = wire::kMpaHeaderLen;
  m.attr("MPA_MAX_PRIVATE_DATA_RFC") = wire::kMpaMaxPrivateDataRfc;
  m.attr("MPA_MAX_PRIVATE_DATA_LINUX") = wire::kMpaMaxPrivateDataLinux;
  m.attr("MPA_REVISION_1") = wire::kMpaRevision1;
  m.attr("MPA_REVISION_2") = wire::kMpaRevision2;
  m.attr("MPA_IRD_ORD_MAX") = wire::kMpaIrdOrdMask;

  py::enum_<wire::MpaFrameKind>(m, "MpaFrameKind")
      .value("REQUEST", wire::MpaFrameKind::kRequest)
      .value("REPLY", wire::MpaFrameKind::kReply);

  py::class_<MpaEnhancedParams>(m, "MpaEnhancedParams")
      .def(py::init<>())
      .def_readwrite("peer_to_peer", &MpaEnhancedParams::peer_to_peer)
      .def_readwrite("rtr_send", &MpaEnhancedParams::rtr_send)
      .def_readwrite("rtr_write", &MpaEnhancedParams::rtr_write)
      .def_readwrite("rtr_read", &MpaEnhancedParams::rtr_read)
      .def_readwrite("ird", &MpaEnhancedParams::ird)
      .def_readwrite("ord", &MpaEnhancedParams::ord)
      .def(py::self == py::self);

  py::class_<MpaFrame>(m, "MpaFrame")
      .def(py::init<>())
      .def_readwrite("kind", &MpaFrame::kind)
      .def_readwrite("markers", &MpaFrame::markers)
      .def_readwrite("crc", &MpaFrame::crc)
      .def_readwrite("reject", &MpaFrame::reject)
      .def_readwrite("revision", &MpaFrame::revision)
      .def_readwrite("enhanced", &MpaFrame::enhanced)
      .def_property(
          "private_data", [](const MpaFrame& f) { return to_bytes(f.private_data); },
          [](MpaFrame& f, py::handle data) { f.private_data = copy_bytes(data); })
      .def_readwrite("reserved_bits", &MpaFrame::reserved_bits)
      .def(py::self == py::self)
      .def("__repr__", [](const MpaFrame& f) { return wire::to_string(f); });

  m.def(
      "encode_mpa_frame",
      [](const MpaFrame& frame, std::size_t private_data_limit, bool reject_reserved_bits) {
        auto bytes =
            wire::encode_mpa_frame(frame, limits_of(private_data_limit, reject_reserved_bits));
        if (!bytes) throw_wire_error(bytes.error());
        return to_bytes(*bytes);
      },
      py::arg("frame"), py::arg("private_data_limit") = wire::kMpaMaxPrivateDataRfc,
      py::arg("reject_reserved_bits") = true, "The frame's bytes; raises WireError.");
  m.def(
      "decode_mpa_frame",
      [](py::handle data, std::size_t private_data_limit, bool reject_reserved_bits) {
        BytesView view(data);
        auto frame = wire::decode_mpa_frame(view.span(),
                                            limits_of(private_data_limit, reject_reserved_bits));
        if (!frame) throw_wire_error(frame.error());
        return std::move(*frame);
      },
      py::arg("data"), py::arg("private_data_limit") = wire::kMpaMaxPrivateDataRfc,
      py::arg("reject_reserved_bits") = true, "Decodes exactly one whole frame; raises WireError.");
  m.def(
      "mpa_frame_length",
      [](py::handle header, std::size_t private_data_limit, bool reject_reserved_bits) {
        BytesView view(header);
        auto length = wire::mpa_frame_length(view.span(),
                                             limits_of(private_data_limit, reject_reserved_bits));
        if (!length) throw_wire_error(length.error());
        return *length;
      },
      py::arg("header"), py::arg("private_data_limit") = wire::kMpaMaxPrivateDataRfc,
      py::arg("reject_reserved_bits") = true,
      "Total frame length from its first MPA_HEADER_LEN octets; raises WireError.");
  m.def("mpa_pd_length", &wire::mpa_pd_length, py::arg("frame"),
        "PD_Length as it goes on the wire (IRD/ORD words included).");
}

}  // namespace rdma_interop::bindings
