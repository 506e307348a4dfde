// error_bindings.cc - WireError codes to Python exceptions, and the shared byte helpers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::bindings {

namespace {

std::vector<wire::WireError> all_wire_errors() {
  std::vector<wire::WireError> all;
  for (std::size_t i = 0; i < wire::kWireErrorCount; ++i) {
    all.push_back(static_cast<wire::WireError>(i));
  }
  return all;
}

py::tuple cause_tuple(const wire::TerminateCause& cause) {
  return py::make_tuple(static_cast<int>(cause.layer), cause.etype, cause.code);
}

}  // namespace

BytesView::BytesView(py::handle object) {
  // PyBUF_SIMPLE: contiguous bytes or a TypeError (e.g. for a strided memoryview or a str).
  if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_SIMPLE) != 0) {
    throw py::error_already_set();
  }
}

BytesView::~BytesView() {
  PyBuffer_Release(&view_);
}

py::object make_wire_error(wire::WireError error) {
  py::object cls = py::module_::import("rdma_interop.errors").attr("WireError");
  return cls(std::string(wire::error_name(error)), std::string(wire::describe(error)),
             cause_tuple(wire::terminate_for(error)));
}

void throw_wire_error(py::object exception) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  throw py::error_already_set();
}

void throw_wire_error(wire::WireError error) {
  throw_wire_error(make_wire_error(error));
}

wire::WireError wire_error_from_name(std::string_view name) {
  for (auto e : all_wire_errors()) {
    if (wire::error_name(e) == name) return e;
  }
  throw py::value_error("unknown wire error name: " + std::string(name));
}

void bind_errors(py::module_& m) {
  m.def(
      "wire_error_names",
      [] {
        std::vector<std::string> names;
        for (auto e : all_wire_errors()) names.emplace_back(wire::error_name(e));
        return names;
      },
      "Every stable error name (error_name) in declaration order.");
  m.def(
      "make_wire_error",
      [](std::string_view name) { return make_wire_error(wire_error_from_name(name)); },
      py::arg("name"), "The WireError exception object for an error name (not raised).");
  m.def(
      "describe_cause",
      [](std::uint8_t layer, std::uint8_t etype, std::uint8_t code) {
        wire::TerminateCause cause{static_cast<wire::TermLayer>(layer), etype, code};
        return wire::describe(cause);
      },
      py::arg("layer"), py::arg("etype"), py::arg("code"),
      "'RDMAP/remote protection/invalid STag' style text for a Terminate cause.");
}

}  // namespace rdma_interop::bindings
