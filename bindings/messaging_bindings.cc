// messaging_bindings.cc - the N:N message endpoint with end-to-end credits
// (core/messaging/message_endpoint.h). The typed API is rdma_interop.messaging.
//
// Threading. The endpoint runs its handlers on a provider thread (the one that read the
// message), which must never wait for the GIL: while Python runs, that thread would receive
// for no connection. So the Python handlers get the one handler thread left: the endpoint's
// C++ handler hands each event to it. A message is held for it (copied for Python, its
// receive buffer kept, so not granted to the peer again) and released once the Python handler
// returns, unless the handler held or answered it: a slow Python consumer slows its senders
// through credits, as in C++. Each Python handler takes the GIL on that thread and runs; an
// exception it raises goes to sys.unraisablehook. Every call that can wait (connect, accept,
// wait_ready, close_peer, close and the destructor) releases the GIL; send, reply, hold and
// release never wait for another thread.
//
// The handlers are given once, to the constructor: a shared_ptr to each callable, whose last
// reference goes with the GIL held.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
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
#include "enum_casters.h"
#include "value_class.h"

namespace rdma_interop::bindings {
namespace {

using messaging::MessageEndpoint;
using transport::Millis;

// True on the Python handler thread while it runs a Python handler. A handler that called
// close() would make that thread join itself (std::terminate in a destructor), and one that
// waited in close_peer() or wait_ready() would hold up the handlers behind it: those calls
// refuse from a handler instead. Per thread, so no state is shared between endpoints.
thread_local bool in_handler = false;
// The message the running handler was given, and whether it hold()s it (then it is not
// released when the handler returns).
thread_local messaging::MessageId handler_message = 0;
thread_local bool handler_held = false;

void refuse_in_handler(const char* call) {
  if (in_handler) {
    throw py::value_error(std::string(call) +
                          " cannot be called from a handler: it waits for the endpoint's "
                          "handler thread, which is running the handler");
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

// The thread the Python handlers run on, in the order the endpoint found the events.
class PythonHandlerThread {
 public:
  struct Job {
    enum class Kind : std::uint8_t { kMessage, kReady, kFailure, kClose } kind = Kind::kMessage;
    messaging::PeerId peer = 0;
    messaging::MessageId message = 0;
    std::vector<std::uint8_t> payload;
    std::string why;
  };

  PythonHandlerThread(std::shared_ptr<PyCallable> message, std::shared_ptr<PyCallable> ready,
                      std::shared_ptr<PyCallable> failure, std::shared_ptr<PyCallable> close)
      : message_(std::move(message)),
        ready_(std::move(ready)),
        failure_(std::move(failure)),
        close_(std::move(close)) {}
  ~PythonHandlerThread() { stop(); }
  PythonHandlerThread(const PythonHandlerThread&) = delete;
  PythonHandlerThread& operator=(const PythonHandlerThread&) = delete;

  bool wants(Job::Kind kind) const {
    switch (kind) {
      case Job::Kind::kMessage:
        return message_ != nullptr;
      case Job::Kind::kReady:
        return ready_ != nullptr;
      case Job::Kind::kFailure:
        return failure_ != nullptr;
      case Job::Kind::kClose:
        return close_ != nullptr;
    }
    return false;
  }

  // Starts the thread (the GIL released by the caller); `endpoint` outlives it (stop() first).
  void start(MessageEndpoint& endpoint) {
    endpoint_ = &endpoint;
    thread_ = std::thread([this] { run(); });
  }
  // From the endpoint's handlers (a provider thread): never waits for Python.
  void post(Job job) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  // Drops what waits, lets the running handler return, joins. Without the GIL; not from
  // this thread.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      jobs_.clear();
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      py::gil_scoped_acquire gil;
      switch (job.kind) {
        case Job::Kind::kMessage: {
          handler_message = job.message;
          handler_held = false;
          message_->call(
              "rdma_interop.messaging on_message handler", job.peer, job.message,
              py::bytes(reinterpret_cast<const char*>(job.payload.data()), job.payload.size()));
          // Not held and not answered: its buffer goes back to the peer now (kNotHeld, and
          // nothing done, when the handler replied).
          if (!handler_held) (void)endpoint_->release(job.message);
          handler_message = 0;
          break;
        }
        case Job::Kind::kReady:
          ready_->call("rdma_interop.messaging on_ready handler", job.peer);
          break;
        case Job::Kind::kFailure:
          failure_->call("rdma_interop.messaging on_failure handler", job.peer, job.why);
          break;
        case Job::Kind::kClose:
          close_->call("rdma_interop.messaging on_close handler", job.peer, job.why);
          break;
      }
    }
  }

  const std::shared_ptr<PyCallable> message_;
  const std::shared_ptr<PyCallable> ready_;
  const std::shared_ptr<PyCallable> failure_;
  const std::shared_ptr<PyCallable> close_;
  MessageEndpoint* endpoint_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

// The endpoint as Python holds it. Calls that wait hold their own reference while the GIL is
// released, so close() from another thread leaves the endpoint to the last of them; whoever
// drops the last reference does so with the GIL released.
class EndpointHandle {
 public:
  EndpointHandle(messaging::EndpointConfig config, const py::object& on_message,
                 const py::object& on_ready, const py::object& on_failure,
                 const py::object& on_close) {
    auto handlers = std::make_shared<PythonHandlerThread>(
        callable_or_null(on_message), callable_or_null(on_ready), callable_or_null(on_failure),
        callable_or_null(on_close));
    py::gil_scoped_release release;
    auto endpoint = std::shared_ptr<MessageEndpoint>(new MessageEndpoint(std::move(config)),
                                                     [handlers](MessageEndpoint* ep) {
                                                       // The Python thread first (it calls
                                                       // release() on the endpoint), then the
                                                       // endpoint.
                                                       handlers->stop();
                                                       delete ep;
                                                     });
    using Kind = PythonHandlerThread::Job::Kind;
    MessageEndpoint& ep = *endpoint;
    if (handlers->wants(Kind::kMessage)) {
      ep.on_message([&ep, h = handlers.get()](const messaging::Message& m) {
        // Held until the Python handler is done with it: the buffer is not granted again.
        (void)ep.hold(m.id);
        h->post({Kind::kMessage, m.peer, m.id, {m.payload.begin(), m.payload.end()}, {}});
      });
    }
    if (handlers->wants(Kind::kReady)) {
      ep.on_ready([h = handlers.get()](messaging::PeerId peer) {
        h->post({Kind::kReady, peer, 0, {}, {}});
      });
    }
    if (handlers->wants(Kind::kFailure)) {
      ep.on_failure([h = handlers.get()](messaging::PeerId peer, const std::string& why) {
        h->post({Kind::kFailure, peer, 0, {}, why});
      });
    }
    if (handlers->wants(Kind::kClose)) {
      ep.on_close([h = handlers.get()](messaging::PeerId peer, const std::string& why) {
        h->post({Kind::kClose, peer, 0, {}, why});
      });
    }
    handlers->start(ep);
    endpoint_ = std::move(endpoint);
  }
  ~EndpointHandle() {
    if (in_handler && endpoint_) {
      // The last reference went inside one of its own handlers: the handler thread cannot
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

  // Stops the handler thread and closes every peer (GIL released). Idempotent.
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
  ValueClass<CreditCounters>(m, "CreditCounters",
                             "One connection's credit figures (core/credit/credit_window.h).")
      // send side
      .readonly("credits", &CreditCounters::credits,
                "messages we may send now: receives the peer posted for us and announced")
      .readonly("control_credits", &CreditCounters::control_credits,
                "standalone credit updates we may send now")
      .readonly("data_slots_in_use", &CreditCounters::data_slots_in_use)
      .readonly("control_slots_in_use", &CreditCounters::control_slots_in_use)
      .readonly("credits_granted_total", &CreditCounters::credits_granted_total,
                "initial + every grant received")
      .readonly("sent", &CreditCounters::sent, "data messages sent")
      .readonly("updates_sent", &CreditCounters::updates_sent, "standalone credit updates sent")
      .readonly("stalls_no_credit", &CreditCounters::stalls_no_credit, "a message found no credit")
      .readonly("stalls_no_slot", &CreditCounters::stalls_no_slot, "a message found no send slot")
      .readonly("update_stalls", &CreditCounters::update_stalls,
                "an update found no control credit or slot")
      // receive side
      .readonly("posted", &CreditCounters::posted, "data receives posted for the peer")
      .readonly("granted", &CreditCounters::granted,
                "of those, announced: the peer's credits as we know them")
      .readonly("pending_grant", &CreditCounters::pending_grant, "of those, not announced yet")
      .readonly("control_posted", &CreditCounters::control_posted)
      .readonly("control_return_pending", &CreditCounters::control_return_pending)
      .readonly("granted_total", &CreditCounters::granted_total, "initial + every grant sent")
      .readonly("received", &CreditCounters::received, "data messages received")
      .readonly("updates_received", &CreditCounters::updates_received)
      .done();

  using credit::CompletionBudgetCounters;
  ValueClass<CompletionBudgetCounters>(
      m, "CompletionBudgetCounters",
      "The shared completion queue's reservations: one per posted work request, so the queue "
      "can never overrun (core/credit/completion_budget.h).")
      .readonly("cq_entries", &CompletionBudgetCounters::cq_entries)
      .readonly("send_reserved", &CompletionBudgetCounters::send_reserved)
      .readonly("receive_reserved", &CompletionBudgetCounters::receive_reserved)
      .readonly("high_water", &CompletionBudgetCounters::high_water,
                "most entries ever reserved at once")
      .readonly("reserved_total", &CompletionBudgetCounters::reserved_total)
      .readonly("released_total", &CompletionBudgetCounters::released_total)
      .readonly("refused", &CompletionBudgetCounters::refused,
                "reservations refused because the queue was full")
      .done();

  using messaging::PeerStats;
  ValueClass<PeerStats>(m, "PeerStats",
                        "A consistent snapshot of one peer (core/messaging/message_endpoint.h).")
      .readonly("name", &PeerStats::name)
      .readonly("state", &PeerStats::state, "a PeerState")
      .readonly("detail", &PeerStats::detail, "why it failed")
      .readonly("terminate_sent", &PeerStats::terminate_sent, "the Terminate we sent, else None")
      .readonly("terminate_received", &PeerStats::terminate_received,
                "the Terminate the peer sent, else None")
      .readonly("credit", &PeerStats::credit, "the connection's CreditCounters")
      .readonly("queued", &PeerStats::queued, "requests waiting for a credit")
      .readonly("replies_queued", &PeerStats::replies_queued)
      .readonly("held", &PeerStats::held, "received messages held for a reply")
      .readonly("refused", &PeerStats::refused, "sends that said try_again")
      .readonly("messages_sent", &PeerStats::messages_sent,
                "data messages posted (requests and replies)")
      .readonly("bytes_sent", &PeerStats::bytes_sent, "their payload octets")
      .readonly("writes_sent", &PeerStats::writes_sent,
                "tagged RDMA Writes posted, each just before its message")
      .readonly("bytes_written", &PeerStats::bytes_written, "their octets")
      .readonly("messages_received", &PeerStats::messages_received)
      .readonly("bytes_received", &PeerStats::bytes_received)
      .readonly("lost", &PeerStats::lost,
                "accepted by send/reply but never posted: the connection ended first")
      .readonly("held_released", &PeerStats::held_released,
                "held when the connection ended: can no longer be answered")
      .readonly("stalled_ms", &PeerStats::stalled_ms,
                "how long messages have waited for credit without a break (0: none)")
      .readonly("receive", &PeerStats::receive,
                "the connection's ReceiveCounters: octets read, and read straight into place")
      .readonly("local_address", &PeerStats::local_address)
      .readonly("peer_address", &PeerStats::peer_address)
      .done();

  using messaging::EndpointStats;
  ValueClass<EndpointStats>(m, "EndpointStats", "A consistent snapshot of the whole endpoint.")
      .readonly("budget", &EndpointStats::budget,
                "each peer's share of the completion queue, summed (CompletionBudgetCounters)")
      .readonly("cq", &EndpointStats::cq,
                "the shared completion queue's CompletionQueueCounters (overruns: 0 by "
                "construction)")
      .readonly("bytes_allocated", &EndpointStats::bytes_allocated,
                "every peer's buffers: the configured memory bound")
      .done();
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
                    const py::object&, const py::object&>(),
           py::arg("config"), py::arg("on_message") = py::none(), py::arg("on_ready") = py::none(),
           py::arg("on_failure") = py::none(), py::arg("on_close") = py::none(),
           "Starts the handler thread. on_message(peer, message_id, payload: bytes), "
           "on_ready(peer), on_failure(peer, why), on_close(peer, why) run on it, with the GIL.")
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
            const auto status = h.get().hold(id);
            // The running handler keeps its own message: not released when it returns.
            if (in_handler && id == handler_message && status == messaging::SendStatus::kOk) {
              handler_held = true;
            }
            return std::string(messaging::status_name(status));
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
           "Stops the handler thread and closes every peer (GIL released).")
      .def_property_readonly("closed", &EndpointHandle::closed);
}

}  // namespace

void bind_messaging(py::module_& m) {
  bind_counters(m);
  bind_config(m);
  bind_endpoint(m);
}

}  // namespace rdma_interop::bindings
