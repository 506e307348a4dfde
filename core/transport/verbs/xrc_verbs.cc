#include "core/transport/verbs/xrc_verbs.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/runtime/socket_util.h"
#include "core/transport/verbs/cm_address.h"

namespace rdma_interop::transport::verbs {
namespace {

XrcVerbsError xrc_error(int e, const std::string& what) {
  return XrcVerbsError{e, what + ": " + runtime::errno_text(e)};
}

// Opens `device` by name; null (errno set) when it is not there.
ibv_context* open_device(const std::string& device) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return nullptr;
  ibv_context* context = nullptr;
  errno = ENODEV;
  for (int i = 0; i < n; ++i) {
    if (device == ibv_get_device_name(list[i])) {
      context = ibv_open_device(list[i]);
      break;
    }
  }
  ibv_free_device_list(list);
  return context;
}

ibv_xrcd* open_xrcd(ibv_context* context, int fd, bool create) {
  ibv_xrcd_init_attr attr{};
  attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  attr.fd = fd;
  attr.oflags = create ? O_CREAT : 0;
  return ibv_open_xrcd(context, &attr);
}

}  // namespace

bool XrcVerbsError::not_supported() const {
  return error == EOPNOTSUPP || error == ENOSYS || error == ENOTSUP;
}

std::optional<XrcSupport> query_xrc_support(const std::string& device) {
  ibv_context* context = open_device(device);
  if (context == nullptr) return std::nullopt;
  XrcSupport s;
  s.device = device;
  s.transport = rdma_device_transport(device);
  ibv_device_attr attr{};
  if (ibv_query_device(context, &attr) == 0) {
    s.capability_flag = (attr.device_cap_flags & IBV_DEVICE_XRC) != 0;
  }
  // A scratch file, as a real user would name a shared one: the kernel keys domains by inode.
  char path[] = "/tmp/rdma-interop-xrcd-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) {
    s.error = errno;
    s.detail = "cannot make a scratch file for ibv_open_xrcd: " + runtime::errno_text(errno);
  } else {
    ::unlink(path);
    if (ibv_xrcd* xrcd = open_xrcd(context, fd, true)) {
      s.supported = true;
      s.detail = "ibv_open_xrcd succeeded";
      ibv_close_xrcd(xrcd);
    } else {
      s.error = errno;
      s.detail =
          std::string(XrcVerbsError{s.error, {}}.not_supported() ? "not supported: " : "failed: ") +
          "ibv_open_xrcd: " + runtime::errno_text(s.error);
    }
    ::close(fd);
  }
  ibv_close_device(context);
  if (auto initiator = XrcInitiator::create(device)) {
    s.initiator_supported = true;
    s.initiator_detail = "ibv_create_qp_ex(IBV_QPT_XRC_SEND) succeeded";
  } else {
    s.initiator_detail = initiator.error().detail;
  }
  return s;
}

std::vector<XrcSupport> query_xrc_support() {
  std::vector<XrcSupport> out;
  for (const auto& name : rdma_device_names()) {
    if (auto s = query_xrc_support(name)) out.push_back(*s);
  }
  return out;
}

// The device, a protection domain and a completion queue: what both ends of XRC need.
struct XrcDeviceHandles {
  XrcDeviceHandles() = default;
  XrcDeviceHandles(const XrcDeviceHandles&) = delete;
  XrcDeviceHandles& operator=(const XrcDeviceHandles&) = delete;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;

  std::optional<XrcVerbsError> open(const std::string& device) {
    context = open_device(device);
    if (!context) return xrc_error(errno, "open device " + device);
    pd = ibv_alloc_pd(context);
    if (!pd) return xrc_error(errno, "ibv_alloc_pd");
    cq = ibv_create_cq(context, 256, nullptr, nullptr, 0);
    if (!cq) return xrc_error(errno, "ibv_create_cq");
    return std::nullopt;
  }
  ~XrcDeviceHandles() {
    if (cq) ibv_destroy_cq(cq);
    if (pd) ibv_dealloc_pd(pd);
    if (context) ibv_close_device(context);
  }
};

struct XrcDomain::Objects {
  XrcDeviceHandles dev;  // first: destroyed after everything made on it
  ibv_xrcd* xrcd = nullptr;
  int fd = -1;
  std::vector<ibv_qp*> qps;  // created or opened by this process

  ~Objects() {
    for (ibv_qp* q : qps) ibv_destroy_qp(q);
    if (xrcd) ibv_close_xrcd(xrcd);
    if (fd >= 0) ::close(fd);
  }
};

Expected<std::unique_ptr<XrcDomain>, XrcVerbsError> XrcDomain::open(const std::string& device,
                                                                    const std::string& path,
                                                                    bool create) {
  auto objects = std::make_unique<Objects>();
  if (auto e = objects->dev.open(device)) return unexpected(*e);
  objects->fd = ::open(path.c_str(), O_RDONLY | (create ? O_CREAT : 0), 0600);
  if (objects->fd < 0) return unexpected(xrc_error(errno, "open " + path));
  objects->xrcd = open_xrcd(objects->dev.context, objects->fd, create);
  if (!objects->xrcd) return unexpected(xrc_error(errno, "ibv_open_xrcd on " + device));
  std::unique_ptr<XrcDomain> d(new XrcDomain());
  d->device_ = device;
  d->objects_ = std::move(objects);
  return d;
}

XrcDomain::~XrcDomain() = default;

Expected<std::uint32_t, XrcVerbsError> XrcDomain::create_target_qp() {
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_XRC_RECV;
  attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  attr.xrcd = objects_->xrcd;
  ibv_qp* qp = ibv_create_qp_ex(objects_->dev.context, &attr);
  if (!qp) return unexpected(xrc_error(errno, "ibv_create_qp_ex(IBV_QPT_XRC_RECV)"));
  objects_->qps.push_back(qp);
  return qp->qp_num;
}

Expected<std::uint32_t, XrcVerbsError> XrcDomain::open_target_qp(std::uint32_t qp_num) {
  ibv_qp_open_attr attr{};
  attr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  attr.qp_num = qp_num;
  attr.xrcd = objects_->xrcd;
  attr.qp_type = IBV_QPT_XRC_RECV;
  ibv_qp* qp = ibv_open_qp(objects_->dev.context, &attr);
  if (!qp) return unexpected(xrc_error(errno, "ibv_open_qp " + std::to_string(qp_num)));
  objects_->qps.push_back(qp);
  return qp->qp_num;
}

struct XrcInitiator::Objects {
  XrcDeviceHandles dev;
  ibv_qp* qp = nullptr;

  ~Objects() {
    if (qp) ibv_destroy_qp(qp);
  }
};

Expected<std::unique_ptr<XrcInitiator>, XrcVerbsError> XrcInitiator::create(
    const std::string& device) {
  auto objects = std::make_unique<Objects>();
  if (auto e = objects->dev.open(device)) return unexpected(*e);
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_XRC_SEND;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  attr.pd = objects->dev.pd;
  attr.send_cq = objects->dev.cq;
  attr.cap.max_send_wr = 64;
  attr.cap.max_send_sge = 1;
  objects->qp = ibv_create_qp_ex(objects->dev.context, &attr);
  if (!objects->qp) return unexpected(xrc_error(errno, "ibv_create_qp_ex(IBV_QPT_XRC_SEND)"));
  std::unique_ptr<XrcInitiator> i(new XrcInitiator());
  i->qp_num_ = objects->qp->qp_num;
  i->objects_ = std::move(objects);
  return i;
}

XrcInitiator::~XrcInitiator() = default;

}  // namespace rdma_interop::transport::verbs
