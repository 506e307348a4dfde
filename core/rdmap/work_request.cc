#include "core/rdmap/work_request.h"

namespace rdma_interop::rdmap {

std::string_view wc_status_name(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess: return "success";
    case WcStatus::kLocalLengthError: return "local_length_error";
    case WcStatus::kLocalProtectionError: return "local_protection_error";
    case WcStatus::kRemoteAccessError: return "remote_access_error";
    case WcStatus::kRemoteOperationError: return "remote_operation_error";
    case WcStatus::kFatalError: return "fatal_error";
    case WcStatus::kFlushed: return "flushed";
    case WcStatus::kRetryExceeded: return "retry_exceeded";
    case WcStatus::kRnrRetryExceeded: return "rnr_retry_exceeded";
    case WcStatus::kRemoteInvalidRequest: return "remote_invalid_request";
    case WcStatus::kLocalQpOperationError: return "local_qp_operation_error";
    case WcStatus::kBadResponse: return "bad_response";
  }
  return "unknown";
}

}  // namespace rdma_interop::rdmap
