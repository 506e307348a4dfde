"""What a completed work request was and how it ended (core/rdmap/work_request.h), as the
package's enums: what the bound ``WorkCompletion`` hands out (``wc.status is WcStatus.SUCCESS``).
``rdma_interop.provider`` re-exports them; this module imports nothing from the extension, so
the extension's stub can name them.
"""

from __future__ import annotations

import enum

__all__ = ["WcOpcode", "WcStatus"]


class WcOpcode(enum.Enum):
    """What a completed work request was (ibv_wc_opcode)."""

    SEND = "send"
    RDMA_WRITE = "rdma_write"
    RDMA_READ = "rdma_read"
    RECV = "recv"


class WcStatus(str, enum.Enum):
    """How a work request ended (ibv_wc_status); the values are the C++ wc_status_name."""

    SUCCESS = "success"
    LOCAL_LENGTH_ERROR = "local_length_error"  # a received Send did not fit the buffer
    LOCAL_PROTECTION_ERROR = "local_protection_error"  # lkey, bounds or rights check failed
    REMOTE_ACCESS_ERROR = "remote_access_error"  # the peer sent a remote protection Terminate
    REMOTE_OPERATION_ERROR = "remote_operation_error"  # the peer sent another Terminate
    FATAL_ERROR = "fatal_error"  # the connection failed (Terminate sent or received, reset)
    FLUSHED = "flushed"  # the queue pair went to error before this request ran
    # Reported by the verbs provider (IB/RoCE transport errors, from ibv_wc_status):
    RETRY_EXCEEDED = "retry_exceeded"  # no ACK after retry_count transport retries
    RNR_RETRY_EXCEEDED = "rnr_retry_exceeded"  # the peer had no receive posted, rnr_retry times
    REMOTE_INVALID_REQUEST = "remote_invalid_request"
    LOCAL_QP_OPERATION_ERROR = "local_qp_operation_error"
    BAD_RESPONSE = "bad_response"
