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
  }
  return "unknown";
}

}  // namespace rdma_interop::rdmap
