// bindings.h - shared helpers of the rdma_interop._core extension module.
//
// _core binds the core's value types once, documented (value_class.h), with their enums as
// the package's own (enum_casters.h); the rdma_interop package re-exports them and adds what
// only Python has. Every WireError a codec returns is raised as rdma_interop.errors.WireError
// (one Python class; .name says which error).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/transport/provider.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::bindings {

namespace py = pybind11;

// Releasing the GIL costs more than it saves below this many octets.
inline constexpr std::size_t kReleaseGilThreshold = 4096;

// A read-only, contiguous view of any Python object with the buffer protocol (bytes,
// bytearray, memoryview...), held for the view's lifetime. Valid only while the GIL is held:
// copy() first if the bytes are used with the GIL released.
class BytesView {
 public:
  explicit BytesView(py::handle object);
  ~BytesView();
  BytesView(const BytesView&) = delete;
  BytesView& operator=(const BytesView&) = delete;

  std::span<const std::uint8_t> span() const {
    return {static_cast<const std::uint8_t*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }
  std::vector<std::uint8_t> copy() const { return {span().begin(), span().end()}; }

 private:
  Py_buffer view_{};
};

inline std::vector<std::uint8_t> copy_bytes(py::handle object) {
  return BytesView(object).copy();
}

inline py::bytes to_bytes(std::span<const std::uint8_t> bytes) {
  return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Builds rdma_interop.errors.WireError for `error` (name, message, Terminate cause).
py::object make_wire_error(wire::WireError error);
// Raises it as the current Python exception.
[[noreturn]] void throw_wire_error(wire::WireError error);
[[noreturn]] void throw_wire_error(py::object exception);

// The error whose error_name() is `name`; raises ValueError for an unknown name.
wire::WireError wire_error_from_name(std::string_view name);

// Raises rdma_interop.provider.ConnectError for `error` (GIL held): one construction, so a
// setup failure reads the same from the provider and the messaging API.
[[noreturn]] void throw_connect_error(const transport::ConnectError& error);

void bind_errors(py::module_& m);
void bind_mpa(py::module_& m);
void bind_fpdu(py::module_& m);
void bind_rdmap(py::module_& m);
void bind_provider(py::module_& m);
void bind_messaging(py::module_& m);  // after bind_provider: it takes providers and requests
void bind_stream(py::module_& m);

}  // namespace rdma_interop::bindings
