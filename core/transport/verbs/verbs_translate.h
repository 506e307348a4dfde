// verbs_translate.h - our work requests, access rights and completion statuses to and from
// libibverbs' (infiniband/verbs.h). Pure functions: the whole mapping is unit-tested on
// hosts without an RDMA device.
//
// Completion status (ibv_wc_status -> rdmap::WcStatus):
//   IBV_WC_SUCCESS                 success
//   IBV_WC_LOC_LEN_ERR             local_length_error
//   IBV_WC_LOC_QP_OP_ERR           local_qp_operation_error
//   IBV_WC_LOC_PROT_ERR            local_protection_error
//   IBV_WC_LOC_ACCESS_ERR          local_protection_error  (inbound Write-with-Immediate
//                                                           hit a bad local buffer)
//   IBV_WC_MW_BIND_ERR             local_protection_error  (we bind no memory windows)
//   IBV_WC_WR_FLUSH_ERR            flushed
//   IBV_WC_BAD_RESP_ERR            bad_response
//   IBV_WC_REM_INV_REQ_ERR         remote_invalid_request
//   IBV_WC_REM_ACCESS_ERR          remote_access_error
//   IBV_WC_REM_OP_ERR              remote_operation_error
//   IBV_WC_REM_ABORT_ERR           remote_operation_error
//   IBV_WC_RETRY_EXC_ERR           retry_exceeded
//   IBV_WC_RNR_RETRY_EXC_ERR       rnr_retry_exceeded
//   everything else                fatal_error  (RD/EEC, tag matching, FATAL, GENERAL,
//                                                RESP_TIMEOUT: not produced by an RC QP
//                                                without those features, or unrecoverable)
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/rdmap/memory_registry.h"
#include "core/rdmap/work_request.h"

namespace rdma_interop::transport::verbs {

// `status` is an enum ibv_wc_status value.
rdmap::WcStatus wc_status_from_ibv(int status);
// "IBV_WC_RETRY_EXC_ERR" for reports (ibv_wc_status_str says "transport retry counter
// exceeded", which does not name the constant people search for).
std::string_view ibv_wc_status_constant(int status);

// An enum ibv_wc_opcode to ours; nullopt for opcodes we never post (atomics, binds, TSO).
// Only meaningful on successful completions (verbs leaves it undefined on errors).
std::optional<rdmap::WcOpcode> wc_opcode_from_ibv(int opcode);

// The completion opcode a posted work request produces.
rdmap::WcOpcode wc_opcode_of(rdmap::WrOpcode opcode);

// rdmap::Access bits to ibv_access_flags. Remote write implies local write: verbs refuses a
// region that may be written remotely but not locally (ibv_reg_mr: EINVAL).
int ibv_access_from(std::uint32_t access);

// The ibv_wr_opcode and ibv_send_flags bits (without SIGNALED) for a work request:
// Send / Send with Invalidate, with IBV_SEND_SOLICITED for the Solicited Event kinds.
struct IbvSendKind {
  int opcode = 0;      // enum ibv_wr_opcode
  unsigned flags = 0;  // IBV_SEND_SOLICITED or 0
};
IbvSendKind ibv_send_kind(rdmap::WrOpcode opcode);

}  // namespace rdma_interop::transport::verbs
