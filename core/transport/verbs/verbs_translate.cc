#include "core/transport/verbs/verbs_translate.h"

#include <infiniband/verbs.h>

namespace rdma_interop::transport::verbs {

using rdmap::WcOpcode;
using rdmap::WcStatus;
using rdmap::WrOpcode;

WcStatus wc_status_from_ibv(int status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return WcStatus::kSuccess;
    case IBV_WC_LOC_LEN_ERR:
      return WcStatus::kLocalLengthError;
    case IBV_WC_LOC_QP_OP_ERR:
      return WcStatus::kLocalQpOperationError;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_MW_BIND_ERR:
      return WcStatus::kLocalProtectionError;
    case IBV_WC_WR_FLUSH_ERR:
      return WcStatus::kFlushed;
    case IBV_WC_BAD_RESP_ERR:
      return WcStatus::kBadResponse;
    case IBV_WC_REM_INV_REQ_ERR:
      return WcStatus::kRemoteInvalidRequest;
    case IBV_WC_REM_ACCESS_ERR:
      return WcStatus::kRemoteAccessError;
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_ABORT_ERR:
      return WcStatus::kRemoteOperationError;
    case IBV_WC_RETRY_EXC_ERR:
      return WcStatus::kRetryExceeded;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return WcStatus::kRnrRetryExceeded;
    default:
      return WcStatus::kFatalError;
  }
}

std::string_view ibv_wc_status_constant(int status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR:
      return "IBV_WC_LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR:
      return "IBV_WC_MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR:
      return "IBV_WC_BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR:
      return "IBV_WC_LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR:
      return "IBV_WC_LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return "IBV_WC_REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR:
      return "IBV_WC_REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR:
      return "IBV_WC_INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR:
      return "IBV_WC_INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR:
      return "IBV_WC_FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR:
      return "IBV_WC_RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR:
      return "IBV_WC_GENERAL_ERR";
    case IBV_WC_TM_ERR:
      return "IBV_WC_TM_ERR";
    case IBV_WC_TM_RNDV_INCOMPLETE:
      return "IBV_WC_TM_RNDV_INCOMPLETE";
    default:
      return "IBV_WC_(unknown)";
  }
}

std::optional<WcOpcode> wc_opcode_from_ibv(int opcode) {
  switch (opcode) {
    case IBV_WC_SEND:
      return WcOpcode::kSend;
    case IBV_WC_RDMA_WRITE:
      return WcOpcode::kRdmaWrite;
    case IBV_WC_RDMA_READ:
      return WcOpcode::kRdmaRead;
    case IBV_WC_RECV:
      return WcOpcode::kRecv;
    default:
      return std::nullopt;
  }
}

WcOpcode wc_opcode_of(WrOpcode opcode) {
  switch (opcode) {
    case WrOpcode::kRdmaWrite:
      return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead:
      return WcOpcode::kRdmaRead;
    case WrOpcode::kSend:
    case WrOpcode::kSendWithInvalidate:
    case WrOpcode::kSendWithSolicitedEvent:
    case WrOpcode::kSendWithSolicitedEventAndInvalidate:
      return WcOpcode::kSend;
  }
  return WcOpcode::kSend;
}

int ibv_access_from(std::uint32_t access) {
  int flags = 0;
  if ((access & rdmap::kLocalWrite) != 0) flags |= IBV_ACCESS_LOCAL_WRITE;
  if ((access & rdmap::kRemoteWrite) != 0)
    flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if ((access & rdmap::kRemoteRead) != 0) flags |= IBV_ACCESS_REMOTE_READ;
  return flags;
}

IbvSendKind ibv_send_kind(WrOpcode opcode) {
  switch (opcode) {
    case WrOpcode::kSend:
      return {IBV_WR_SEND, 0};
    case WrOpcode::kSendWithInvalidate:
      return {IBV_WR_SEND_WITH_INV, 0};
    case WrOpcode::kSendWithSolicitedEvent:
      return {IBV_WR_SEND, IBV_SEND_SOLICITED};
    case WrOpcode::kSendWithSolicitedEventAndInvalidate:
      return {IBV_WR_SEND_WITH_INV, IBV_SEND_SOLICITED};
    case WrOpcode::kRdmaWrite:
      return {IBV_WR_RDMA_WRITE, 0};
    case WrOpcode::kRdmaRead:
      return {IBV_WR_RDMA_READ, 0};
  }
  return {IBV_WR_SEND, 0};
}

}  // namespace rdma_interop::transport::verbs
