// messaging_bindings.cc - the N:N message endpoint with end-to-end credits
// (core/messaging/message_endpoint.h). The typed API is rdma_interop.messaging.
//
// Threading. The endpoint calls its handlers on its own progress thread: each Python handler
// takes the GIL there, gets the payload as bytes (a copy: the receive buffer is posted again
// once the handler returns) and runs; an exception it raises goes to sys.unraisablehook (the
// progress thread has no caller to give it to). Every call that can wait (connect, accept,
// wait_ready, close_peer, close and the destructor) releases the GIL, so the progress thread
// can run handlers meanwhile; a caller that kept the GIL while the endpoint's destructor
// joins that thread would deadlock with a handler waiting for it.
//
// The handlers are given once, to the constructor: a std::function the progress thread copies
// then only ever shares the callable (a shared_ptr, no Python reference count touched without
// the GIL), and the last reference goes when the endpoint is destroyed, taking the GIL then.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bindings.h"
#include "core/credit/completion_budget.h"
#include "core/credit/credit_window.h"
#include "core/messaging/message_endpoint.h"
#include "core/telemetry/publisher.h"
#include "core/telemetry/run_dir.h"
#include "core/transport/provider.h"
#include "core/transport/provider_uri.h"

namespace rdma_interop::bindings {
namespace {

using messaging::MessageEndpoint;
using transport::Millis;

// True on an endpoint's progress thread while it runs a Python handler. A handler that called
// close() would make the thread join itself (std::terminate in a destructor), and one that
// waited in close_peer() or wait_ready() would hold up the very thread that has to make the
// progress it waits for: those calls refuse from a handler instead. Per thread, so no state
// is shared between endpoints.
thread_local bool in_handler = false;

void refuse_in_handler(const char* call) {
  if (in_handler) {
    throw py::value_error(std::string(call) +
                          " cannot be called from a handler: it waits for the endpoint's "
                          "progress thread, which is running the handler");
  }
}

// A Python callable shared by the endpoint's copies of one handler. Its reference is dropped
// with the GIL held, wherever the last copy goes.
class PyCallable {
 public:
  explicit PyCallable(py::object fn) : fn_(std::move(fn)) {}
  ~PyCallable() {
    py::gil_scoped_acquire gil;
    fn_ = py::object();
  }
  PyCallable(const PyCallable&) = delete;
  PyCallable& operator=(const PyCallable&) = delete;

  // Calls it (GIL held by the caller); an exception goes to sys.unraisablehook.
  template <class... Args>
  void call(const char* what, Args&&... args) const {
    in_handler = true;
    try {
      fn_(std::forward<Args>(args)...);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable(what);
    }
    in_handler = false;
  }

 private:
  py::object fn_;
};

std::shared_ptr<PyCallable> callable_or_null(const py::object& fn) {
  if (fn.is_none()) return nullptr;
  if (!PyCallable_Check(fn.ptr())) throw py::type_error("a handler must be callable or None");
  return std::make_shared<PyCallable>(fn);
}

// The endpoint as Python holds it. Calls that wait hold their own reference while the GIL is
// released, so close() from another thread leaves the endpoint to the last of them; whoever
// drops the last reference does so with the GIL released.
class EndpointHandle {
 public:
  EndpointHandle(messaging::EndpointConfig config, const py::object& on_message,
                 const py::object& on_ready, const py::object& on_failure) {
    auto message = callable_or_null(on_message);
    auto ready = callable_or_null(on_ready);
    auto failure = callable_or_null(on_failure);
    py::gil_scoped_release release;  // the constructor starts the progress thread
    endpoint_ = std::make_shared<MessageEndpoint>(std::move(config));
    if (message) {
      endpoint_->on_message([message](const messaging::Message& m) {
        py::gil_scoped_acquire gil;
        message->call("rdma_interop.messaging on_message handler", m.peer, m.id,
                      to_bytes(m.payload));
      });
    }
    if (ready) {
      endpoint_->on_ready([ready](messaging::PeerId peer) {
        py::gil_scoped_acquire gil;
        ready->call("rdma_interop.messaging on_ready handler", peer);
      });
    }
    if (failure) {
      endpoint_->on_failure([failure](messaging::PeerId peer, const std::string& why) {
        py::gil_scoped_acquire gil;
        failure->call("rdma_interop.messaging on_failure handler", peer, why);
      });
    }
  }
  ~EndpointHandle() {
    if (in_handler && endpoint_) {
      // The last reference went inside one of its own handlers: the progress thread cannot
      // join itself, so another thread ends the endpoint once the handler has returned.
      std::thread([endpoint = std::move(endpoint_)]() mutable { endpoint.reset(); }).detach();
      return;
    }
    close();
  }
  EndpointHandle(const EndpointHandle&) = delete;
  EndpointHandle& operator=(const EndpointHandle&) = delete;

  // For calls that do not wait: the GIL, held throughout, keeps close() out.
  MessageEndpoint& get() const {
    if (!endpoint_) throw py::value_error("the message endpoint is closed");
    return *endpoint_;
  }
  // For calls that wait: a reference to drop before the GIL is taken back.
  std::shared_ptr<MessageEndpoint> share() const {
    get();
    return endpoint_;
  }

  // Closes every peer and stops the progress thread (GIL released). Idempotent.
  void close() {
    refuse_in_handler("close()");
    auto endpoint = std::move(endpoint_);
    if (!endpoint) return;
    py::gil_scoped_release release;
    endpoint.reset();
  }
  bool closed() const { return !endpoint_; }

 private:
  std::shared_ptr<MessageEndpoint> endpoint_;
};

// Runs `call(endpoint)` with the GIL released, dropping the endpoint reference before taking
// it back.
template <class F>
auto without_gil(const EndpointHandle& h, F&& call) {
  auto endpoint = h.share();
  py::gil_scoped_release release;
  auto result = call(*endpoint);
  endpoint.reset();
  return result;
}

void bind_counters(py::module_& m) {
  using credit::CreditCounters;
  py::class_<CreditCounters>(m, "CreditCounters")
      .def(py::init<>())
      .def_readonly("credits", &CreditCounters::credits)
      .def_readonly("control_credits", &CreditCounters::control_credits)
      .def_readonly("data_slots_in_use", &CreditCounters::data_slots_in_use)
      .def_readonly("control_slots_in_use", &CreditCounters::control_slots_in_use)
      .def_readonly("credits_granted_total", &CreditCounters::credits_granted_total)
      .def_readonly("sent", &CreditCounters::sent)
      .def_readonly("updates_sent", &CreditCounters::updates_sent)
      .def_readonly("stalls_no_credit", &CreditCounters::stalls_no_credit)
      .def_readonly("stalls_no_slot", &CreditCounters::stalls_no_slot)
      .def_readonly("update_stalls", &CreditCounters::update_stalls)
      .def_readonly("posted", &CreditCounters::posted)
      .def_readonly("granted", &CreditCounters::granted)
      .def_readonly("pending_grant", &CreditCounters::pending_grant)
      .def_readonly("control_posted", &CreditCounters::control_posted)
      .def_readonly("control_return_pending", &CreditCounters::control_return_pending)
      .def_readonly("granted_total", &CreditCounters::granted_total)
      .def_readonly("received", &CreditCounters::received)
      .def_readonly("updates_received", &CreditCounters::updates_received);

  using credit::CompletionBudgetCounters;
  py::class_<CompletionBudgetCounters>(m, "CompletionBudgetCounters")
      .def(py::init<>())
      .def_readonly("cq_entries", &CompletionBudgetCounters::cq_entries)
      .def_readonly("send_reserved", &CompletionBudgetCounters::send_reserved)
      .def_readonly("receive_reserved", &CompletionBudgetCounters::receive_reserved)
      .def_readonly("high_water", &CompletionBudgetCounters::high_water)
      .def_readonly("reserved_total", &CompletionBudgetCounters::reserved_total)
      .def_readonly("released_total", &CompletionBudgetCounters::released_total)
      .def_readonly("refused", &CompletionBudgetCounters::refused);

  using messaging::PeerStats;
  py::class_<PeerStats>(m, "PeerStats")
      .def_readonly("name", &PeerStats::name)
      .def_property_readonly(
          "state", [](const PeerStats& s) { return std::string(messaging::state_name(s.state)); })
      .def_readonly("detail", &PeerStats::detail)
      .def_readonly("terminate_sent", &PeerStats::terminate_sent)
      .def_readonly("terminate_received", &PeerStats::terminate_received)
      .def_readonly("credit", &PeerStats::credit)
      .def_readonly("queued", &PeerStats::queued)
      .def_readonly("replies_queued", &PeerStats::replies_queued)
      .def_readonly("held", &PeerStats::held)
      .def_readonly("refused", &PeerStats::refused)
      .def_readonly("messages_sent", &PeerStats::messages_sent)
      .def_readonly("bytes_sent", &PeerStats::bytes_sent)
      .def_readonly("messages_received", &PeerStats::messages_received)
      .def_readonly("bytes_received", &PeerStats::bytes_received)
      .def_readonly("lost", &PeerStats::lost)
      .def_readonly("local_address", &PeerStats::local_address)
      .def_readonly("peer_address", &PeerStats::peer_address);

  using messaging::EndpointStats;
  py::class_<EndpointStats>(m, "EndpointStats")
      .def_readonly("budget", &EndpointStats::budget)
      .def_readonly("cq", &EndpointStats::cq)
      .def_readonly("bytes_allocated", &EndpointStats::bytes_allocated);
}

void bind_config(py::module_& m) {
  using messaging::EndpointConfig;
  py::class_<EndpointConfig>(m, "EndpointConfig")
      .def(py::init<>())
      .def_readwrite("max_message", &EndpointConfig::max_message)
      .def_readwrite("receive_window", &EndpointConfig::receive_window)
      .def_readwrite("control_receives", &EndpointConfig::control_receives)
      .def_readwrite("send_queue_depth", &EndpointConfig::send_queue_depth)
      .def_readwrite("control_send_slots", &EndpointConfig::control_send_slots)
      .def_readwrite("send_queue_limit", &EndpointConfig::send_queue_limit)
      .def_readwrite("reply_reserve", &EndpointConfig::reply_reserve)
      .def_readwrite("max_peers", &EndpointConfig::max_peers)
      .def_readwrite("ignore_credits", &EndpointConfig::ignore_credits)
      .def(
          "publish_to",
          [](EndpointConfig& c, const std::string& run_dir) {
            telemetry::Publisher::Options o;
            o.run_dir = run_dir.empty() ? telemetry::run_dir_from_environment()
                                        : std::filesystem::path(run_dir);
            c.publisher = std::make_shared<telemetry::Publisher>(std::move(o));
          },
          py::arg("run_dir"),
          "Publishes the endpoint's connections for backlog-stat --connections into run_dir "
          "(\"\": $RDMA_INTEROP_RUN_DIR or /run/rdma-interop).")
      .def_property_readonly("publishes",
                             [](const EndpointConfig& c) { return c.publisher != nullptr; });
}

void bind_endpoint(py::module_& m) {
  py::class_<EndpointHandle>(m, "MessageEndpoint")
      .def(py::init<messaging::EndpointConfig, const py::object&, const py::object&,
                    const py::object&>(),
           py::arg("config"), py::arg("on_message") = py::none(), py::arg("on_ready") = py::none(),
           py::arg("on_failure") = py::none(),
           "Starts the progress thread. on_message(peer, message_id, payload: bytes), "
           "on_ready(peer), on_failure(peer, why) run on it, with the GIL.")
      .def(
          "connect",
          [](const EndpointHandle& h, transport::Provider& provider, std::string_view uri,
             transport::ConnectOptions options, std::string name) {
            auto where = transport::parse_provider_uri(uri);
            if (!where) throw py::value_error(where.error());
            auto result = without_gil(h, [&](MessageEndpoint& ep) {
              return ep.connect(provider, *where, std::move(options), std::move(name));
            });
            if (!result) throw_connect_error(result.error());
            return *result;
          },
          py::arg("provider"), py::arg("uri"), py::arg("options"), py::arg("name"),
          py::keep_alive<1, 2>(),
          "Connects and exchanges credit parameters (GIL released); the peer id. Raises "
          "ConnectError (kind \"setup\" when the peer offers no credit parameters).")
      .def(
          "accept",
          [](const EndpointHandle& h, transport::PendingConnection& pending, std::string name,
             const py::handle& private_data) {
            auto data = copy_bytes(private_data);
            auto result = without_gil(h, [&](MessageEndpoint& ep) {
              return ep.accept(pending, std::move(name), std::move(data));
            });
            if (!result) throw_connect_error(result.error());
            return *result;
          },
          py::arg("pending"), py::arg("name"), py::arg("private_data") = py::bytes(),
          py::keep_alive<1, 2>(),
          "Accepts a Request that carries credit parameters (GIL released); one without is "
          "rejected and ConnectError raised.")
      .def(
          "send",
          [](const EndpointHandle& h, messaging::PeerId peer, const py::handle& payload) {
            BytesView view(payload);
            return std::string(messaging::status_name(h.get().send(peer, view.span())));
          },
          py::arg("peer"), py::arg("payload"), "Never waits: \"ok\", \"try_again\", ...")
      .def(
          "wait_ready",
          [](const EndpointHandle& h, messaging::PeerId peer, std::int64_t timeout_ms) {
            refuse_in_handler("wait_ready()");
            return without_gil(
                h, [&](MessageEndpoint& ep) { return ep.wait_ready(peer, Millis(timeout_ms)); });
          },
          py::arg("peer"), py::arg("timeout_ms"),
          "Waits until send() to peer would not say try_again (GIL released).")
      .def(
          "reply",
          [](const EndpointHandle& h, messaging::MessageId id, const py::handle& payload) {
            BytesView view(payload);
            return std::string(messaging::status_name(h.get().reply(id, view.span())));
          },
          py::arg("message_id"), py::arg("payload"))
      .def(
          "hold",
          [](const EndpointHandle& h, messaging::MessageId id) {
            return std::string(messaging::status_name(h.get().hold(id)));
          },
          py::arg("message_id"))
      .def(
          "release",
          [](const EndpointHandle& h, messaging::MessageId id) {
            return std::string(messaging::status_name(h.get().release(id)));
          },
          py::arg("message_id"))
      .def(
          "close_peer",
          [](const EndpointHandle& h, messaging::PeerId peer, std::int64_t timeout_ms) {
            refuse_in_handler("close_peer()");
            return without_gil(h, [&](MessageEndpoint& ep) {
              ep.close_peer(peer, Millis(timeout_ms));
              return true;
            });
          },
          py::arg("peer"), py::arg("timeout_ms"), "Orderly close of one peer (GIL released).")
      .def("peers", [](const EndpointHandle& h) { return h.get().peers(); })
      .def(
          "stats",
          [](const EndpointHandle& h, messaging::PeerId peer) { return h.get().stats(peer); },
          py::arg("peer"))
      .def("endpoint_stats", [](const EndpointHandle& h) { return h.get().endpoint_stats(); })
      .def("close", &EndpointHandle::close,
           "Closes every peer and stops the progress thread (GIL released).")
      .def_property_readonly("closed", &EndpointHandle::closed);
}

}  // namespace

void bind_messaging(py::module_& m) {
  bind_counters(m);
  bind_config(m);
  bind_endpoint(m);
}

}  // namespace rdma_interop::bindings
