// mpa_bindings.cc - MPA Request/Reply frames (core/wire/mpa_frame.h), bound once: the package's
// rdma_interop.wire re-exports MpaEnhanced and MpaFrame as they are here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "bindings.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/mpa_frame.h"
#include "enum_casters.h"
#include "value_class.h"

namespace rdma_interop::bindings {

namespace {

wire::MpaLimits limits_of(std::size_t private_data_limit, bool reject_reserved_bits) {
  wire::MpaLimits limits;
  limits.private_data_limit = private_data_limit;
  limits.reject_reserved_bits = reject_reserved_bits;
  return limits;
}

// One of the RFC 6581 fields of a frame, None on a frame without IRD/ORD words.
template <class M>
auto enhanced_field(M wire::MpaEnhancedParams::*member) {
  return [member](const wire::MpaFrame& f) -> std::optional<M> {
    if (!f.enhanced) return std::nullopt;
    return (*f.enhanced).*member;
  };
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

  ValueClass<MpaEnhancedParams> enhanced(
      m, "MpaEnhanced",
      "RFC 6581 s3 IRD/ORD words at the front of a revision-2 frame's private data "
      "(wire::MpaEnhancedParams). An initiator lists the RTR types it can send; a responder "
      "sets the one it chose. ird and ord are 14-bit RDMA Read queue depths (0..MAX_IRD_ORD).");
  enhanced.readonly("peer_to_peer", &MpaEnhancedParams::peer_to_peer)
      .readonly("rtr_send", &MpaEnhancedParams::rtr_send, "zero-length Send (FPDU) RTR")
      .readonly("rtr_write", &MpaEnhancedParams::rtr_write, "zero-length RDMA Write RTR")
      .readonly("rtr_read", &MpaEnhancedParams::rtr_read, "zero-length RDMA Read RTR")
      .readonly("ird", &MpaEnhancedParams::ird, "inbound RDMA Read queue depth")
      .readonly("ord", &MpaEnhancedParams::ord, "outbound RDMA Read queue depth")
      .hashable();
  enhanced.cls().attr("MAX_IRD_ORD") = wire::kMpaIrdOrdMask;
  enhanced.done();

  // The erdma extension (revision 129) stays C++'s: Python decodes without accept_erdma, so
  // no frame it sees carries one, and a revision-129 frame it builds is encoded with zeros.
  ValueClass<MpaFrame> frame(
      m, "MpaFrame",
      "An MPA Request or Reply frame (RFC 5044 s7.1). enhanced is present exactly when the "
      "frame carries RFC 6581 IRD/ORD words (the enhanced flag, revision 2 only); private_data "
      "is the application's part, without those words. reserved_bits are the four low flag "
      "bits: zero on a well-formed frame, set only to send garbage on purpose or as decoded "
      "with reject_reserved_bits=False. str() is the one-line summary "
      "'MPA Request rev 2 CRC p2p rtr=write,read ird=16 ord=16 pd=12'.");
  frame.readonly("kind", &MpaFrame::kind, "Request or Reply: which key the frame starts with")
      .readonly("markers", &MpaFrame::markers, "M: markers every 512 octets")
      .readonly("crc", &MpaFrame::crc, "C: CRC32c on every FPDU")
      .readonly("reject", &MpaFrame::reject, "R: the Reply rejects the connection")
      .readonly("revision", &MpaFrame::revision, "Rev: 1 or 2")
      .readonly_property(
          "private_data", [](const MpaFrame& f) { return to_bytes(f.private_data); },
          [](MpaFrame& f, py::handle data) { f.private_data = copy_bytes(data); },
          "the application's private data; excludes the IRD/ORD words")
      .readonly("enhanced", &MpaFrame::enhanced,
                "the RFC 6581 IRD/ORD words (MpaEnhanced) when the enhanced flag is set, else None")
      .readonly("reserved_bits", &MpaFrame::reserved_bits, "the reserved flag bits as received")
      .hashable();
  frame.cls()
      .def_property_readonly("peer_to_peer", enhanced_field(&MpaEnhancedParams::peer_to_peer))
      .def_property_readonly("rtr_send", enhanced_field(&MpaEnhancedParams::rtr_send))
      .def_property_readonly("rtr_write", enhanced_field(&MpaEnhancedParams::rtr_write))
      .def_property_readonly("rtr_read", enhanced_field(&MpaEnhancedParams::rtr_read))
      .def_property_readonly("ird", enhanced_field(&MpaEnhancedParams::ird))
      .def_property_readonly("ord", enhanced_field(&MpaEnhancedParams::ord))
      .def_property_readonly("pd_length", &wire::mpa_pd_length,
                             "PD_Length as it goes on the wire: private data plus the IRD/ORD "
                             "words")
      .def(
          "encode",
          [](const MpaFrame& f, std::size_t private_data_limit) {
            // reserved_bits are written as given: a frame value says exactly what goes out.
            auto bytes = wire::encode_mpa_frame(f, limits_of(private_data_limit, false));
            if (!bytes) throw_wire_error(bytes.error());
            return to_bytes(*bytes);
          },
          py::kw_only(), py::arg("private_data_limit") = wire::kMpaMaxPrivateDataRfc,
          "The frame's bytes. Raises WireError when a field cannot be represented: IRD/ORD "
          "above 14 bits (mpa_ird_ord_out_of_range), PD_Length above the limit "
          "(mpa_private_data_too_long), IRD/ORD words on a revision-1 frame "
          "(mpa_enhanced_needs_revision_2).")
      .def_static(
          "decode",
          [](py::handle data, std::size_t private_data_limit, bool reject_reserved_bits) {
            BytesView view(data);
            auto decoded = wire::decode_mpa_frame(
                view.span(), limits_of(private_data_limit, reject_reserved_bits));
            if (!decoded) throw_wire_error(decoded.error());
            return std::move(*decoded);
          },
          py::arg("data"), py::kw_only(),
          py::arg("private_data_limit") = wire::kMpaMaxPrivateDataRfc,
          py::arg("reject_reserved_bits") = true,
          "Decodes exactly one whole frame. Raises WireError naming the first wrong field, e.g. "
          "mpa_bad_key, mpa_reserved_bits, mpa_unknown_revision, mpa_private_data_too_long, "
          "mpa_truncated, mpa_trailing_bytes.")
      .def_static(
          "frame_length",
          [](py::handle header, std::size_t private_data_limit, bool reject_reserved_bits) {
            BytesView view(header);
            auto length = wire::mpa_frame_length(
                view.span(), limits_of(private_data_limit, reject_reserved_bits));
            if (!length) throw_wire_error(length.error());
            return *length;
          },
          py::arg("header"), py::kw_only(),
          py::arg("private_data_limit") = wire::kMpaMaxPrivateDataRfc,
          py::arg("reject_reserved_bits") = true,
          "Total frame length, from its first HEADER_LEN octets (validated); for stream readers. "
          "Raises WireError.")
      .def("__str__", [](const MpaFrame& f) { return wire::to_string(f); });
  // Key, flags, Rev and PD_Length: what frame_length() needs.
  frame.cls().attr("HEADER_LEN") = wire::kMpaHeaderLen;
  frame.done();
}

}  // namespace rdma_interop::bindings
