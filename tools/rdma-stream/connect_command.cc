#include "tools/rdma-stream/connect_command.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "tools/common/exit_status.h"

namespace rdma_interop::stream_cli {
namespace {

using namespace std::chrono_literals;

bool write_out(const std::uint8_t* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(STDOUT_FILENO, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

int run_connect(const ConnectOptions& o, const std::atomic<bool>& stop) {
  auto node = stream::StreamNode::create(node_config(o.common));
  if (!node) {
    std::fprintf(stderr, "rdma-stream: %s\n", node.error().c_str());
    return tools::kExitCannotRun;
  }
  auto connected = (*node)->connect(o.address.host, o.address.port, timeout(o.common));
  if (!connected) {
    std::fprintf(stderr, "rdma-stream: %s\n", connected.error().detail.c_str());
    return connect_exit_status(connected.error().code);
  }
  stream::Socket& s = **connected;
  std::fprintf(stderr, "rdma-stream: connected to %s, %s (%s)\n", o.address.text().c_str(),
               s.upgraded() ? "upgraded" : "plain TCP", s.describe().c_str());

  // Standard input on a thread of its own: a read of a terminal or a pipe cannot be given a
  // timeout, and the stream is full duplex. Only this thread sends; only the main thread
  // receives. The Socket's send and recv share no state but what close() changes, and close()
  // is called once both directions are done (or the process ends).
  std::atomic<int> send_error{0};
  std::atomic<bool> input_done{false};
  std::thread input([&] {
    std::vector<std::uint8_t> buf(64 * 1024);
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (const int e = send_all(s, buf.data(), static_cast<std::size_t>(n), stream::kForever);
          e != 0) {
        send_error = e;
        break;
      }
    }
    if (send_error == 0) (void)s.shutdown_write();
    input_done = true;
  });

  int status = tools::kExitOk;
  std::vector<std::uint8_t> buf(64 * 1024);
  for (;;) {
    auto n = s.recv(buf, {.timeout = 200ms});
    if (!n && n.error() == EAGAIN) {
      if (stop) {
        std::fprintf(stderr, "rdma-stream: stopped by a signal\n");
        status = tools::kExitFailed;
        break;
      }
      continue;
    }
    if (!n) {
      std::fprintf(stderr, "rdma-stream: receive: %s\n", std::strerror(n.error()));
      status = tools::kExitFailed;
      break;
    }
    if (*n == 0) break;  // the peer's end of stream
    if (!write_out(buf.data(), *n)) {
      status = tools::kExitFailed;
      break;
    }
  }
  if (send_error != 0 && status == tools::kExitOk) {
    std::fprintf(stderr, "rdma-stream: send: %s\n", std::strerror(send_error));
    status = tools::kExitFailed;
  }
  std::fflush(stdout);
  // The input thread may be blocked reading a terminal that will never end: the peer has
  // finished, so does the command, as nc does. It cannot be joined, and the socket it uses
  // must outlive it: the process ends here, without running destructors under its feet.
  if (!input_done) ::_exit(status);
  input.join();
  return status;
}

}  // namespace rdma_interop::stream_cli
