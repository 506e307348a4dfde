// xrc_verbs.h - XRC through rdma-core: does a device have it, and its receive-side objects.
//
// The lifetime engine (core/xrc) decides; these are the verbs it decides about:
//   XrcDomain::open         ibv_open_xrcd on a file with O_CREAT: every process opening the
//                           same file shares one domain (the kernel keys it by inode)
//   create_target_qp        ibv_create_qp_ex(IBV_QPT_XRC_RECV) in the domain
//   open_target_qp          ibv_open_qp: another process's handle on a target QP by number
//   XrcInitiator::create    the sender's side: ibv_create_qp_ex(IBV_QPT_XRC_SEND), which
//                           needs no domain (a Send names the target's SRQ number instead)
// A device without XRC (siw and rxe, and most RoCE soft devices) fails ibv_open_xrcd with
// EOPNOTSUPP (or ENOSYS from an older provider): open() says "not supported" with the errno,
// and callers skip with that reason. Connecting a target QP to its sender (modify to
// RTR/RTS with the sender's QP number and path) belongs to the CM exchange and is the
// caller's; on this project's machines no device has XRC, so only the not-supported path
// and query_xrc_support run here (the kernel tier runs them against siw and rxe).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/expected.h"

struct ibv_context;
struct ibv_xrcd;
struct ibv_pd;
struct ibv_cq;

namespace rdma_interop::transport::verbs {

// What a device says about XRC, asked two ways: the IBV_DEVICE_XRC capability flag, and a
// real ibv_open_xrcd of a scratch file (some providers set neither consistently).
struct XrcSupport {
  std::string device;
  std::string transport;         // "iwarp", "roce", "ib"
  bool capability_flag = false;  // IBV_DEVICE_XRC in device_cap_flags
  bool supported = false;        // ibv_open_xrcd succeeded
  int error = 0;                 // its errno when it did not
  std::string detail;            // one sentence: why not, or what worked
  // The sender's side, asked separately: an XRC_SEND QP (needs no domain).
  bool initiator_supported = false;
  std::string initiator_detail;
};
// For every device present (empty when none).
std::vector<XrcSupport> query_xrc_support();
std::optional<XrcSupport> query_xrc_support(const std::string& device);

// Why an XRC operation failed: errno and a sentence. not_supported() for EOPNOTSUPP/ENOSYS.
struct XrcVerbsError {
  int error = 0;
  std::string detail;
  bool not_supported() const;
};

// One process's handle on an XRC domain and what it made in it. Destroying the handle
// closes what this process opened or created (target QPs it created are destroyed only when
// no process holds them: the kernel's use count, which the lifetime engine stands above).
class XrcDomain {
 public:
  static Expected<std::unique_ptr<XrcDomain>, XrcVerbsError> open(const std::string& device,
                                                                  const std::string& path,
                                                                  bool create);
  ~XrcDomain();
  XrcDomain(const XrcDomain&) = delete;
  XrcDomain& operator=(const XrcDomain&) = delete;

  // The target QP's number, for the sender's CM exchange and for other processes.
  Expected<std::uint32_t, XrcVerbsError> create_target_qp();
  Expected<std::uint32_t, XrcVerbsError> open_target_qp(std::uint32_t qp_num);
  const std::string& device() const { return device_; }

 private:
  XrcDomain() = default;
  struct Objects;
  std::string device_;
  std::unique_ptr<Objects> objects_;
};

// A sender's XRC initiator QP (in RESET; the CM exchange connects it to a target QP).
class XrcInitiator {
 public:
  static Expected<std::unique_ptr<XrcInitiator>, XrcVerbsError> create(const std::string& device);
  ~XrcInitiator();
  XrcInitiator(const XrcInitiator&) = delete;
  XrcInitiator& operator=(const XrcInitiator&) = delete;
  std::uint32_t qp_num() const { return qp_num_; }

 private:
  XrcInitiator() = default;
  struct Objects;
  std::unique_ptr<Objects> objects_;
  std::uint32_t qp_num_ = 0;
};

}  // namespace rdma_interop::transport::verbs
