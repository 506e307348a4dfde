// core_module.cc - the rdma_interop._core extension module: one bind_* call per area.
#include <pybind11/pybind11.h>

#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "C++ iWARP wire codecs (MPA, FPDU, DDP, RDMAP). Low-level: use rdma_interop.wire.";
  rdma_interop::bindings::bind_errors(m);
  rdma_interop::bindings::bind_mpa(m);
  rdma_interop::bindings::bind_fpdu(m);
  rdma_interop::bindings::bind_rdmap(m);
  rdma_interop::bindings::bind_provider(m);
  rdma_interop::bindings::bind_messaging(m);
  rdma_interop::bindings::bind_stream(m);
}
