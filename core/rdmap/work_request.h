// work_request.h - work requests and completions, named as in rdma-core's verbs.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/wire/wire_error.h"

namespace rdma_interop::rdmap {

enum class WrOpcode : std::uint8_t {
  kSend,
  kSendWithInvalidate,
  kSendWithSolicitedEvent,
  kSendWithSolicitedEventAndInvalidate,
  kRdmaWrite,
  kRdmaRead,
};

// One local buffer (a single scatter/gather element keeps the data path simple).
struct Sge {
  std::uint64_t addr = 0;  // inside the region named by lkey; 0 with length 0 is fine
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

struct SendWr {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  Sge sge;
  std::uint32_t remote_stag = 0;  // Write, Read: the peer's region (rkey)
  std::uint64_t remote_addr = 0;
  std::uint32_t invalidate_stag = 0;  // Send with Invalidate
  bool signaled = true;               // completion entry on success (errors always complete)
  // IBV_SEND_INLINE: the payload is read while the post runs, not later from registered
  // memory, so sge.lkey is not checked (0 is fine) and the buffer is the caller's again once
  // the post returns. Sends and Writes only, of at most Connection::max_inline_data() octets.
  bool inline_data = false;
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  Sge sge;
};

enum class WcOpcode : std::uint8_t { kSend, kRdmaWrite, kRdmaRead, kRecv };

enum class WcStatus : std::uint8_t {
  kSuccess,
  kLocalLengthError,      // a received Send did not fit the posted buffer
  kLocalProtectionError,  // a local buffer failed its lkey/bounds/rights check
  kRemoteAccessError,     // the peer answered with a remote protection Terminate
  kRemoteOperationError,  // the peer answered with another Terminate
  kFatalError,            // the connection failed (Terminate sent or received, reset)
  kFlushed,               // the queue pair went to error before this request ran
  // Reported by the verbs provider only (IB/RoCE transport errors the userspace iWARP stack
  // cannot produce). Appended so the values above keep their numbers.
  kRetryExceeded,           // no ACK after retry_count transport retries (peer gone or cut off)
  kRnrRetryExceeded,        // the peer kept answering RNR NAK: no receive posted in time
  kRemoteInvalidRequest,    // the peer NAKed the request as invalid (e.g. a Send too long)
  kLocalQpOperationError,   // the local QP hit an internal consistency error
  kBadResponse,             // the peer's response was of an unexpected transport opcode
};
std::string_view wc_status_name(WcStatus s);

struct WorkCompletion {
  std::uint64_t wr_id = 0;
  WcOpcode opcode = WcOpcode::kSend;
  WcStatus status = WcStatus::kSuccess;
  std::uint32_t byte_len = 0;                   // received length (kRecv) or message length
  bool solicited = false;                        // kRecv of a Send with Solicited Event
  std::optional<std::uint32_t> invalidated_stag; // kRecv of a Send with Invalidate
  std::optional<wire::TerminateCause> terminate; // the Terminate behind an error status
};

}  // namespace rdma_interop::rdmap
