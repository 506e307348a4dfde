// stream_bindings.cc - TCP-shaped sockets over RDMA sessions (core/stream/stream_socket.h).
// The socket.socket-shaped API is rdma_interop.stream_socket on top of these.
//
// Errors are errno values in C++; here each is raised as OSError(errno, detail), which Python
// turns into its subclass (ConnectionRefusedError, BlockingIOError, BrokenPipeError, ...), so
// code written for socket.socket catches what it always caught.
//
// Threading: every call that can wait (StreamNode.listen, which may start serving sessions,
// connect, StreamListener.accept and close, Socket.send, recv and close) releases the GIL, so
// one Python thread blocked on a stream never holds up another. A Socket is used by one thread
// at a time (core/stream/stream_socket.h); the node and its listeners by any.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/stream/stream_session.h"
#include "core/stream/stream_socket.h"
#include "value_class.h"

namespace rdma_interop::bindings {
namespace {

using stream::IoOptions;
using stream::ListenerCounters;
using stream::Millis;
using stream::NodeConfig;
using stream::NodeCounters;
using stream::SessionCounters;
using stream::Socket;
using stream::StreamListener;
using stream::StreamNode;

// One call's octets at most: a stream takes no more than its send buffer per call anyway,
// and the copy made to let go of the GIL stays bounded (sendall loops in Python).
constexpr std::size_t kMaxSendPerCall = 4 * 1024 * 1024;

// Raises OSError(code, detail) (GIL held): OSError's constructor picks the subclass the
// errno value has in Python.
[[noreturn]] void throw_os_error(int code, const std::string& detail) {
  py::object exception = py::module_::import("builtins").attr("OSError")(code, detail);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  throw py::error_already_set();
}

[[noreturn]] void throw_errno(int code) {
  throw_os_error(code, py::module_::import("os").attr("strerror")(code).cast<std::string>());
}

// f()'s result, with the GIL let go while it runs.
template <class F>
auto without_gil(F f) {
  py::gil_scoped_release release;
  return f();
}

Millis millis(long long timeout_ms) {
  return timeout_ms < 0 ? stream::kForever : Millis(timeout_ms);
}

std::size_t send(Socket& s, py::handle data, bool urgent, long long timeout_ms) {
  const BytesView view(data);
  const auto span = view.span();
  // Copied: the octets are read with the GIL let go.
  const std::vector<std::uint8_t> octets(
      span.begin(),
      span.begin() + static_cast<std::ptrdiff_t>(std::min(span.size(), kMaxSendPerCall)));
  auto r = without_gil(
      [&] { return s.send(octets, IoOptions{.urgent = urgent, .timeout = millis(timeout_ms)}); });
  if (!r) throw_errno(r.error());
  return *r;
}

Expected<std::size_t, int> recv_octets(Socket& s, std::vector<std::uint8_t>& out, bool urgent,
                                       bool peek, long long timeout_ms) {
  py::gil_scoped_release release;
  return s.recv(out, IoOptions{.urgent = urgent, .peek = peek, .timeout = millis(timeout_ms)});
}

py::bytes recv(Socket& s, std::size_t size, bool urgent, bool peek, long long timeout_ms) {
  std::vector<std::uint8_t> out(size);
  auto r = recv_octets(s, out, urgent, peek, timeout_ms);
  if (!r) throw_errno(r.error());
  return to_bytes(std::span(out).first(*r));
}

std::size_t recv_into(Socket& s, const py::buffer& buffer, std::size_t size, bool urgent, bool peek,
                      long long timeout_ms) {
  py::buffer_info info = buffer.request(true);
  // Written as one run of octets: a strided view (memoryview(b)[::2]) would be written past.
  if (info.ndim != 1 || info.itemsize != 1 || info.strides.size() != 1 || info.strides[0] != 1) {
    throw py::buffer_error("recv_into needs a contiguous writable buffer of octets");
  }
  const auto room = static_cast<std::size_t>(info.size);
  if (size == 0 || size > room) size = room;
  std::vector<std::uint8_t> out(size);
  auto r = recv_octets(s, out, urgent, peek, timeout_ms);
  if (!r) throw_errno(r.error());
  std::copy_n(out.begin(), *r, static_cast<std::uint8_t*>(info.ptr));
  return *r;
}

void bind_counters(py::module_& m) {
  ValueClass<NodeCounters>(m, "NodeCounters",
                           "What a StreamNode's connects did (core/stream/stream_socket.h).")
      .readonly("upgraded", &NodeCounters::upgraded, "connects that opened a stream after an offer")
      .readonly("reused", &NodeCounters::reused,
                "connects that opened a stream on a session they found")
      .readonly("declined", &NodeCounters::declined, "offers the server declined (plain TCP)")
      .readonly("plain_peers", &NodeCounters::plain_peers,
                "offers no server answered (then reconnected plain)")
      .readonly("plain_cached", &NodeCounters::plain_cached,
                "connects that went plain without an offer (the plain-peer cache)")
      .readonly("sessions", &NodeCounters::sessions, "sessions set up by this node's connects")
      .done();
  ValueClass<ListenerCounters>(m, "ListenerCounters",
                               "How a StreamListener's clients were decided.")
      .readonly("upgraded", &ListenerCounters::upgraded, "clients that went over a session")
      .readonly("declined", &ListenerCounters::declined, "offers declined")
      .readonly("plain", &ListenerCounters::plain, "plain TCP clients")
      .readonly("failed", &ListenerCounters::failed, "malformed or cut offers")
      .done();
  ValueClass<SessionCounters>(m, "SessionCounters",
                              "One stream session's figures (core/stream/stream_session.h).")
      .readonly("streams", &SessionCounters::streams, "streams this session has now")
      .readonly("opened", &SessionCounters::opened, "by us")
      .readonly("accepted", &SessionCounters::accepted, "by us, of the peer's")
      .readonly("refused", &SessionCounters::refused, "of the peer's, by us")
      .readonly("resets_sent", &SessionCounters::resets_sent)
      .readonly("resets_received", &SessionCounters::resets_received)
      .readonly("messages", &SessionCounters::messages, "messages handed to the channel")
      .readonly("bytes_copied", &SessionCounters::bytes_copied,
                "in-band octets sent in DATA frames")
      .readonly("bytes_placed", &SessionCounters::bytes_placed, "in-band octets sent by RDMA Write")
      .readonly("bytes_borrowed", &SessionCounters::bytes_borrowed,
                "of bytes_placed, Written straight from the application's buffer")
      .readonly("writes", &SessionCounters::writes, "RDMA Writes")
      .readonly("bytes_received", &SessionCounters::bytes_received,
                "in-band octets received, both ways")
      .readonly("receive_held", &SessionCounters::receive_held,
                "octets received and not read yet, every stream")
      .readonly("sink_bytes", &SessionCounters::sink_bytes, "sink rings allocated now")
      .readonly("send_ring_bytes", &SessionCounters::send_ring_bytes, "send rings allocated now")
      .done();
}

void bind_socket(py::module_& m) {
  py::class_<Socket>(m, "Socket",
                     "One connection from a StreamNode: an upgraded stream over an RDMA session, "
                     "or a plain TCP connection. Errors raise OSError(errno, detail). timeout_ms: "
                     "0 never waits (BlockingIOError), -1 waits as long as it takes.")
      .def_property_readonly("upgraded", &Socket::upgraded,
                             "True when it runs over an RDMA session")
      .def_property_readonly("peer", &Socket::peer, "the peer's address, \"host:port\"")
      .def_property_readonly("local", &Socket::local,
                             "the local address, \"host:port\" (or \"session N\" for a "
                             "stream this node opened)")
      .def("describe", &Socket::describe, "\"tcp\" or \"stream over tcp://...\"")
      .def_property_readonly("how", &Socket::how,
                             "how it came to be: upgrade, reuse, declined, plain_peer, cache or "
                             "plain (a connect); upgrade, declined or plain_client (an accept)")
      .def("send", &send, py::arg("data"), py::arg("urgent") = false, py::arg("timeout_ms") = 0,
           "Octets taken (at least one). urgent: the last octet goes out of band (MSG_OOB).")
      .def("recv", &recv, py::arg("size"), py::arg("urgent") = false, py::arg("peek") = false,
           py::arg("timeout_ms") = 0,
           "Up to size octets, stopping at the urgent mark; b\"\" at the end of stream. "
           "urgent: the urgent octet (MSG_OOB); peek: leave them (MSG_PEEK).")
      .def("recv_into", &recv_into, py::arg("buffer"), py::arg("size") = 0,
           py::arg("urgent") = false, py::arg("peek") = false, py::arg("timeout_ms") = 0,
           "recv() into a writable buffer (size 0: all of it); the octets read.")
      .def("at_mark", &Socket::at_mark, py::call_guard<py::gil_scoped_release>(),
           "True when the next octet read is the one the urgent octet was sent after "
           "(SIOCATMARK)")
      .def(
          "shutdown_write",
          [](Socket& s) {
            auto r = without_gil([&] { return s.shutdown_write(); });
            if (!r) throw_errno(r.error());
          },
          "No more octets from us: the peer reads its end of stream (SHUT_WR).")
      .def("close", &Socket::close, py::arg("abort") = false,
           py::call_guard<py::gil_scoped_release>(),
           "Lets go of it; abort (or unread octets) resets the peer. Idempotent.")
      .def("fileno", &Socket::fileno,
           "Pollable: the TCP socket of a plain one, the stream's eventfd of an upgraded one "
           "(readable when recv would not wait); -1 once closed.");
}

void bind_listener(py::module_& m) {
  py::class_<StreamListener>(m, "StreamListener",
                             "A TCP listening port whose clients are upgraded to streams when "
                             "they offer, and stay plain TCP connections otherwise.")
      .def(
          "accept",
          [](StreamListener& l, long long timeout_ms) {
            auto r = without_gil([&] { return l.accept(millis(timeout_ms)); });
            if (!r) throw_os_error(r.error().code, r.error().detail);
            return std::move(*r);
          },
          py::arg("timeout_ms") = -1,
          "The next connection, plain or upgraded; BlockingIOError after timeout_ms.")
      .def("filenos", &StreamListener::filenos,
           "Descriptors readable when accept() would not wait (poll them all)")
      .def_property_readonly("port", &StreamListener::port)
      .def_property_readonly("local", &StreamListener::local, "\"host:port\" it listens on")
      .def("counters", &StreamListener::counters)
      .def("close", &StreamListener::close, py::call_guard<py::gil_scoped_release>(),
           "Stops listening. Idempotent.");
}

void bind_node(py::module_& m) {
  py::class_<StreamNode>(m, "StreamNode",
                         "What a process has of the stream layer: sessions, streams and the "
                         "TCP-shaped setup (core/stream/stream_socket.h).")
      .def(py::init([](const std::string& scheme, bool offer, bool accept_upgrades,
                       long long answer_timeout_ms, long long offer_wait_ms,
                       std::uint32_t max_message, std::uint32_t stream_window,
                       std::uint32_t send_buffer, std::uint32_t zero_copy_threshold,
                       std::uint32_t sink_size, std::uint32_t receive_window,
                       long long reader_wait_ms, long long poll_first_us) {
             NodeConfig config;
             config.scheme = scheme;
             config.offer = offer;
             config.accept_upgrades = accept_upgrades;
             config.answer_timeout = Millis(answer_timeout_ms);
             config.offer_wait = Millis(offer_wait_ms);
             config.endpoint.session.max_message = max_message;
             config.endpoint.session.stream_window = stream_window;
             config.endpoint.session.send_buffer = send_buffer;
             config.endpoint.session.zero_copy_threshold = zero_copy_threshold;
             config.endpoint.session.sink_size = sink_size;
             config.endpoint.receive_window = receive_window;
             config.endpoint.reader_wait = Millis(reader_wait_ms);
             config.endpoint.poll_first = std::chrono::microseconds(poll_first_us);
             auto node = StreamNode::create(std::move(config));
             if (!node) throw py::value_error(node.error());
             return std::move(*node);
           }),
           py::kw_only(), py::arg("scheme") = NodeConfig{}.scheme,
           py::arg("offer") = NodeConfig{}.offer,
           py::arg("accept_upgrades") = NodeConfig{}.accept_upgrades,
           py::arg("answer_timeout_ms") = NodeConfig{}.answer_timeout.count(),
           py::arg("offer_wait_ms") = NodeConfig{}.offer_wait.count(),
           py::arg("max_message") = stream::SessionConfig{}.max_message,
           py::arg("stream_window") = stream::SessionConfig{}.stream_window,
           py::arg("send_buffer") = stream::SessionConfig{}.send_buffer,
           py::arg("zero_copy_threshold") = stream::SessionConfig{}.zero_copy_threshold,
           py::arg("sink_size") = stream::SessionConfig{}.sink_size,
           py::arg("receive_window") = stream::StreamEndpointConfig{}.receive_window,
           py::arg("reader_wait_ms") = stream::StreamEndpointConfig{}.reader_wait.count(),
           py::arg("poll_first_us") = stream::StreamEndpointConfig{}.poll_first.count(),
           "A node whose sessions run on `scheme`'s provider. ValueError when the numbers "
           "cannot work together.")
      .def(
          "listen",
          [](StreamNode& n, const std::string& host, std::uint16_t port, int backlog) {
            auto r = without_gil([&] { return n.listen(host, port, backlog); });
            if (!r) throw_os_error(r.error().code, r.error().detail);
            return std::move(*r);
          },
          py::arg("host"), py::arg("port"), py::arg("backlog") = 128,
          "A StreamListener on TCP host:port (port 0: any); serves sessions on the same host.")
      .def(
          "connect",
          [](StreamNode& n, const std::string& host, std::uint16_t port, long long timeout_ms) {
            auto r = without_gil([&] { return n.connect(host, port, millis(timeout_ms)); });
            if (!r) throw_os_error(r.error().code, r.error().detail);
            return std::move(*r);
          },
          py::arg("host"), py::arg("port"), py::arg("timeout_ms") = -1,
          "A Socket to host:port: a stream when the server answers our offer (or a session "
          "already reaches it), else plain TCP.")
      .def("counters", &StreamNode::counters)
      .def(
          "sessions", [](StreamNode& n) { return n.endpoint().sessions(); },
          "The ids of the sessions this node has now")
      .def(
          "session_counters",
          [](StreamNode& n, stream::SessionId id) { return n.endpoint().counters(id); },
          py::arg("session"), "A session's SessionCounters; None for no such session")
      .def_property_readonly(
          "id", [](const StreamNode& n) { return to_bytes(n.id()); },
          "This node's endpoint id (upgrade.h), as OFFERs and ANSWERs carry it")
      .def(
          "close", [](StreamNode& n) { n.endpoint().close(); },
          py::call_guard<py::gil_scoped_release>(),
          "Ends every session and stops serving. Idempotent.");
}

}  // namespace

void bind_stream(py::module_& m) {
  bind_counters(m);
  bind_socket(m);
  bind_listener(m);
  bind_node(m);
}

}  // namespace rdma_interop::bindings
