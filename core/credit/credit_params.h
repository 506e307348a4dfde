// credit_params.h - the credit numbers each side announces at connection setup, carried in
// the MPA private data of the Request (initiator) and the Reply (responder).
//
// Octet layout (16 octets, network byte order, at offset 0 of the private data; octets
// after them are the application's and are ignored here):
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +---------------------------------------------------------------+
//   |                    Magic "RICR" (0x52494352)                  |
//   +---------------+---------------+-------------------------------+
//   |    Version    |Control Recvs  |         Receive Window        |
//   +---------------+---------------+-------------------------------+
//   |        Initial Receives       |         Reply Reserve         |
//   +-------------------------------+-------------------------------+
//   |                     Max Message (octets)                      |
//   +---------------------------------------------------------------+
//
//   Version           kCreditParamsVersion (1); another value: kBadParamsVersion.
//   Control Recvs     control receives the sender keeps posted (1..255).
//   Receive Window    data receives the sender keeps posted for the receiver (1..0xFFFF).
//   Initial Receives  of those, posted before setup completed: the receiver's first credits
//                     (<= Receive Window).
//   Reply Reserve     credits toward the receiver the sender keeps for replies (its requests
//                     stop there). The receiver sends a standalone grant once the sender is
//                     down to that many, so a sender held by its reserve always hears of the
//                     buffers freed for it. 0: none (what peers before this field send: it was
//                     Reserved, zero). A value at or over the receiver's window is taken as
//                     window - 1, never refused.
//   Max Message       the largest Send payload the sender's receive buffers hold, credit
//                     header included (>= kCreditHeaderSize).
//
// Each side builds its CreditConfig from its own numbers and the peer's (config_for()).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string_view>

#include "core/credit/credit_window.h"
#include "core/util/expected.h"

namespace rdma_interop::credit {

inline constexpr std::size_t kCreditParamsSize = 16;
inline constexpr std::uint32_t kCreditParamsMagic = 0x52494352;  // "RICR"
inline constexpr std::uint8_t kCreditParamsVersion = 1;

struct CreditParams {
  std::uint8_t control_receives = 2;
  std::uint16_t receive_window = 16;
  std::uint16_t initial_receives = 16;
  std::uint16_t reply_reserve = 0;
  std::uint32_t max_message = 4096 + 4;  // credit header included
  friend bool operator==(const CreditParams&, const CreditParams&) = default;
};
// "credit_params{window=16 initial=16 control=2 max_message=4100}"
std::ostream& operator<<(std::ostream& os, const CreditParams& p);

enum class ParamsError : std::uint8_t {
  kShort,             // fewer than kCreditParamsSize octets (e.g. a peer without credits)
  kBadMagic,          // not "RICR": the peer speaks another private-data format
  kBadParamsVersion,  // a version this side does not know
  kBadValue,          // a field out of range (see the layout)
};
std::string_view error_name(ParamsError e);  // stable id: "bad_magic"
std::string_view describe(ParamsError e);    // one sentence for a human

// Writes the fields as they are (Reserved zero); it does not check them: a test may build
// out-of-range params on purpose. decode_credit_params() is where ranges are enforced.
std::array<std::uint8_t, kCreditParamsSize> encode_credit_params(const CreditParams& p);
// Decodes the first kCreditParamsSize octets of `private_data`; longer input is fine. The
// checks go in layout order: length, magic, version, then each field's range.
Expected<CreditParams, ParamsError> decode_credit_params(
    std::span<const std::uint8_t> private_data);

// This side's CreditConfig from what each side announced: receive_window, initial_receives
// and control_receives from `ours`, the peer_* ones (peer_reply_reserve too) from `peer`;
// grant_batch and low_water keep their defaults. `send_queue_depth` and `control_send_slots` are
// local choices (the peer never sees them). Max Message is not part of a CreditConfig: the caller
// checks payload sizes against peer.max_message itself. With params that decode and a valid queue
// split (1 <= control_send_slots < send_queue_depth), credit::validate() accepts the result.
CreditConfig config_for(const CreditParams& ours, const CreditParams& peer,
                        std::uint32_t send_queue_depth, std::uint32_t control_send_slots);

}  // namespace rdma_interop::credit
