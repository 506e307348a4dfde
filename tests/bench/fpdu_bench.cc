// fpdu_bench - MPA FPDU framing throughput (RFC 5044 s4-s6) against its two floors, the
// CRC32c and the copy a receiver cannot avoid, measured in the same run.
//
//   encode/crc{0,1}/markers{0,1}/SIZE   FpduEncoder::encode of one ULPDU (an 18-octet Send
//                                       header + SIZE payload octets) into a reused frame;
//                                       the payload is referenced by the slices, not copied
//   decode/crc{0,1}/markers{0,1}/SIZE   FpduDecoder::step over a pre-encoded stream of many
//                                       such FPDUs, handed over whole (the best case: every
//                                       FPDU is whole in the input)
//   decode_recv16k/crc1/markers0/SIZE   the same stream handed over in 16 KiB pieces, as
//                                       recv() would, so FPDUs straddle pieces
//   crc32c/SIZE                         crc32c_update (ISA-L) over SIZE octets
//   memcpy/SIZE                         memcpy of SIZE octets
//   crc32c_memcpy/SIZE                  crc32c_update then memcpy of the same octets, in one loop
//
// SIZE is the payload: 64 B to 16 KiB, and "65536" stands for the largest payload one FPDU
// carries: 65535 - 18 without markers, kMaxUlpduWithMarkers - 18 with them (and for the
// baselines). Bytes processed counts payload octets only, so every rate is the rate at
// which application data moves. tools/bench-fpdu.sh runs this and prints the ratios.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/wire/crc32c.h"
#include "core/wire/ddp_segment.h"
#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"
#include "core/wire/fpdu_options.h"
#include "core/wire/iwarp_constants.h"

namespace {

using namespace rdma_interop::wire;

constexpr std::array<std::size_t, 6> kSizes = {64, 256, 1024, 4096, 16384, 65536};
// Decode streams stay cache-resident, like the baselines' buffers.
constexpr std::size_t kDecodeStreamBytes = 256 * 1024;
constexpr std::size_t kMinFpdusPerStream = 4;
constexpr std::size_t kRecvPiece = 16 * 1024;

std::size_t payload_size(std::size_t nominal, bool markers) {
  const std::size_t mulpdu = markers ? kMaxUlpduWithMarkers : kMaxUlpduLength;
  return std::min(nominal, mulpdu - kDdpUntaggedHeaderLen);
}

std::vector<std::uint8_t> make_payload(std::size_t n) {
  std::vector<std::uint8_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 131 + 7);
  return p;
}

std::array<std::uint8_t, kDdpUntaggedHeaderLen> send_header_bytes() {
  std::array<std::uint8_t, kDdpUntaggedHeaderLen> h{};
  encode_ddp_header(send_header(/*msn=*/1, /*message_offset=*/0, /*last=*/true), h);
  return h;
}

FpduOptions options(bool crc, bool markers) {
  FpduOptions o;
  o.crc = crc;
  o.markers = markers;
  o.max_ulpdu = markers ? kMaxUlpduWithMarkers : kMaxUlpduLength;
  return o;
}

void bm_encode(benchmark::State& state, bool crc, bool markers, std::size_t nominal) {
  const auto header = send_header_bytes();
  const auto payload = make_payload(payload_size(nominal, markers));
  const std::array<std::span<const std::uint8_t>, 2> parts = {
      std::span<const std::uint8_t>(header), std::span<const std::uint8_t>(payload)};
  FpduEncoder encoder(options(crc, markers));
  FpduFrame frame;
  for (auto _ : state) {
    auto n = encoder.encode(parts, frame);
    if (!n) {
      state.SkipWithError("encode failed");
      break;
    }
    benchmark::DoNotOptimize(frame.slices().data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * payload.size()));
  state.counters["payload"] = static_cast<double>(payload.size());
}

// `piece` 0: the whole stream in one span.
void bm_decode(benchmark::State& state, bool crc, bool markers, std::size_t nominal,
               std::size_t piece) {
  const auto header = send_header_bytes();
  const auto payload = make_payload(payload_size(nominal, markers));
  const std::array<std::span<const std::uint8_t>, 2> parts = {
      std::span<const std::uint8_t>(header), std::span<const std::uint8_t>(payload)};
  const FpduOptions opts = options(crc, markers);
  FpduEncoder encoder(opts);
  FpduFrame frame;
  std::vector<std::uint8_t> stream;
  std::size_t fpdus = 0;
  while (fpdus < kMinFpdusPerStream || stream.size() < kDecodeStreamBytes) {
    if (!encoder.encode(parts, frame)) {
      state.SkipWithError("encode failed");
      return;
    }
    frame.append_to(stream);
    ++fpdus;
  }

  for (auto _ : state) {
    FpduDecoder decoder(opts);
    std::span<const std::uint8_t> rest(stream);
    std::size_t ulpdus = 0;
    while (!rest.empty()) {
      auto in = piece == 0 ? rest : rest.first(std::min(piece, rest.size()));
      rest = rest.subspan(in.size());
      while (!in.empty()) {
        auto step = decoder.step(in);
        if (!step) {
          state.SkipWithError("decode failed");
          return;
        }
        in = in.subspan(step->consumed);
        if (step->ulpdu) {
          benchmark::DoNotOptimize(step->ulpdu->data());
          ++ulpdus;
        }
      }
    }
    if (ulpdus != fpdus) {
      state.SkipWithError("decoded another number of ULPDUs");
      return;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * fpdus * payload.size()));
  state.counters["payload"] = static_cast<double>(payload.size());
  state.counters["fpdus"] = static_cast<double>(fpdus);
}

void bm_crc32c(benchmark::State& state, std::size_t nominal) {
  const auto data = make_payload(payload_size(nominal, false));
  for (auto _ : state) {
    std::uint32_t crc = crc32c_update(kCrc32cInit, data);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * data.size()));
}

void bm_memcpy(benchmark::State& state, std::size_t nominal) {
  const auto src = make_payload(payload_size(nominal, false));
  std::vector<std::uint8_t> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * src.size()));
}

void bm_crc32c_memcpy(benchmark::State& state, std::size_t nominal) {
  const auto src = make_payload(payload_size(nominal, false));
  std::vector<std::uint8_t> dst(src.size());
  for (auto _ : state) {
    std::uint32_t crc = crc32c_update(kCrc32cInit, src);
    benchmark::DoNotOptimize(crc);
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * src.size()));
}

std::string name(const char* what, bool crc, bool markers, std::size_t size) {
  return std::string(what) + "/crc" + (crc ? "1" : "0") + "/markers" + (markers ? "1" : "0") +
         "/" + std::to_string(size);
}

void register_all() {
  for (std::size_t size : kSizes) {
    for (bool crc : {true, false}) {
      for (bool markers : {false, true}) {
        benchmark::RegisterBenchmark(name("encode", crc, markers, size).c_str(),
                                     [=](benchmark::State& s) { bm_encode(s, crc, markers, size); });
        benchmark::RegisterBenchmark(
            name("decode", crc, markers, size).c_str(),
            [=](benchmark::State& s) { bm_decode(s, crc, markers, size, 0); });
      }
    }
    benchmark::RegisterBenchmark(
        name("decode_recv16k", true, false, size).c_str(),
        [=](benchmark::State& s) { bm_decode(s, true, false, size, kRecvPiece); });
    const std::string n = std::to_string(size);
    benchmark::RegisterBenchmark(("crc32c/" + n).c_str(),
                                 [=](benchmark::State& s) { bm_crc32c(s, size); });
    benchmark::RegisterBenchmark(("memcpy/" + n).c_str(),
                                 [=](benchmark::State& s) { bm_memcpy(s, size); });
    benchmark::RegisterBenchmark(("crc32c_memcpy/" + n).c_str(),
                                 [=](benchmark::State& s) { bm_crc32c_memcpy(s, size); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
