// rdmap_bindings.cc - DDP segment headers, RDMA Read Request, Terminate
// (core/wire/ddp_segment.h, read_request.h, terminate.h).
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/wire/ddp_segment.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/read_request.h"
#include "core/wire/terminate.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::bindings {

namespace {

void bind_ddp(py::module_& m) {
  using wire::DdpHeader;
  using wire::RdmapOpcode;

  m.attr("DDP_TAGGED_HEADER_LEN") = wire::kDdpTaggedHeaderLen;
  m.attr("DDP_UNTAGGED_HEADER_LEN") = wire::kDdpUntaggedHeaderLen;

  py::enum_<RdmapOpcode>(m, "RdmapOpcode")
      .value("RDMA_WRITE", RdmapOpcode::kRdmaWrite)
      .value("RDMA_READ_REQUEST", RdmapOpcode::kRdmaReadRequest)
      .value("RDMA_READ_RESPONSE", RdmapOpcode::kRdmaReadResponse)
      .value("SEND", RdmapOpcode::kSend)
      .value("SEND_WITH_INVALIDATE", RdmapOpcode::kSendWithInvalidate)
      .value("SEND_WITH_SOLICITED_EVENT", RdmapOpcode::kSendWithSolicitedEvent)
      .value("SEND_WITH_SOLICITED_EVENT_AND_INVALIDATE",
             RdmapOpcode::kSendWithSolicitedEventAndInvalidate)
      .value("TERMINATE", RdmapOpcode::kTerminate);

  py::class_<DdpHeader>(m, "DdpHeader")
      .def(py::init<>())
      .def_readwrite("tagged", &DdpHeader::tagged)
      .def_readwrite("last", &DdpHeader::last)
      .def_readwrite("opcode", &DdpHeader::opcode)
      .def_readwrite("ddp_version", &DdpHeader::ddp_version)
      .def_readwrite("rdmap_version", &DdpHeader::rdmap_version)
      .def_readwrite("stag", &DdpHeader::stag)
      .def_readwrite("tagged_offset", &DdpHeader::tagged_offset)
      .def_readwrite("invalidate_stag", &DdpHeader::invalidate_stag)
      .def_readwrite("queue_number", &DdpHeader::queue_number)
      .def_readwrite("msn", &DdpHeader::msn)
      .def_readwrite("message_offset", &DdpHeader::message_offset)
      .def("length", &DdpHeader::length)
      .def(py::self == py::self)
      .def("__repr__", [](const DdpHeader& h) { return wire::to_string(h); });

  m.def(
      "encode_ddp_header",
      [](const DdpHeader& header) {
        std::uint8_t out[wire::kDdpUntaggedHeaderLen] = {};
        std::size_t length = wire::encode_ddp_header(header, out);
        return to_bytes(std::span<const std::uint8_t>(out, length));
      },
      py::arg("header"));
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

  m.def("rdma_write_header", &wire::rdma_write_header, py::arg("sink_stag"), py::arg("sink_to"),
        py::arg("last"));
  m.def("read_response_header", &wire::read_response_header, py::arg("sink_stag"),
        py::arg("sink_to"), py::arg("last"));
  m.def("read_request_header", &wire::read_request_header, py::arg("msn"));
  m.def("send_header", &wire::send_header, py::arg("msn"), py::arg("message_offset"),
        py::arg("last"), py::arg("solicited_event") = false,
        py::arg("invalidate_stag") = py::none());
  m.def("terminate_header", &wire::terminate_header, py::arg("msn"));
}

void bind_read_request(py::module_& m) {
  using wire::ReadRequest;

  m.attr("READ_REQUEST_BODY_LEN") = wire::kReadRequestBodyLen;

  py::class_<ReadRequest>(m, "ReadRequest")
      .def(py::init<>())
      .def_readwrite("sink_stag", &ReadRequest::sink_stag)
      .def_readwrite("sink_tagged_offset", &ReadRequest::sink_tagged_offset)
      .def_readwrite("size", &ReadRequest::size)
      .def_readwrite("source_stag", &ReadRequest::source_stag)
      .def_readwrite("source_tagged_offset", &ReadRequest::source_tagged_offset)
      .def(py::self == py::self);

  m.def(
      "encode_read_request",
      [](const ReadRequest& request) { return to_bytes(wire::encode_read_request(request)); },
      py::arg("request"));
  m.def(
      "decode_read_request",
      [](py::handle payload) {
        BytesView view(payload);
        auto request = wire::decode_read_request(view.span());
        if (!request) throw_wire_error(request.error());
        return *request;
      },
      py::arg("payload"), "The 28-octet Read Request body; raises WireError.");
}

void bind_terminate(py::module_& m) {
  using wire::TerminateCause;
  using wire::TerminateMessage;

  py::enum_<wire::TermLayer>(m, "TermLayer")
      .value("RDMAP", wire::TermLayer::kRdmap)
      .value("DDP", wire::TermLayer::kDdp)
      .value("LLP", wire::TermLayer::kLlp);

  py::class_<TerminateCause>(m, "TerminateCause")
      .def(py::init<>())
      .def_readwrite("layer", &TerminateCause::layer)
      .def_readwrite("etype", &TerminateCause::etype)
      .def_readwrite("code", &TerminateCause::code)
      .def(py::self == py::self)
      .def("__repr__", [](const TerminateCause& c) { return wire::describe(c); });

  py::class_<TerminateMessage>(m, "TerminateMessage")
      .def(py::init<>())
      .def_readwrite("cause", &TerminateMessage::cause)
      .def_readwrite("ddp_segment_length", &TerminateMessage::ddp_segment_length)
      .def_property(
          "ddp_header", [](const TerminateMessage& t) { return to_bytes(t.ddp_header); },
          [](TerminateMessage& t, py::handle data) { t.ddp_header = copy_bytes(data); })
      .def_readwrite("rdmap_header_included", &TerminateMessage::rdmap_header_included)
      .def_property(
          "rdmap_header", [](const TerminateMessage& t) { return to_bytes(t.rdmap_header); },
          [](TerminateMessage& t, py::handle data) { t.rdmap_header = copy_bytes(data); })
      .def(py::self == py::self)
      .def("__repr__", [](const TerminateMessage& t) { return wire::to_string(t); });

  m.def(
      "encode_terminate_body",
      [](const TerminateMessage& message) {
        return to_bytes(wire::encode_terminate_body(message));
      },
      py::arg("message"));
  m.def(
      "encode_terminate",
      [](const TerminateMessage& message, std::uint32_t msn) {
        return to_bytes(wire::encode_terminate(message, msn));
      },
      py::arg("message"), py::arg("msn"), "A whole Terminate ULPDU (DDP header on QN 2).");
  m.def(
      "decode_terminate_body",
      [](py::handle body) {
        BytesView view(body);
        auto message = wire::decode_terminate_body(view.span());
        if (!message) throw_wire_error(message.error());
        return std::move(*message);
      },
      py::arg("body"), "A Terminate segment's payload; raises WireError.");
  m.def(
      "terminate_for_ulpdu",
      [](std::string_view error_name, py::handle offending_ulpdu) {
        BytesView view(offending_ulpdu);
        return wire::terminate_for_ulpdu(wire_error_from_name(error_name), view.span());
      },
      py::arg("error_name"), py::arg("offending_ulpdu"),
      "The Terminate a receiver sends for the named error found in offending_ulpdu.");
  m.def(
      "terminate_for_cause",
      [](const TerminateCause& cause, py::handle offending_ulpdu) {
        BytesView view(offending_ulpdu);
        return wire::terminate_for_cause(cause, view.span());
      },
      py::arg("cause"), py::arg("offending_ulpdu"),
      "The Terminate for a placement error the provider found.");
}

}  // namespace

void bind_rdmap(py::module_& m) {
  bind_ddp(m);
  bind_read_request(m);
  bind_terminate(m);
}

}  // namespace rdma_interop::bindings
