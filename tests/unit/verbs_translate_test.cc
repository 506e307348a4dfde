// The verbs provider's translation tables: ibv_wc_status to our completion statuses (the
// table in verbs_translate.h, row by row), opcodes and access rights, and the stable names
// the new statuses are reported by.
#include "core/transport/verbs/verbs_translate.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <set>
#include <string>

#include "core/rdmap/memory_registry.h"
#include "core/rdmap/work_request.h"

namespace rdma_interop::transport::verbs {
namespace {

using rdmap::WcOpcode;
using rdmap::WcStatus;
using rdmap::WrOpcode;

TEST(VerbsTranslate, EveryIbvStatusHasItsRow) {
  const std::pair<int, WcStatus> table[] = {
      {IBV_WC_SUCCESS, WcStatus::kSuccess},
      {IBV_WC_LOC_LEN_ERR, WcStatus::kLocalLengthError},
      {IBV_WC_LOC_QP_OP_ERR, WcStatus::kLocalQpOperationError},
      {IBV_WC_LOC_EEC_OP_ERR, WcStatus::kFatalError},
      {IBV_WC_LOC_PROT_ERR, WcStatus::kLocalProtectionError},
      {IBV_WC_WR_FLUSH_ERR, WcStatus::kFlushed},
      {IBV_WC_MW_BIND_ERR, WcStatus::kLocalProtectionError},
      {IBV_WC_BAD_RESP_ERR, WcStatus::kBadResponse},
      {IBV_WC_LOC_ACCESS_ERR, WcStatus::kLocalProtectionError},
      {IBV_WC_REM_INV_REQ_ERR, WcStatus::kRemoteInvalidRequest},
      {IBV_WC_REM_ACCESS_ERR, WcStatus::kRemoteAccessError},
      {IBV_WC_REM_OP_ERR, WcStatus::kRemoteOperationError},
      {IBV_WC_RETRY_EXC_ERR, WcStatus::kRetryExceeded},
      {IBV_WC_RNR_RETRY_EXC_ERR, WcStatus::kRnrRetryExceeded},
      {IBV_WC_LOC_RDD_VIOL_ERR, WcStatus::kFatalError},
      {IBV_WC_REM_INV_RD_REQ_ERR, WcStatus::kFatalError},
      {IBV_WC_REM_ABORT_ERR, WcStatus::kRemoteOperationError},
      {IBV_WC_INV_EECN_ERR, WcStatus::kFatalError},
      {IBV_WC_INV_EEC_STATE_ERR, WcStatus::kFatalError},
      {IBV_WC_FATAL_ERR, WcStatus::kFatalError},
      {IBV_WC_RESP_TIMEOUT_ERR, WcStatus::kFatalError},
      {IBV_WC_GENERAL_ERR, WcStatus::kFatalError},
      {IBV_WC_TM_ERR, WcStatus::kFatalError},
      {IBV_WC_TM_RNDV_INCOMPLETE, WcStatus::kFatalError},
  };
  for (const auto& [ibv, ours] : table) {
    EXPECT_EQ(wc_status_from_ibv(ibv), ours) << ibv_wc_status_constant(ibv);
    EXPECT_NE(ibv_wc_status_constant(ibv), "IBV_WC_(unknown)") << ibv;
  }
  EXPECT_EQ(wc_status_from_ibv(1000), WcStatus::kFatalError);
}

TEST(VerbsTranslate, StatusNamesAreStableAndDistinct) {
  EXPECT_EQ(rdmap::wc_status_name(WcStatus::kRetryExceeded), "retry_exceeded");
  EXPECT_EQ(rdmap::wc_status_name(WcStatus::kRnrRetryExceeded), "rnr_retry_exceeded");
  EXPECT_EQ(rdmap::wc_status_name(WcStatus::kRemoteInvalidRequest), "remote_invalid_request");
  EXPECT_EQ(rdmap::wc_status_name(WcStatus::kLocalQpOperationError), "local_qp_operation_error");
  EXPECT_EQ(rdmap::wc_status_name(WcStatus::kBadResponse), "bad_response");
  // The statuses the tcp provider already reported keep their names and numbers.
  EXPECT_EQ(rdmap::wc_status_name(WcStatus::kRemoteAccessError), "remote_access_error");
  EXPECT_EQ(static_cast<int>(WcStatus::kFlushed), 6);
  std::set<std::string_view> names;
  for (int s = 0; s <= static_cast<int>(WcStatus::kBadResponse); ++s) {
    const auto name = rdmap::wc_status_name(static_cast<WcStatus>(s));
    EXPECT_NE(name, "unknown") << s;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<std::size_t>(WcStatus::kBadResponse) + 1);
}

TEST(VerbsTranslate, Opcodes) {
  EXPECT_EQ(wc_opcode_from_ibv(IBV_WC_SEND), WcOpcode::kSend);
  EXPECT_EQ(wc_opcode_from_ibv(IBV_WC_RDMA_WRITE), WcOpcode::kRdmaWrite);
  EXPECT_EQ(wc_opcode_from_ibv(IBV_WC_RDMA_READ), WcOpcode::kRdmaRead);
  EXPECT_EQ(wc_opcode_from_ibv(IBV_WC_RECV), WcOpcode::kRecv);
  EXPECT_FALSE(wc_opcode_from_ibv(IBV_WC_COMP_SWAP).has_value());
  EXPECT_EQ(wc_opcode_of(WrOpcode::kSendWithSolicitedEventAndInvalidate), WcOpcode::kSend);
  EXPECT_EQ(wc_opcode_of(WrOpcode::kRdmaRead), WcOpcode::kRdmaRead);

  EXPECT_EQ(ibv_send_kind(WrOpcode::kSend).opcode, IBV_WR_SEND);
  EXPECT_EQ(ibv_send_kind(WrOpcode::kSend).flags, 0u);
  EXPECT_EQ(ibv_send_kind(WrOpcode::kSendWithInvalidate).opcode, IBV_WR_SEND_WITH_INV);
  EXPECT_EQ(ibv_send_kind(WrOpcode::kSendWithSolicitedEvent).flags,
            static_cast<unsigned>(IBV_SEND_SOLICITED));
  const auto both = ibv_send_kind(WrOpcode::kSendWithSolicitedEventAndInvalidate);
  EXPECT_EQ(both.opcode, IBV_WR_SEND_WITH_INV);
  EXPECT_EQ(both.flags, static_cast<unsigned>(IBV_SEND_SOLICITED));
  EXPECT_EQ(ibv_send_kind(WrOpcode::kRdmaWrite).opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(ibv_send_kind(WrOpcode::kRdmaRead).opcode, IBV_WR_RDMA_READ);
}

TEST(VerbsTranslate, RemoteWriteImpliesLocalWrite) {
  EXPECT_EQ(ibv_access_from(0), 0);
  EXPECT_EQ(ibv_access_from(rdmap::kLocalWrite), IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(ibv_access_from(rdmap::kRemoteRead), IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(ibv_access_from(rdmap::kRemoteWrite), IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(ibv_access_from(rdmap::kLocalWrite | rdmap::kRemoteWrite | rdmap::kRemoteRead),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

}  // namespace
}  // namespace rdma_interop::transport::verbs
