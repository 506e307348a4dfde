// verbs_options.h - the RC timing knobs a verbs:// URI may carry in its query:
//
//   verbs://10.0.2.15:7000?ack_timeout=14&retry_count=2&rnr_retry=3
//
// They are the three numbers an RC requester uses to decide that its peer is gone (IB spec
// vol. 1 s9.7.6.1: transport timer and retry counter; s9.7.5.2.8: RNR NAK retry), passed to
// rdma_cm as the connection is set up (rdma_set_option ACK timeout; rdma_conn_param
// retry_count / rnr_retry_count). On iWARP the LLP is TCP and its own retransmission rules
// apply: the kernel ignores all three.
//
// One more key is not a timing knob: source=ADDRESS (an IP address or an RDMA device's
// name) is the local address a connect starts from, rdma_resolve_addr's source address,
// which is what picks the local RDMA device (rping -I). Without it the route to the peer
// decides; on a node with two devices on one subnet, or both ends of a pair in one host,
// that choice is the kernel's, not the test's. Only connect uses it: a listener refuses it.
//
// Parsing is strict: an unknown key, a repeated key, a value that is not a decimal number or
// is out of range is an error naming the key and the allowed range. This header is free of
// rdma-core types so the URI parser and hosts without RDMA can use it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/util/expected.h"

namespace rdma_interop::transport::verbs {

struct VerbsOptions {
  // Local ACK Timeout exponent: the requester retries after 4.096 us * 2^ack_timeout without
  // an ACK (14: 67 ms, 16: 268 ms, 19: 2.1 s). 0 disables the timer (waits forever).
  // Unset: the CM's choice (for RoCE the route's packet lifetime, about 2 s in practice).
  std::optional<std::uint8_t> ack_timeout;
  // Transport retries before the request completes with retry_exceeded (0..7). 7 is what
  // librdmacm uses when the application passes no parameters.
  std::uint8_t retry_count = 7;
  // Retries after an RNR NAK (the peer had no receive posted) before rnr_retry_exceeded
  // (0..7); 7 means retry forever, librdmacm's default.
  std::uint8_t rnr_retry_count = 7;
  // connect: the local address (or device name) to connect from; empty: the route's choice.
  std::string source;

  friend bool operator==(const VerbsOptions&, const VerbsOptions&) = default;
};

// The query keys, in the order the help lists them.
inline constexpr std::string_view kVerbsOptionKeys[] = {"ack_timeout", "retry_count", "rnr_retry",
                                                        "source"};

// Reads the key=value pairs of a verbs URI's query (already split, in order). The error is
// one sentence: "verbs URI option retry_count=9 is out of range: 0 to 7".
Expected<VerbsOptions, std::string> parse_verbs_options(
    const std::vector<std::pair<std::string, std::string>>& query);

}  // namespace rdma_interop::transport::verbs
