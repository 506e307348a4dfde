// socket_wait.h - a thread's wait for a socket's next octets or a wake descriptor, received
// in the same syscall that waited for them.
//
// A receiving thread that sleeps in poll(2) on its socket and a wake descriptor, then reads,
// makes two syscalls per message it waits for; a blocking recv(2) makes one but cannot be
// woken. io_uring gives both: a RECV on the socket and a POLL on the wake descriptor go to the
// kernel together, and the thread sleeps in that io_uring_enter until either completes. The
// ring is set up IORING_SETUP_DEFER_TASKRUN (the kernel finishes the RECV inside this thread's
// own wait, not in an interrupting task work) and SINGLE_ISSUER (only its thread uses it).
// A 64-octet round trip over loopback between two threads of raw sockets, each side
// waiting so: 33.9 us, against 35.0 us with poll(2) then recv(2), and 30.9 us with a
// blocking recv(2) that nothing could wake (medians of three runs). On the stream layer's
// round trip (issue 24) the same change took 40.6 us to 37.8 us against raw TCP's 31 us.
//
// Where io_uring is missing or refused (a kernel before 6.1, a container's seccomp filter,
// kernel.io_uring_disabled), for_this_thread() is null and the caller polls as before.
//
// The POLL on the wake descriptor stays armed from one wait to the next while the descriptor
// is the same (WakeFd: its number and an identity, since a closed descriptor's number comes
// back for another file), so a wait is one request, the RECV, and one completion ends it.
// A wake that comes between two waits is not lost: the next wait returns at once (kWoken),
// as poll(2) would with the descriptor still readable, and even if it was read meanwhile:
// a POLL reports the wakeup it saw, so a wait may end for a wake already taken care of.
// Callers look again at why they wait, as they do after poll(2). Another descriptor's POLL
// is taken back first.
//
// Threading: one per thread (thread_local), used only by it. A RECV is never left in flight:
// receive() returns only once the kernel is done with the buffer and the socket. The POLL
// left armed holds a reference to its descriptor's file until the thread waits on another
// one or exits.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

namespace rdma_interop::runtime {

// A wake descriptor (an eventfd other threads write), with a number no other descriptor
// had in this process: new_wake_id() when it was made. id 0: unknown, so a POLL on it is
// never kept from one wait to the next.
struct WakeFd {
  int fd = -1;  // -1: none
  std::uint64_t id = 0;
};
std::uint64_t new_wake_id();

class SocketWait {
 public:
  struct Result {
    enum class Kind : std::uint8_t {
      kData,     // `bytes` octets are in the buffer
      kEof,      // the peer closed in order (or our SHUT_RD)
      kError,    // `error`: the socket's errno (ECONNRESET...)
      kWoken,    // the wake descriptor became readable first
      kTimeout,  // neither, before the timeout
      kUnavailable,  // the ring failed (`error`) and nothing was received: poll instead
                     // (for_this_thread() is null in this thread from now on)
    };
    Kind kind = Kind::kTimeout;
    std::size_t bytes = 0;
    int error = 0;
  };

  // This thread's, made on first use; null where io_uring cannot be used (see the top), or
  // while disabled.
  static SocketWait* for_this_thread();
  // false: for_this_thread() is null in every thread until enabled again (the tests of the
  // poll(2) path use it).
  static void set_enabled(bool enabled);

  SocketWait(const SocketWait&) = delete;
  SocketWait& operator=(const SocketWait&) = delete;
  ~SocketWait();

  // Receives into `into` from `socket` (nonblocking or not), or returns when `wake` is
  // readable or `timeout` passed. Octets the socket had when a wake or the timeout ended the
  // wait are still received (kData): nothing read is dropped.
  Result receive(int socket, std::span<std::uint8_t> into, WakeFd wake,
                 std::chrono::milliseconds timeout);

 private:
  struct Ring;
  explicit SocketWait(Ring* ring);
  Ring* ring_;
  bool broken_ = false;  // the ring refused a submission
};

}  // namespace rdma_interop::runtime
