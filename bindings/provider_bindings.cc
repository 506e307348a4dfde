// provider_bindings.cc - the verbs-like provider API (core/transport/provider.h), MPA
// policies and personalities (core/cm/mpa_policy.h, core/personality/), work requests and
// completions (core/rdmap/work_request.h).
//
// Blocking calls (connect, next_request, accept, reject, poll_completions, CompletionQueue
// poll, disconnect, close) release the GIL: other Python threads run while a call waits on
// the provider's event thread.
//
// Memory the provider reads and writes from its event thread (registered regions and the
// initial receive buffers) is pinned here: the connection holds a writable Py_buffer for
// each, so a bytearray cannot be resized nor an mmap closed under it, and the buffers are
// released only after the C++ connection is gone (or the region deregistered).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bindings.h"
#include "core/cm/backlog_counters.h"
#include "core/cm/cm_failure.h"
#include "core/cm/listen_backlog.h"
#include "core/cm/mpa_policy.h"
#include "core/cm/negotiated_params.h"
#include "core/cm/personality.h"
#include "core/personality/file_loader.h"
#include "core/personality/json_codec.h"
#include "core/rdmap/memory_registry.h"
#include "core/rdmap/rdmap_endpoint.h"
#include "core/rdmap/work_request.h"
#include "core/transport/completion_queue.h"
#include "core/transport/provider.h"
#include "core/transport/provider_uri.h"
#include "core/wire/wire_error.h"
#include "enum_casters.h"
#include "value_class.h"

namespace rdma_interop::bindings {

namespace {

using transport::Millis;

// A writable, contiguous Py_buffer held until destroyed (with the GIL held).
class PinnedBuffer {
 public:
  explicit PinnedBuffer(py::handle object) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_SIMPLE | PyBUF_WRITABLE) != 0) {
      throw py::error_already_set();
    }
  }
  ~PinnedBuffer() { PyBuffer_Release(&view_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return view_.buf; }
  std::size_t size() const { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

using Pins = std::vector<std::unique_ptr<PinnedBuffer>>;

// A connection and the Python memory it may touch. The connection goes first: once it is
// destroyed the event thread no longer reads or writes any of the pinned buffers.
struct ConnectionHandle {
  Pins initial_recv_buffers;
  std::unordered_map<std::uint32_t, std::unique_ptr<PinnedBuffer>> regions;
  std::unique_ptr<transport::Connection> connection;  // declared last: destroyed first

  ~ConnectionHandle() { connection.reset(); }
};

// (wr_id, writable buffer) pairs to QpCaps::initial_recvs, pinning each buffer.
void add_initial_recvs(const std::vector<std::pair<std::uint64_t, py::object>>& recvs,
                       transport::QpCaps& caps, Pins& pins) {
  caps.initial_recvs.clear();
  for (const auto& [wr_id, buffer] : recvs) {
    auto pin = std::make_unique<PinnedBuffer>(buffer);
    if (pin->size() > UINT32_MAX) throw py::value_error("initial receive buffer above 4 GiB");
    caps.initial_recvs.push_back({wr_id, pin->data(), static_cast<std::uint32_t>(pin->size())});
    pins.push_back(std::move(pin));
  }
}

// An rdma_interop.provider.ConnectError instance for `error` (GIL held).
py::object connect_error_object(const transport::ConnectError& error) {
  py::object cls = py::module_::import("rdma_interop.provider").attr("ConnectError");
  py::object failure = py::none();
  if (error.failure) failure = py::str(std::string(cm::failure_name(*error.failure)));
  py::object peer_frame = py::none();
  if (error.peer_frame) peer_frame = py::cast(*error.peer_frame);
  return cls(transport::to_string(error), std::string(transport::kind_name(error.kind)), failure,
             error.detail, error.terminate, peer_frame, error.attempts);
}

[[noreturn]] void throw_post_error(rdmap::PostError error) {
  py::object cls = py::module_::import("rdma_interop.provider").attr("PostError");
  py::object exception = cls(std::string(rdmap::post_error_name(error)));
  PyErr_SetObject(cls.ptr(), exception.ptr());
  throw py::error_already_set();
}

transport::ProviderUri parse_uri(std::string_view text) {
  auto uri = transport::parse_provider_uri(text);
  if (!uri) throw py::value_error(uri.error());
  return *uri;
}

std::vector<std::filesystem::path> dirs_or_default(
    const std::optional<std::vector<std::filesystem::path>>& dirs) {
  return dirs ? *dirs : personality::default_personality_dirs();
}

// Durations are whole milliseconds in Python, as in personality files.
template <class T>
auto millis_property(std::chrono::milliseconds T::*field) {
  return std::make_pair(
      [field](const T& value) { return static_cast<std::int64_t>((value.*field).count()); },
      [field](T& value, std::int64_t ms) { value.*field = std::chrono::milliseconds(ms); });
}

void bind_policy(py::module_& m) {
  using cm::MpaPolicy;

  auto request_timeout = millis_property(&MpaPolicy::request_timeout);
  auto reply_timeout = millis_property(&MpaPolicy::reply_timeout);
  auto rtr_timeout = millis_property(&MpaPolicy::rtr_timeout);
  auto first_fpdu_delay = millis_property(&MpaPolicy::first_fpdu_delay);

  ValueClass<MpaPolicy> policy(
      m, "MpaPolicy",
      "What one side of an MPA connection offers, accepts and insists on (core/cm/"
      "mpa_policy.h, which says what each field means and which kernel source it models). "
      "The fields are a personality file's \"mpa\" keys, with the same defaults; str() is "
      "that JSON.");
  policy.field("revision", &MpaPolicy::revision, "Highest revision spoken: 1, 2 or 129 (erdma's)")
      .field("crc", &MpaPolicy::crc, "Whether this side asks for MPA CRC (RFC 5044 s7.1)")
      .field("markers_wanted", &MpaPolicy::markers_wanted,
             "Sets M: asks the peer to send markers to us")
      .field("markers_supported", &MpaPolicy::markers_supported,
             "Can send markers when asked; if not, fails the connection")
      .field("peer_to_peer", &MpaPolicy::peer_to_peer,
             "RFC 6581 peer-to-peer mode (revision 2 only)")
      .field("rtr_offer", &MpaPolicy::rtr_offer,
             "The RTR types an initiator offers and a responder accepts (unless rtr_accepted)")
      .field("rtr_accepted", &MpaPolicy::rtr_accepted,
             "Responder: the RTR types it takes, when not rtr_offer (None)")
      .property(
          "rtr_preference",
          [](const MpaPolicy& p) { return py::tuple(py::cast(p.rtr_preference)); },
          [](MpaPolicy& p, std::vector<cm::RtrType> order) { p.rtr_preference = std::move(order); },
          "The order a responder picks an RTR type in (missing types after it: Read, Write, Send)")
      .field("rtr_reply", &MpaPolicy::rtr_reply,
             "What a responder's Reply names once it has picked an RTR type")
      .field("no_common_rtr", &MpaPolicy::no_common_rtr,
             "What a responder does when the Request offers no RTR type it takes")
      .field("rtr_check", &MpaPolicy::rtr_check, "What a responder takes as the RTR")
      .field("rtr_from_reply", &MpaPolicy::rtr_from_reply,
             "How an initiator reads the RTR types a Reply names")
      .field("rtr_in_revision1", &MpaPolicy::rtr_in_revision1,
             "In revision 1, use the rtr_offer type anyway (iw_cxgb4 with peer2peer=1)")
      .field("read_rtr_sink_stag", &MpaPolicy::read_rtr_sink_stag,
             "The sink STag of the zero-length Read RTR this initiator sends")
      .field("read_rtr_source_stag", &MpaPolicy::read_rtr_source_stag,
             "The source STag of the zero-length Read RTR this initiator sends")
      .field("refuse_zero_stag_read_rtr", &MpaPolicy::refuse_zero_stag_read_rtr,
             "Responder: refuse a Read RTR naming source STag 0 with a Terminate")
      .field("ird", &MpaPolicy::ird, "RFC 6581 s3 inbound RDMA Read depth (14 bits)")
      .field("ord", &MpaPolicy::ord, "RFC 6581 s3 outbound RDMA Read depth (14 bits)")
      .field("strict_ird_ord", &MpaPolicy::strict_ird_ord,
             "An ORD above the peer's IRD fails (MPA code 0x06) instead of being lowered")
      .field("private_data_limit", &MpaPolicy::private_data_limit,
             "Most private data octets taken from the peer (RFC 5044 s7.1: 512)")
      .field("reject_reserved_bits", &MpaPolicy::reject_reserved_bits,
             "Reject a frame whose Res bits are set (RFC 5044 s7.1 says: do not check)")
      .field("fallback_to_revision1", &MpaPolicy::fallback_to_revision1,
             "Initiator: retry in revision 1 after a reset or a revision-1 Reply (cxgb4)")
      .field("on_newer_revision", &MpaPolicy::on_newer_revision,
             "What a responder does with a Request of a revision it does not speak")
      .field("refuse_with", &MpaPolicy::refuse_with,
             "How a side refuses what its policy cannot take")
      .field("on_malformed_frame", &MpaPolicy::on_malformed_frame,
             "What a side does with a frame that does not decode")
      .field("echo_reserved_bits", &MpaPolicy::echo_reserved_bits,
             "Responder: the Reply carries the Request's reserved bits back (siw, erdma)")
      .field("extension_bits", &MpaPolicy::extension_bits,
             "Vendor extension bits this side sets in its frames (0, 4, 8 or 12)")
      .field("ird_ord_sentinel", &MpaPolicy::ird_ord_sentinel,
             "IRD/ORD 0x3fff from the peer means no IRD/ORD negotiation (irdma)")
      .field("send_rtr", &MpaPolicy::send_rtr,
             "Initiator in peer-to-peer mode: send the RTR (False: a peer that never does)")
      .property("request_timeout_ms", request_timeout.first, request_timeout.second,
                "How long a responder waits for the Request (and the RTR)")
      .property("reply_timeout_ms", reply_timeout.first, reply_timeout.second,
                "How long an initiator waits for the Reply")
      .property("rtr_timeout_ms", rtr_timeout.first, rtr_timeout.second,
                "How long a responder waits for the RTR")
      .property("first_fpdu_delay_ms", first_fpdu_delay.first, first_fpdu_delay.second,
                "Initiator: wait this long after the Reply before the first FPDU (kernel siw)");
  policy.cls()
      .def(
          "problems", [](const MpaPolicy& p) { return cm::validate(p); },
          "Contradictions in the fields (cm::validate), one sentence each; empty when usable.")
      .def_static(
          "from_personality",
          [](std::string_view name_or_path,
             const std::optional<std::vector<std::filesystem::path>>& dirs) {
            auto p = personality::find_personality(name_or_path, dirs_or_default(dirs));
            if (!p) throw py::value_error(p.error());
            return p->mpa;
          },
          py::arg("name_or_path"), py::arg("dirs") = py::none(),
          "The policy of a personality (see find_personality); raises ValueError.")
      .def("__str__", [](const MpaPolicy& p) { return personality::to_json(p).dump(); });
  policy.done();

  ValueClass<cm::NegotiatedParams> negotiated(
      m, "NegotiatedParams",
      "What both sides settled on (core/cm/negotiated_params.h). ord: RDMA Reads we may have "
      "outstanding; ird: Reads we accept; peer_ird/peer_ord: what the peer's frame said.");
  negotiated.readonly("revision", &cm::NegotiatedParams::revision)
      .readonly("crc", &cm::NegotiatedParams::crc, "both directions (RFC 5044 s7.1)")
      .readonly("markers_to_peer", &cm::NegotiatedParams::markers_to_peer,
                "we insert markers into what we send")
      .readonly("markers_from_peer", &cm::NegotiatedParams::markers_from_peer)
      .readonly("enhanced", &cm::NegotiatedParams::enhanced,
                "IRD/ORD words were exchanged (RFC 6581)")
      .readonly("peer_to_peer", &cm::NegotiatedParams::peer_to_peer)
      .readonly("rtr", &cm::NegotiatedParams::rtr, "the RTR type in peer-to-peer mode, else None")
      .readonly("ird", &cm::NegotiatedParams::ird)
      .readonly("ord", &cm::NegotiatedParams::ord)
      .readonly("peer_ird", &cm::NegotiatedParams::peer_ird)
      .readonly("peer_ord", &cm::NegotiatedParams::peer_ord)
      .property(
          "peer_private_data",
          [](const cm::NegotiatedParams& p) { return to_bytes(p.peer_private_data); },
          [](cm::NegotiatedParams& p, py::handle data) { p.peer_private_data = copy_bytes(data); });
  negotiated.cls()
      .def(
          "to_json",
          [](py::handle self) {
            // rdma-probe's "negotiated" object: every field but the private data.
            py::dict out;
            for (auto field : self.attr("_fields")) {
              if (field.cast<std::string>() == "peer_private_data") continue;
              py::object value = self.attr(field.cast<py::str>());
              if (py::hasattr(value, "value")) value = value.attr("value");  // Rtr: its name
              out[field] = value;
            }
            return out;
          },
          "rdma-probe's \"negotiated\" object (private data left out).")
      .def("__str__", [](const cm::NegotiatedParams& p) { return cm::to_string(p); });
  negotiated.done();

  m.def(
      "failure_names",
      [] {
        std::vector<std::string> names;
        for (int i = 0; i <= static_cast<int>(cm::kLastCmFailure); ++i) {
          names.emplace_back(cm::failure_name(static_cast<cm::CmFailure>(i)));
        }
        return names;
      },
      "Every CmFailure name (failure_name) in declaration order.");
}

void bind_personality(py::module_& m) {
  using cm::Personality;

  ValueClass<Personality> bound(
      m, "Personality",
      "A peer's MPA choices from tools/personalities/NAME.json (core/cm/personality.h): a "
      "policy plus the private data it sends. str() and to_json() are the file's JSON.");
  bound.field("name", &Personality::name)
      .field("description", &Personality::description)
      .field("mpa", &Personality::mpa)
      .property(
          "private_data", [](const Personality& p) { return to_bytes(p.private_data); },
          [](Personality& p, py::handle data) { p.private_data = copy_bytes(data); })
      .field("source_path", &Personality::source_path,
             "the JSON file it came from; empty when parsed from text")
      .field("source_file", &Personality::source_file,
             "what it was read from: the kernel source file (and functions)")
      .field("source_version", &Personality::source_version, "and the version");
  bound.cls()
      .def("to_json", [](const Personality& p) { return personality::to_json(p).dump(); })
      .def("__str__", [](const Personality& p) { return personality::to_json(p).dump(); });
  bound.done();

  m.def(
      "default_personality_dirs", [] { return personality::default_personality_dirs(); },
      "Where personalities are looked up, in order (existing directories only).");
  m.def(
      "parse_personality",
      [](std::string_view text, std::string_view origin, std::string_view default_name) {
        auto p = personality::parse_personality(text, origin, default_name);
        if (!p) throw py::value_error(p.error());
        return *p;
      },
      py::arg("text"), py::arg("origin") = "<string>", py::arg("default_name") = "",
      "Parses personality JSON; raises ValueError naming the problem.");
  m.def(
      "find_personality",
      [](std::string_view name_or_path,
         const std::optional<std::vector<std::filesystem::path>>& dirs) {
        auto p = personality::find_personality(name_or_path, dirs_or_default(dirs));
        if (!p) throw py::value_error(p.error());
        return *p;
      },
      py::arg("name_or_path"), py::arg("dirs") = py::none(),
      "A personality by name (NAME.json in dirs) or path; raises ValueError.");
  m.def(
      "list_personalities",
      [](const std::optional<std::vector<std::filesystem::path>>& dirs) {
        std::vector<std::string> problems;
        auto found = personality::list_personalities(dirs_or_default(dirs), &problems);
        return py::make_tuple(found, problems);
      },
      py::arg("dirs") = py::none(), "(personalities sorted by name, load errors).");
}

void bind_work_requests(py::module_& m) {
  using rdmap::RecvWr;
  using rdmap::SendWr;
  using rdmap::Sge;
  using rdmap::WorkCompletion;

  m.attr("ACCESS_LOCAL_WRITE") = static_cast<std::uint32_t>(rdmap::kLocalWrite);
  m.attr("ACCESS_REMOTE_WRITE") = static_cast<std::uint32_t>(rdmap::kRemoteWrite);
  m.attr("ACCESS_REMOTE_READ") = static_cast<std::uint32_t>(rdmap::kRemoteRead);
  m.attr("ACCESS_TAGGED_OFFSET_IS_ADDRESS") =
      static_cast<std::uint32_t>(rdmap::kTaggedOffsetIsAddress);

  py::enum_<rdmap::WrOpcode>(m, "WrOpcode")
      .value("SEND", rdmap::WrOpcode::kSend)
      .value("SEND_WITH_INVALIDATE", rdmap::WrOpcode::kSendWithInvalidate)
      .value("SEND_WITH_SOLICITED_EVENT", rdmap::WrOpcode::kSendWithSolicitedEvent)
      .value("SEND_WITH_SOLICITED_EVENT_AND_INVALIDATE",
             rdmap::WrOpcode::kSendWithSolicitedEventAndInvalidate)
      .value("RDMA_WRITE", rdmap::WrOpcode::kRdmaWrite)
      .value("RDMA_READ", rdmap::WrOpcode::kRdmaRead);
  m.def(
      "post_error_name", [](rdmap::PostError e) { return std::string(rdmap::post_error_name(e)); },
      py::arg("error"));
  py::enum_<rdmap::PostError>(m, "PostErrorCode")
      .value("QUEUE_FULL", rdmap::PostError::kQueueFull)
      .value("INVALID_REQUEST", rdmap::PostError::kInvalidRequest)
      .value("NOT_CONNECTED", rdmap::PostError::kNotConnected);

  py::class_<Sge>(m, "Sge")
      .def(py::init<>())
      .def(py::init([](std::uint64_t addr, std::uint32_t length, std::uint32_t lkey) {
             return Sge{addr, length, lkey};
           }),
           py::arg("addr"), py::arg("length"), py::arg("lkey"))
      .def_readwrite("addr", &Sge::addr)
      .def_readwrite("length", &Sge::length)
      .def_readwrite("lkey", &Sge::lkey);

  py::class_<SendWr>(m, "SendWr")
      .def(py::init<>())
      .def_readwrite("wr_id", &SendWr::wr_id)
      .def_readwrite("opcode", &SendWr::opcode)
      .def_readwrite("sge", &SendWr::sge)
      .def_readwrite("remote_stag", &SendWr::remote_stag)
      .def_readwrite("remote_addr", &SendWr::remote_addr)
      .def_readwrite("invalidate_stag", &SendWr::invalidate_stag)
      .def_readwrite("signaled", &SendWr::signaled);

  py::class_<RecvWr>(m, "RecvWr")
      .def(py::init<>())
      .def_readwrite("wr_id", &RecvWr::wr_id)
      .def_readwrite("sge", &RecvWr::sge);

  ValueClass<WorkCompletion> completion(
      m, "WorkCompletion",
      "One completion queue entry (core/rdmap/work_request.h, ibv_wc). terminate is the "
      "Terminate behind an error status; byte_len the received length (RECV) or the message "
      "length.");
  completion.readonly("wr_id", &WorkCompletion::wr_id)
      .readonly("opcode", &WorkCompletion::opcode, "what the completed work request was")
      .readonly("status", &WorkCompletion::status, "how it ended")
      .readonly("byte_len", &WorkCompletion::byte_len, "received length (RECV) or message length")
      .readonly("solicited", &WorkCompletion::solicited, "RECV of a Send with Solicited Event")
      .readonly("invalidated_stag", &WorkCompletion::invalidated_stag,
                "RECV of a Send with Invalidate: the STag it invalidated, else None")
      .readonly("terminate", &WorkCompletion::terminate,
                "the Terminate behind an error status (an errors.TerminateCause), else None");
  completion.cls().def_property_readonly(
      "ok", [](const WorkCompletion& wc) { return wc.status == rdmap::WcStatus::kSuccess; },
      "status is SUCCESS");
  completion.done();
}

void bind_connection(py::module_& m) {
  using transport::ConnectionInfo;
  using transport::ConnectionState;

  m.def(
      "buffer_address",
      [](py::handle buffer) {
        PinnedBuffer pin(buffer);
        return reinterpret_cast<std::uintptr_t>(pin.data());
      },
      py::arg("buffer"),
      "Address of a writable, contiguous buffer's first octet (stable while it is pinned, "
      "e.g. by a memoryview).");

  using transport::CompletionQueue;
  using transport::CompletionQueueCounters;
  ValueClass<CompletionQueueCounters>(m, "CompletionQueueCounters",
                                      "A consistent snapshot of a completion queue's figures.")
      .readonly("entries", &CompletionQueueCounters::entries, "the size; 0: unbounded")
      .readonly("depth", &CompletionQueueCounters::depth, "completions waiting to be polled")
      .readonly("high_water", &CompletionQueueCounters::high_water, "most ever waiting at once")
      .readonly("pushed", &CompletionQueueCounters::pushed, "completions queued")
      .readonly("polled", &CompletionQueueCounters::polled, "completions handed out")
      .readonly("overruns", &CompletionQueueCounters::overruns,
                "completions lost because the queue was full")
      .done();

  using transport::ReceiveCounters;
  ValueClass<ReceiveCounters>(m, "ReceiveCounters",
                              "What a connection's receive side read (core/transport/provider.h).")
      .readonly("reads", &ReceiveCounters::reads, "reads of the stream that brought octets")
      .readonly("octets", &ReceiveCounters::octets, "octets read")
      .readonly("octets_placed", &ReceiveCounters::octets_placed,
                "of them, read straight into the registered memory an RDMA Write named "
                "(direct data placement); 0 where the device places (verbs)")
      .done();

  // Held by shared_ptr: connections created with it (QpCaps.cq) keep a reference of their own.
  py::class_<CompletionQueue, std::shared_ptr<CompletionQueue>>(m, "CompletionQueue")
      .def(py::init<std::uint32_t>(), py::arg("entries") = 0,
           "A completion queue of `entries` (0: unbounded) that connections may share.")
      .def_property_readonly("entries", &CompletionQueue::entries)
      .def(
          "poll",
          [](CompletionQueue& cq, std::size_t max, std::int64_t timeout_ms) {
            py::gil_scoped_release release;
            return cq.poll(max, Millis(timeout_ms));
          },
          py::arg("max"), py::arg("timeout_ms"),
          "Waits up to timeout_ms for a completion (GIL released); returns up to max.")
      .def("wake", &CompletionQueue::wake, "Makes every waiting poll return at once.")
      .def_property_readonly("overrun", &CompletionQueue::overrun)
      .def_property_readonly("counters", &CompletionQueue::counters);

  py::class_<transport::QpCaps>(m, "QpCaps")
      .def(py::init<>())
      .def_readwrite("max_send_wr", &transport::QpCaps::max_send_wr)
      .def_readwrite("max_recv_wr", &transport::QpCaps::max_recv_wr)
      .def_readwrite("max_ulpdu", &transport::QpCaps::max_ulpdu)
      .def_property(
          "cq", [](const transport::QpCaps& c) { return c.cq; },
          [](transport::QpCaps& c, py::object cq) {
            c.cq = cq.is_none() ? nullptr : cq.cast<std::shared_ptr<CompletionQueue>>();
          },
          "The completion queue to complete into; None: the connection's own.");

  py::enum_<ConnectionState>(m, "ConnectionState")
      .value("CONNECTED", ConnectionState::kConnected)
      .value("ERROR", ConnectionState::kError)
      .value("CLOSED", ConnectionState::kClosed);

  ValueClass<ConnectionInfo>(
      m, "ConnectionInfo",
      "What a connection's setup settled on (core/transport/provider.h): the negotiated "
      "parameters, the addresses (\"198.18.0.1:40122\") and the MPA frames both ways.")
      .readonly("scheme", &ConnectionInfo::scheme, "the provider's: \"tcp\", \"verbs\"")
      .readonly("params", &ConnectionInfo::params, "NegotiatedParams")
      .readonly("local_address", &ConnectionInfo::local_address)
      .readonly("peer_address", &ConnectionInfo::peer_address)
      .readonly("sent_frame", &ConnectionInfo::sent_frame, "our Request or Reply")
      .readonly("received_frame", &ConnectionInfo::received_frame, "the peer's")
      .readonly("fell_back_to_revision1", &ConnectionInfo::fell_back_to_revision1,
                "the initiator retried in revision 1")
      .done();

  py::class_<ConnectionHandle>(m, "Connection")
      .def_property_readonly(
          "info", [](const ConnectionHandle& h) { return h.connection->info(); },
          "A copy of what setup settled on: negotiated parameters, addresses, both frames.")
      .def(
          "register_memory",
          [](ConnectionHandle& h, py::handle buffer, std::uint32_t access) {
            auto pin = std::make_unique<PinnedBuffer>(buffer);
            std::uint32_t stag = h.connection->register_memory(pin->data(), pin->size(), access);
            h.regions[stag] = std::move(pin);
            return stag;
          },
          py::arg("buffer"), py::arg("access"),
          "Registers a writable buffer (pinned until deregistered); returns the STag.")
      .def(
          "tagged_offset",
          [](const ConnectionHandle& h, std::uint32_t stag, std::uint64_t addr) {
            return h.connection->tagged_offset(stag, reinterpret_cast<const void*>(addr));
          },
          py::arg("stag"), py::arg("addr"),
          "The tagged offset a peer names the octet at address addr of region stag by (what "
          "to advertise); None for an unknown STag or an address outside the region.")
      .def(
          "deregister_memory",
          [](ConnectionHandle& h, std::uint32_t stag) {
            bool found = h.connection->deregister_memory(stag);
            h.regions.erase(stag);
            return found;
          },
          py::arg("stag"), "Deregisters and unpins; False for an unknown STag.")
      .def(
          "post_send",
          [](ConnectionHandle& h, const rdmap::SendWr& wr) {
            std::optional<rdmap::PostError> error;
            {
              // The provider sends on this thread (provider.h): not with the GIL held.
              py::gil_scoped_release release;
              error = h.connection->post_send(wr);
            }
            if (error) throw_post_error(*error);
          },
          py::arg("wr"), "Queues a Send, RDMA Write or RDMA Read; raises PostError (GIL released).")
      .def(
          "post_recv",
          [](ConnectionHandle& h, const rdmap::RecvWr& wr) {
            std::optional<rdmap::PostError> error;
            {
              // The provider sends on this thread (provider.h): not with the GIL held.
              py::gil_scoped_release release;
              error = h.connection->post_recv(wr);
            }
            if (error) throw_post_error(*error);
          },
          py::arg("wr"), "Queues a receive buffer; raises PostError (GIL released).")
      .def(
          "poll_completions",
          [](ConnectionHandle& h, std::size_t max, std::int64_t timeout_ms) {
            py::gil_scoped_release release;
            return h.connection->poll_completions(max, Millis(timeout_ms));
          },
          py::arg("max"), py::arg("timeout_ms"),
          "Waits up to timeout_ms for a completion (GIL released); returns up to max.")
      .def_property_readonly("state",
                             [](const ConnectionHandle& h) { return h.connection->state(); })
      .def_property_readonly("error_detail",
                             [](const ConnectionHandle& h) { return h.connection->error_detail(); })
      .def_property_readonly(
          "terminate_received",
          [](const ConnectionHandle& h) { return h.connection->terminate_received(); })
      .def_property_readonly(
          "terminate_sent",
          [](const ConnectionHandle& h) { return h.connection->terminate_sent(); })
      .def_property_readonly(
          "receive_counters",
          [](const ConnectionHandle& h) { return h.connection->receive_counters(); })
      .def(
          "disconnect",
          [](ConnectionHandle& h, std::int64_t timeout_ms) {
            py::gil_scoped_release release;
            h.connection->disconnect(Millis(timeout_ms));
          },
          py::arg("timeout_ms"), "Orderly close, waiting up to timeout_ms (GIL released).")
      .def(
          "terminate",
          [](ConnectionHandle& h, int layer, std::uint8_t etype, std::uint8_t code) {
            // RFC 5040 s4.8: a 4-bit layer (only these three are defined; a receiver
            // rejects the others) and a 4-bit error type.
            if (layer < 0 || layer > static_cast<int>(wire::TermLayer::kLlp)) {
              throw py::value_error("Terminate layer " + std::to_string(layer) +
                                    " is none of RDMAP (0), DDP (1), LLP (2)");
            }
            if (etype > 0x0f) {
              throw py::value_error("Terminate error type " + std::to_string(etype) +
                                    " does not fit its 4 bits");
            }
            h.connection->terminate(
                wire::TerminateCause{static_cast<wire::TermLayer>(layer), etype, code});
          },
          py::arg("layer"), py::arg("etype"), py::arg("code"),
          "Ends the connection with a Terminate carrying (layer, etype, code); flushes "
          "everything outstanding. Does not wait.");
}

void bind_provider_objects(py::module_& m) {
  using transport::Listener;
  using transport::PendingConnection;
  using transport::Provider;

  py::class_<transport::ConnectOptions>(m, "ConnectOptions")
      .def(py::init<>())
      .def_readwrite("policy", &transport::ConnectOptions::policy)
      .def_property(
          "private_data",
          [](const transport::ConnectOptions& o) { return to_bytes(o.private_data); },
          [](transport::ConnectOptions& o, py::handle data) { o.private_data = copy_bytes(data); })
      .def_readwrite("caps", &transport::ConnectOptions::caps)
      .def_property(
          "timeout_ms",
          [](const transport::ConnectOptions& o) {
            return static_cast<std::int64_t>(o.timeout.count());
          },
          [](transport::ConnectOptions& o, std::int64_t ms) { o.timeout = Millis(ms); })
      .def_readwrite("retries", &transport::ConnectOptions::retries)
      .def_property(
          "retry_backoff_ms",
          [](const transport::ConnectOptions& o) {
            return static_cast<std::int64_t>(o.retry_backoff.count());
          },
          [](transport::ConnectOptions& o, std::int64_t ms) { o.retry_backoff = Millis(ms); })
      .def_property(
          "retry_backoff_max_ms",
          [](const transport::ConnectOptions& o) {
            return static_cast<std::int64_t>(o.retry_backoff_max.count());
          },
          [](transport::ConnectOptions& o, std::int64_t ms) { o.retry_backoff_max = Millis(ms); })
      .def_readwrite("retry_seed", &transport::ConnectOptions::retry_seed);

  m.attr("BACKLOG_FULL_MARKER") = py::bytes(std::string(cm::kBacklogFullMarker));

  using transport::ListenOptions;
  auto decision_timeout = millis_property(&ListenOptions::decision_timeout);
  auto overflow_timeout = millis_property(&ListenOptions::overflow_timeout);
  ValueClass<ListenOptions>(
      m, "ListenOptions",
      "A listener's backlog policy (core/transport/provider.h, core/cm/listen_backlog.h). A "
      "Request holds one of `backlog` slots from its arrival until the application accepts or "
      "rejects it, or decision_timeout_ms passes (then it is rejected). half_open_limit bounds "
      "the TCP connections whose Request is not complete yet (0: max(4 * backlog, 64)); they "
      "expire after the policy's request timeout. With Overflow.DROP a Request over the "
      "backlog waits up to overflow_timeout_ms for a slot.")
      .field("backlog", &ListenOptions::backlog,
             "Requests that may wait for the application's decision (>= 1)")
      .field("overflow", &ListenOptions::overflow,
             "What a Request that finds every slot taken gets")
      .field("half_open_limit", &ListenOptions::half_open_limit,
             "Connections without a complete MPA Request kept at once; 0: max(4 * backlog, 64)")
      .property("decision_timeout_ms", decision_timeout.first, decision_timeout.second,
                "An undecided Request is rejected (and counted pending_expired) after this long")
      .property("overflow_timeout_ms", overflow_timeout.first, overflow_timeout.second,
                "Drop: how long a Request waits over the backlog before it is closed unanswered")
      .done();

  using cm::BacklogCounters;
  ValueClass<BacklogCounters> counters(
      m, "BacklogCounters",
      "What a listener's backlog has seen (core/cm/backlog_counters.h), exact under any "
      "interleaving; broken_invariant() says which invariant fails, if any.");
  counters.readonly("backlog", &BacklogCounters::backlog, "slots (the listen() argument)")
      .readonly("pending", &BacklogCounters::pending, "Requests holding a slot now")
      .readonly("high_water", &BacklogCounters::high_water, "most slots ever held at once")
      .readonly("requests", &BacklogCounters::requests, "valid Requests received")
      .readonly("accepted", &BacklogCounters::accepted, "the application accepted (Reply sent)")
      .readonly("rejected_by_app", &BacklogCounters::rejected_by_app, "the application rejected")
      .readonly("pending_expired", &BacklogCounters::pending_expired,
                "held a slot, the application never decided in time")
      .readonly("pending_aborted", &BacklogCounters::pending_aborted,
                "held a slot, the peer went away before a decision")
      .readonly("overflow_rejected", &BacklogCounters::overflow_rejected,
                "over the backlog, answered with the overflow Reject")
      .readonly("overflow_waiting", &BacklogCounters::overflow_waiting,
                "drop policy: unanswered, waiting for a slot now")
      .readonly("overflow_dropped", &BacklogCounters::overflow_dropped,
                "drop policy: expired or the peer gave up waiting")
      .readonly("half_open", &BacklogCounters::half_open,
                "TCP connections without a complete Request now")
      .readonly("half_open_limit", &BacklogCounters::half_open_limit,
                "most half-open connections kept at once")
      .readonly("half_open_opened", &BacklogCounters::half_open_opened)
      .readonly("half_open_completed", &BacklogCounters::half_open_completed,
                "their Request arrived (counted in requests)")
      .readonly("half_open_expired", &BacklogCounters::half_open_expired,
                "no complete Request within the request timeout")
      .readonly("half_open_aborted", &BacklogCounters::half_open_aborted,
                "the peer closed, or sent garbage, first")
      .readonly("half_open_evicted", &BacklogCounters::half_open_evicted,
                "the oldest, closed to make room: the queue was full");
  counters.cls()
      .def_property_readonly(
          "tcp_accepted", [](const BacklogCounters& c) { return c.half_open_opened; },
          "TCP connections the listener accepted (every one starts half-open).")
      .def("broken_invariant", &BacklogCounters::broken_invariant,
           "Empty when every invariant of backlog_counters.h holds, else which is broken.")
      .def(
          "invariants_hold", [](const BacklogCounters& c) { return c.broken_invariant().empty(); },
          "True when broken_invariant() is empty.");
  counters.done();

  // keep_alive<0, 1>: what a call returns keeps the object it came from alive (a connection
  // its pending request, listener and provider), whatever the provider does internally.
  py::class_<PendingConnection>(m, "PendingConnection")
      .def_property_readonly("request", &PendingConnection::request)
      .def_property_readonly("peer_address", &PendingConnection::peer_address)
      .def(
          "accept",
          [](PendingConnection& p, py::handle private_data, transport::QpCaps caps,
             const std::vector<std::pair<std::uint64_t, py::object>>& initial_recvs) {
            auto handle = std::make_unique<ConnectionHandle>();
            add_initial_recvs(initial_recvs, caps, handle->initial_recv_buffers);
            auto data = copy_bytes(private_data);
            Expected<std::unique_ptr<transport::Connection>, transport::ConnectError> result =
                unexpected(transport::ConnectError{});
            {
              py::gil_scoped_release release;
              result = p.accept(std::move(data), caps);
            }
            if (!result) throw_connect_error(result.error());
            handle->connection = std::move(*result);
            return handle;
          },
          py::arg("private_data"), py::arg("caps"), py::arg("initial_recvs") = py::list(),
          py::keep_alive<0, 1>(),
          "Sends the Reply and waits until established (GIL released); raises ConnectError. "
          "initial_recvs: [(wr_id, writable buffer)] posted before the first FPDU.")
      .def(
          "reject",
          [](PendingConnection& p, py::handle private_data) {
            auto data = copy_bytes(private_data);
            py::gil_scoped_release release;
            p.reject(std::move(data));
          },
          py::arg("private_data"), "Sends a Reply with the Reject flag and closes.");

  py::class_<Listener>(m, "Listener")
      .def_property_readonly("local_address", &Listener::local_address)
      .def(
          "next_request",
          [](Listener& l, std::int64_t timeout_ms) {
            py::gil_scoped_release release;
            return l.next_request(Millis(timeout_ms));
          },
          py::arg("timeout_ms"), py::keep_alive<0, 1>(),
          "The next valid MPA Request within timeout_ms, or None (GIL released).")
      .def_property_readonly("counters", &Listener::counters)
      .def(
          "take_setup_failures",
          [](Listener& l) {
            py::list out;
            for (const auto& f : l.take_setup_failures()) {
              out.append(
                  py::make_tuple(f.peer_address, connect_error_object(f.error), f.elapsed_ms));
            }
            return out;
          },
          "Connections that failed before their Request reached the application, oldest "
          "first, each once: [(peer_address, ConnectError, elapsed_ms)].")
      .def(
          "take_backlog_events",
          [](Listener& l) {
            py::list out;
            for (const auto& e : l.take_backlog_events()) {
              out.append(py::make_tuple(std::string(cm::event_name(e.type)),
                                        std::string(cm::reason_name(e.reason)), e.peer_address,
                                        e.pending));
            }
            return out;
          },
          "Backlog slots taken and freed since the last call, oldest first: "
          "[(\"backlog_added\"|\"backlog_removed\", reason, peer_address, pending_after)].")
      .def("close", &Listener::close, py::call_guard<py::gil_scoped_release>());

  py::class_<Provider>(m, "Provider")
      .def_property_readonly("scheme", [](const Provider& p) { return std::string(p.scheme()); })
      .def(
          "listen",
          [](Provider& p, std::string_view uri, const cm::MpaPolicy& policy, int backlog) {
            auto where = parse_uri(uri);
            Expected<std::unique_ptr<Listener>, transport::ConnectError> result =
                unexpected(transport::ConnectError{});
            {
              py::gil_scoped_release release;
              result = p.listen(where, policy, backlog);
            }
            if (!result) throw_connect_error(result.error());
            return std::move(*result);
          },
          py::arg("uri"), py::arg("policy"), py::arg("backlog") = 16, py::keep_alive<0, 1>(),
          "Listens on tcp://ADDR:PORT (port 0: any); raises ConnectError.")
      .def(
          "listen",
          [](Provider& p, std::string_view uri, const cm::MpaPolicy& policy,
             const transport::ListenOptions& options) {
            auto where = parse_uri(uri);
            Expected<std::unique_ptr<Listener>, transport::ConnectError> result =
                unexpected(transport::ConnectError{});
            {
              py::gil_scoped_release release;
              result = p.listen(where, policy, options);
            }
            if (!result) throw_connect_error(result.error());
            return std::move(*result);
          },
          py::arg("uri"), py::arg("policy"), py::arg("options"), py::keep_alive<0, 1>(),
          "Listens with a backlog policy (ListenOptions); raises ConnectError.")
      .def(
          "connect",
          [](Provider& p, std::string_view uri, transport::ConnectOptions options,
             const std::vector<std::pair<std::uint64_t, py::object>>& initial_recvs) {
            auto where = parse_uri(uri);
            auto handle = std::make_unique<ConnectionHandle>();
            add_initial_recvs(initial_recvs, options.caps, handle->initial_recv_buffers);
            Expected<std::unique_ptr<transport::Connection>, transport::ConnectError> result =
                unexpected(transport::ConnectError{});
            {
              py::gil_scoped_release release;
              result = p.connect(where, options);
            }
            if (!result) throw_connect_error(result.error());
            handle->connection = std::move(*result);
            return handle;
          },
          py::arg("uri"), py::arg("options"), py::arg("initial_recvs") = py::list(),
          py::keep_alive<0, 1>(),
          "TCP connect plus MPA setup (GIL released); raises ConnectError.");

  m.def(
      "open_provider",
      [](std::string_view scheme) {
        auto provider = transport::open_provider(scheme);
        if (!provider) throw py::value_error(provider.error());
        return std::move(*provider);
      },
      py::arg("scheme"), "The provider for a URI scheme (\"tcp\"); raises ValueError.");
}

}  // namespace

[[noreturn]] void throw_connect_error(const transport::ConnectError& error) {
  py::object exception = connect_error_object(error);
  PyErr_SetObject(exception.get_type().ptr(), exception.ptr());
  throw py::error_already_set();
}

void bind_provider(py::module_& m) {
  bind_policy(m);
  bind_personality(m);
  bind_work_requests(m);
  bind_connection(m);
  bind_provider_objects(m);
}

}  // namespace rdma_interop::bindings
