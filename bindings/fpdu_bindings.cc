// fpdu_bindings.cc - FPDU framing (core/wire/fpdu_encoder.h, fpdu_decoder.h) and CRC32c.
//
// These are the CRC-heavy calls, so large inputs are copied out of their Python objects and
// processed with the GIL released. A mutex per object keeps two Python threads from
// driving one stream at once. It never waits on the GIL while held (the GIL is reacquired
// only after it is unlocked), so it cannot deadlock against the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "bindings.h"
#include "core/wire/crc32c.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"
#include "core/wire/fpdu_options.h"

namespace rdma_interop::bindings {

namespace {

wire::FpduOptions options_of(bool crc, bool markers, std::optional<std::uint16_t> max_ulpdu) {
  wire::FpduOptions options;
  options.crc = crc;
  options.markers = markers;
  if (max_ulpdu) {
    options.max_ulpdu = *max_ulpdu;
  } else if (markers) {
    options.max_ulpdu = wire::kMaxUlpduWithMarkers;
  }
  return options;
}

// Runs `work` without the GIL when the input is large enough to be worth it.
template <class Work>
auto maybe_without_gil(std::size_t input_size, Work&& work) {
  if (input_size < kReleaseGilThreshold) return work();
  py::gil_scoped_release release;
  return work();
}

class PyFpduEncoder {
 public:
  explicit PyFpduEncoder(const wire::FpduOptions& options) : encoder_(options) {}

  // Frames the concatenation of `parts` as one FPDU.
  py::bytes encode(const py::sequence& parts) {
    std::vector<std::vector<std::uint8_t>> copies;
    std::size_t total = 0;
    for (py::handle part : parts) {
      copies.push_back(copy_bytes(part));
      total += copies.back().size();
    }
    auto result = maybe_without_gil(total, [&] { return encode_locked(copies); });
    if (!result) throw_wire_error(result.error());
    return to_bytes(*result);
  }

  std::uint64_t stream_position() const {
    std::lock_guard lock(mutex_);
    return encoder_.stream_position();
  }

 private:
  Expected<std::vector<std::uint8_t>, wire::WireError> encode_locked(
      const std::vector<std::vector<std::uint8_t>>& copies) {
    std::lock_guard lock(mutex_);
    std::vector<std::span<const std::uint8_t>> spans(copies.begin(), copies.end());
    auto length = encoder_.encode(spans, frame_);
    if (!length) return unexpected(length.error());
    std::vector<std::uint8_t> out;
    out.reserve(*length);
    frame_.append_to(out);
    return out;
  }

  mutable std::mutex mutex_;
  wire::FpduEncoder encoder_;
  wire::FpduFrame frame_;
};

class PyFpduDecoder {
 public:
  explicit PyFpduDecoder(const wire::FpduOptions& options) : decoder_(options) {}

  // Every ULPDU completed by `data`. On an error, those completed before it are attached to
  // the WireError as .ulpdus; the decoder stays failed.
  py::list feed(py::handle data) {
    auto input = copy_bytes(data);
    auto [ulpdus, error] = maybe_without_gil(input.size(), [&] { return feed_locked(input); });
    py::list out;
    for (const auto& ulpdu : ulpdus) out.append(to_bytes(ulpdu));
    if (error) {
      py::object exception = make_wire_error(*error);
      exception.attr("ulpdus") = py::tuple(out);
      throw_wire_error(exception);
    }
    return out;
  }

  std::uint64_t stream_position() const {
    std::lock_guard lock(mutex_);
    return decoder_.stream_position();
  }
  std::uint64_t fpdus_decoded() const {
    std::lock_guard lock(mutex_);
    return decoder_.fpdus_decoded();
  }
  bool at_boundary() const {
    std::lock_guard lock(mutex_);
    return decoder_.at_boundary();
  }

 private:
  using Ulpdus = std::vector<std::vector<std::uint8_t>>;

  std::pair<Ulpdus, std::optional<wire::WireError>> feed_locked(
      const std::vector<std::uint8_t>& input) {
    std::lock_guard lock(mutex_);
    Ulpdus ulpdus;
    std::span<const std::uint8_t> rest(input);
    while (!rest.empty()) {
      auto step = decoder_.step(rest);
      if (!step) return {std::move(ulpdus), step.error()};
      rest = rest.subspan(step->consumed);
      if (step->ulpdu) {
        // The view dies at the next step(): copy it now.
        ulpdus.emplace_back(step->ulpdu->begin(), step->ulpdu->end());
      } else if (step->consumed == 0) {
        break;  // cannot happen with input left; never spin
      }
    }
    return {std::move(ulpdus), std::nullopt};
  }

  mutable std::mutex mutex_;
  wire::FpduDecoder decoder_;
};

}  // namespace

void bind_fpdu(py::module_& m) {
  m.attr("MAX_ULPDU_LENGTH") = wire::kMaxUlpduLength;
  m.attr("MAX_ULPDU_WITH_MARKERS") = wire::kMaxUlpduWithMarkers;
  m.attr("MARKER_INTERVAL") = wire::kMarkerInterval;

  m.def(
      "crc32c",
      [](py::handle data) {
        auto bytes = copy_bytes(data);
        return maybe_without_gil(bytes.size(), [&] { return wire::crc32c(bytes); });
      },
      py::arg("data"), "CRC32c (finished) of the bytes: crc32c(b'123456789') == 0xe3069283.");

  py::class_<PyFpduEncoder>(m, "FpduEncoder")
      .def(py::init([](bool crc, bool markers, std::optional<std::uint16_t> max_ulpdu) {
             return std::make_unique<PyFpduEncoder>(options_of(crc, markers, max_ulpdu));
           }),
           py::kw_only(), py::arg("crc") = true, py::arg("markers") = false,
           py::arg("max_ulpdu") = py::none())
      .def("encode", &PyFpduEncoder::encode, py::arg("parts"),
           "One FPDU framing the concatenated parts; raises WireError.")
      .def_property_readonly("stream_position", &PyFpduEncoder::stream_position);

  py::class_<PyFpduDecoder>(m, "FpduDecoder")
      .def(py::init([](bool crc, bool markers, std::optional<std::uint16_t> max_ulpdu) {
             return std::make_unique<PyFpduDecoder>(options_of(crc, markers, max_ulpdu));
           }),
           py::kw_only(), py::arg("crc") = true, py::arg("markers") = false,
           py::arg("max_ulpdu") = py::none())
      .def("feed", &PyFpduDecoder::feed, py::arg("data"),
           "The ULPDUs completed by these stream bytes; raises WireError.")
      .def_property_readonly("stream_position", &PyFpduDecoder::stream_position)
      .def_property_readonly("fpdus_decoded", &PyFpduDecoder::fpdus_decoded)
      .def_property_readonly("at_boundary", &PyFpduDecoder::at_boundary);
}

}  // namespace rdma_interop::bindings
