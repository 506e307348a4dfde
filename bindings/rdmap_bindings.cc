// rdmap_bindings.cc - DDP segment headers, RDMA Read Request, Terminate
// (core/wire/ddp_segment.h, read_request.h, terminate.h), bound once: the package's
// rdma_interop.wire re-exports DdpHeader, ReadRequest and Terminate as they are here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "core/wire/ddp_segment.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/read_request.h"
#include "core/wire/terminate.h"
#include "core/wire/wire_error.h"
#include "enum_casters.h"
#include "value_class.h"

namespace rdma_interop::bindings {

namespace {

void bind_ddp(py::module_& m) {
  using wire::DdpHeader;
  using wire::RdmapOpcode;

  m.attr("DDP_TAGGED_HEADER_LEN") = wire::kDdpTaggedHeaderLen;
  m.attr("DDP_UNTAGGED_HEADER_LEN") = wire::kDdpUntaggedHeaderLen;

  ValueClass<DdpHeader> header(
      m, "DdpHeader",
      "A DDP segment header with the RDMAP control octet it carries (RFC 5041 s4, RFC 5040 "
      "s4). Tagged segments (14 octets) use stag and tagged_offset; untagged ones (18 octets) "
      "use invalidate_stag, queue_number, msn and message_offset. The versions are fields so "
      "that tests can send wrong ones. The static methods build the header of each RDMAP "
      "message so callers do not pick bits by hand.");
  header.readonly("tagged", &DdpHeader::tagged, "T: the tagged buffer model")
      .readonly("last", &DdpHeader::last, "L: the last segment of its message")
      .readonly("opcode", &DdpHeader::opcode, "the RDMAP opcode (RdmapOpcode)")
      .readonly("ddp_version", &DdpHeader::ddp_version)
      .readonly("rdmap_version", &DdpHeader::rdmap_version)
      .readonly("stag", &DdpHeader::stag, "tagged: the sink STag")
      .readonly("tagged_offset", &DdpHeader::tagged_offset, "tagged: the sink tagged offset")
      .readonly("invalidate_stag", &DdpHeader::invalidate_stag,
                "untagged, RsvdULP: Send with Invalidate only")
      .readonly("queue_number", &DdpHeader::queue_number, "untagged: QN (RFC 5040 s5.1)")
      .readonly("msn", &DdpHeader::msn, "untagged: message sequence number")
      .readonly("message_offset", &DdpHeader::message_offset, "untagged: MO")
      .hashable();
  header.cls()
      .def_property_readonly("length", &DdpHeader::length, "Octets on the wire: 14 tagged, 18 "
                                                            "untagged.")
      .def(
          "encode",
          [](const DdpHeader& h) {
            std::uint8_t out[wire::kDdpUntaggedHeaderLen] = {};
            std::size_t length = wire::encode_ddp_header(h, out);
            return to_bytes(std::span<const std::uint8_t>(out, length));
          },
          "The header's octets.")
      .def("__str__", [](const DdpHeader& h) { return wire::to_string(h); })
      .def_static("rdma_write", &wire::rdma_write_header, py::arg("sink_stag"),
                  py::arg("sink_to"), py::kw_only(), py::arg("last") = true)
      .def_static("read_response", &wire::read_response_header, py::arg("sink_stag"),
                  py::arg("sink_to"), py::kw_only(), py::arg("last") = true)
      .def_static("read_request", &wire::read_request_header, py::arg("msn"))
      .def_static("send", &wire::send_header, py::arg("msn"), py::arg("message_offset") = 0,
                  py::kw_only(), py::arg("last") = true, py::arg("solicited_event") = false,
                  py::arg("invalidate_stag") = py::none(),
                  "A Send-family header; solicited_event and invalidate_stag pick the opcode.")
      .def_static("terminate", &wire::terminate_header, py::arg("msn"));
  header.done();

  m.def(
      "decode_ddp_segment",
      [](py::handle ulpdu) {
        BytesView view(ulpdu);
        auto segment = wire::decode_ddp_segment(view.span());
        if (!segment) throw_wire_error(segment.error());
        return py::make_tuple(segment->header, to_bytes(segment->payload));
      },
      py::arg("ulpdu"), "(DdpHeader, payload bytes) of one ULPDU; raises WireError.");

  m.def("opcode_is_tagged", &wire::opcode_is_tagged, py::arg("opcode"));
  m.def("opcode_queue_number", &wire::opcode_queue_number, py::arg("opcode"));
  m.def("opcode_is_reserved", &wire::opcode_is_reserved, py::arg("raw_opcode"));
  m.def(
      "opcode_name", [](RdmapOpcode op) { return std::string(wire::opcode_name(op)); },
      py::arg("opcode"));
}

void bind_read_request(py::module_& m) {
  using wire::ReadRequest;

  m.attr("READ_REQUEST_BODY_LEN") = wire::kReadRequestBodyLen;

  ValueClass<ReadRequest> request(m, "ReadRequest",
                                  "The 28-octet RDMA Read Request body (RFC 5040 s4.4).");
  request.readonly("sink_stag", &ReadRequest::sink_stag)
      .readonly("sink_tagged_offset", &ReadRequest::sink_tagged_offset)
      .readonly("size", &ReadRequest::size,
                "zero-length Reads are legal (the RFC 6581 Read RTR is one)")
      .readonly("source_stag", &ReadRequest::source_stag)
      .readonly("source_tagged_offset", &ReadRequest::source_tagged_offset)
      .hashable();
  request.cls()
      .def(
          "encode", [](const ReadRequest& r) { return to_bytes(wire::encode_read_request(r)); },
          "The body's 28 octets.")
      .def_static(
          "decode",
          [](py::handle payload) {
            BytesView view(payload);
            auto decoded = wire::decode_read_request(view.span());
            if (!decoded) throw_wire_error(decoded.error());
            return *decoded;
          },
          py::arg("payload"),
          "Raises WireError rdmap_read_request_bad_length unless exactly 28 octets.");
  request.done();
}

// A bytes field of a Terminate: a vector in C++.
auto terminate_bytes(std::vector<std::uint8_t> wire::TerminateMessage::*member) {
  return std::make_pair(
      [member](const wire::TerminateMessage& t) { return to_bytes(t.*member); },
      [member](wire::TerminateMessage& t, py::handle data) { t.*member = copy_bytes(data); });
}

void bind_terminate(py::module_& m) {
  using wire::TerminateMessage;

  auto ddp_header = terminate_bytes(&TerminateMessage::ddp_header);
  auto rdmap_header = terminate_bytes(&TerminateMessage::rdmap_header);
  ValueClass<TerminateMessage> terminate(
      m, "Terminate",
      "An RDMAP Terminate message (RFC 5040 s4.8, wire::TerminateMessage): the error's cause "
      "(layer, etype, code) and what it was about. Terminate(layer, etype, code, ...) builds "
      "one from the cause's parts. ddp_segment_length (the M flag) is the length of the "
      "offending segment; ddp_header (the D flag) its DDP/RDMAP header as it arrived; "
      "rdmap_header (the R flag) the Read Request body when the offending segment was one.");
  // Before the constructor done() adds: tried first, so three numbers are a cause's parts.
  terminate.cls().def(
      py::init([](wire::TermLayer layer, std::uint8_t etype, std::uint8_t code,
                  const py::kwargs& fields) {
        py::object bound = py::module_::import("rdma_interop._core").attr("Terminate");
        fields["cause"] = py::cast(wire::TerminateCause{layer, etype, code});
        return bound(**fields).cast<TerminateMessage>();
      }),
      py::arg("layer"), py::arg("etype"), py::arg("code"));
  terminate.readonly("cause", &TerminateMessage::cause, "(layer, etype, code): a TerminateCause")
      .readonly("ddp_segment_length", &TerminateMessage::ddp_segment_length,
                "M: the length of the offending segment, else None")
      .readonly_property("ddp_header", ddp_header.first, ddp_header.second,
                         "D: the offending segment's DDP (and RDMAP control) header")
      .readonly("rdmap_header_included", &TerminateMessage::rdmap_header_included,
                "R: the RDMAP header was included")
      .readonly_property("rdmap_header", rdmap_header.first, rdmap_header.second,
                         "R: the Read Request body, when the offending segment was one")
      .hashable();
  terminate.cls()
      .def_property_readonly(
          "layer", [](const TerminateMessage& t) { return t.cause.layer; }, "cause.layer")
      .def_property_readonly(
          "etype", [](const TerminateMessage& t) { return t.cause.etype; }, "cause.etype")
      .def_property_readonly(
          "code", [](const TerminateMessage& t) { return t.cause.code; }, "cause.code")
      .def(
          "encode",
          [](const TerminateMessage& t, std::uint32_t msn) {
            return to_bytes(wire::encode_terminate(t, msn));
          },
          py::arg("msn"),
          "A whole Terminate ULPDU: untagged DDP header (QN 2, this MSN, MO 0, L) + body.")
      .def(
          "encode_body",
          [](const TerminateMessage& t) { return to_bytes(wire::encode_terminate_body(t)); },
          "The Terminate body alone (what follows the DDP header).")
      .def_static(
          "decode",
          [](py::handle ulpdu) {
            BytesView view(ulpdu);
            auto segment = wire::decode_ddp_segment(view.span());
            if (!segment) throw_wire_error(segment.error());
            if (segment->header.opcode != wire::RdmapOpcode::kTerminate) {
              // The caller dispatches on the opcode: a valid segment of another is no WireError.
              throw py::value_error(
                  "not a Terminate ULPDU: opcode " +
                  py::cast<std::string>(py::cast(segment->header.opcode).attr("name")));
            }
            auto message = wire::decode_terminate_body(segment->payload);
            if (!message) throw_wire_error(message.error());
            return std::move(*message);
          },
          py::arg("ulpdu"),
          "Decodes a whole Terminate ULPDU (as encode produces). Raises WireError for "
          "malformed bytes, ValueError if the ULPDU is a valid segment of another opcode.")
      .def_static(
          "decode_body",
          [](py::handle body) {
            BytesView view(body);
            auto message = wire::decode_terminate_body(view.span());
            if (!message) throw_wire_error(message.error());
            return std::move(*message);
          },
          py::arg("body"), "Decodes the payload of a Terminate segment; raises WireError.")
      .def_static(
          "for_error",
          [](py::handle error, py::handle offending_ulpdu) {
            BytesView view(offending_ulpdu);
            auto name = py::cast<std::string>(error.attr("name"));
            return wire::terminate_for_ulpdu(wire_error_from_name(name), view.span());
          },
          py::arg("error"), py::arg("offending_ulpdu") = py::bytes(),
          "The Terminate a receiver sends for a WireError found in offending_ulpdu, "
          "including the offending headers when their layout is known.")
      .def_static(
          "for_cause",
          [](const wire::TerminateCause& cause, py::handle offending_ulpdu) {
            BytesView view(offending_ulpdu);
            return wire::terminate_for_cause(cause, view.span());
          },
          py::arg("cause"), py::arg("offending_ulpdu") = py::bytes(),
          "The Terminate for a placement error the provider found (STag, bounds, rights).")
      .def("__str__", [](const TerminateMessage& t) { return wire::to_string(t); });
  terminate.done();
}

}  // namespace

void bind_rdmap(py::module_& m) {
  bind_ddp(m);
  bind_read_request(m);
  bind_terminate(m);
}

}  // namespace rdma_interop::bindings
