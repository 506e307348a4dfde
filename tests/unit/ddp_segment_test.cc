// DDP segments (RFC 5041 s4) with the RDMAP control octet (RFC 5040 s4.2, opcodes s4.3).
//   octet 0: T=80 L=40 Rsvd=3c DV=03 (DV 1)      octet 1: RV=c0 (RV 1 -> 40) Rsv=30 Opcode=0f
//   tagged:   STag(4) TO(8)                       -> 14 octets
//   untagged: RsvdULP/Invalidate STag(4) QN(4) MSN(4) MO(4) -> 18 octets
// Queues (RFC 5040 s5.1): Sends on QN 0, Read Requests on QN 1, Terminate on QN 2.
#include "core/wire/ddp_segment.h"

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <string>

#include "wire_test_util.h"

namespace rdma_interop::wire {
namespace {

using testing::Bytes;
using testing::hex;
using testing::to_hex;

Bytes encode_header(const DdpHeader& h) {
  std::array<std::uint8_t, kDdpUntaggedHeaderLen> buf{};
  const std::size_t n = encode_ddp_header(h, buf);
  EXPECT_EQ(n, h.length());
  return Bytes(buf.begin(), buf.begin() + n);
}

Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct DdpVector {
  std::string name;
  DdpHeader header;
  const char* header_hex;
  Bytes payload;
};

void expect_vector(const DdpVector& v) {
  SCOPED_TRACE(v.name);
  const Bytes header_bytes = hex(v.header_hex);
  EXPECT_EQ(to_hex(encode_header(v.header)), to_hex(header_bytes));
  const Bytes ulpdu = concat(header_bytes, v.payload);
  auto decoded = decode_ddp_segment(ulpdu);
  ASSERT_TRUE(decoded.has_value()) << error_name(decoded.error());
  EXPECT_EQ(decoded->header, v.header) << to_string(decoded->header);
  EXPECT_EQ(Bytes(decoded->payload.begin(), decoded->payload.end()), v.payload);
  // The payload is a view into the ULPDU, right after the header.
  EXPECT_EQ(decoded->payload.data(), ulpdu.data() + header_bytes.size());
}

void expect_decode_error(const Bytes& ulpdu, WireError want) {
  auto decoded = decode_ddp_segment(ulpdu);
  ASSERT_FALSE(decoded.has_value()) << "decoded " << to_string(decoded->header);
  EXPECT_EQ(error_name(decoded.error()), error_name(want));
}

const Bytes kReadRequestBody = hex("0a0b0c0d 1122334455667788 00001000 deadbeef 0000000000000040");

// ---- Every opcode ---------------------------------------------------------------------------

TEST(DdpSegmentVectors, RdmaWriteIsTaggedWithSinkStagAndOffset) {
  DdpHeader last{.tagged = true,
                 .last = true,
                 .opcode = RdmapOpcode::kRdmaWrite,
                 .stag = 0x11223344,
                 .tagged_offset = 0x0102030405060708};
  EXPECT_EQ(rdma_write_header(0x11223344, 0x0102030405060708, true), last);
  expect_vector({"write last", last, "c1 40 11223344 0102030405060708", hex("de ad")});

  DdpHeader middle = rdma_write_header(0x11223344, 0x0102030405060708, false);
  EXPECT_FALSE(middle.last);
  expect_vector({"write middle", middle, "81 40 11223344 0102030405060708", hex("be ef")});
}

TEST(DdpSegmentVectors, ReadRequestIsUntaggedOnQueueOneWithA28OctetBody) {
  DdpHeader h{.tagged = false,
              .last = true,
              .opcode = RdmapOpcode::kRdmaReadRequest,
              .queue_number = kQnReadRequest,
              .msn = 7,
              .message_offset = 0};
  EXPECT_EQ(read_request_header(7), h);
  expect_vector({"read request", h, "41 41 00000000 00000001 00000007 00000000", kReadRequestBody});
}

TEST(DdpSegmentVectors, ReadResponseIsTaggedWithSinkStagAndOffset) {
  DdpHeader h{.tagged = true,
              .last = true,
              .opcode = RdmapOpcode::kRdmaReadResponse,
              .stag = 0xaabbccdd,
              .tagged_offset = 0x10};
  EXPECT_EQ(read_response_header(0xaabbccdd, 0x10, true), h);
  expect_vector({"read response", h, "c1 42 aabbccdd 0000000000000010", hex("01 02 03")});
  expect_vector({"read response middle", read_response_header(0xaabbccdd, 0x10, false),
                 "81 42 aabbccdd 0000000000000010", hex("01 02 03")});
}

TEST(DdpSegmentVectors, SendIsUntaggedOnQueueZero) {
  DdpHeader h{.tagged = false, .last = true, .opcode = RdmapOpcode::kSend, .msn = 3};
  EXPECT_EQ(send_header(3, 0, true), h);
  expect_vector({"send", h, "41 43 00000000 00000000 00000003 00000000", hex("48 69")});
  DdpHeader middle = send_header(3, 0x100, false);
  EXPECT_EQ(middle.message_offset, 0x100u);
  expect_vector({"send middle", middle, "01 43 00000000 00000000 00000003 00000100", hex("48 69")});
}

TEST(DdpSegmentVectors, SendWithInvalidateCarriesTheStagInRsvdUlp) {
  DdpHeader h{.tagged = false,
              .last = true,
              .opcode = RdmapOpcode::kSendWithInvalidate,
              .invalidate_stag = 0x12345678,
              .msn = 4};
  EXPECT_EQ(send_header(4, 0, true, false, 0x12345678u), h);
  expect_vector({"send inv", h, "41 44 12345678 00000000 00000004 00000000", hex("00")});
}

TEST(DdpSegmentVectors, SendWithSolicitedEvent) {
  DdpHeader h{
      .tagged = false, .last = true, .opcode = RdmapOpcode::kSendWithSolicitedEvent, .msn = 5};
  EXPECT_EQ(send_header(5, 0, true, true), h);
  expect_vector({"send se", h, "41 45 00000000 00000000 00000005 00000000", hex("aa")});
}

TEST(DdpSegmentVectors, SendWithSolicitedEventAndInvalidate) {
  DdpHeader h{.tagged = false,
              .last = true,
              .opcode = RdmapOpcode::kSendWithSolicitedEventAndInvalidate,
              .invalidate_stag = 0x9abcdef0,
              .msn = 6};
  EXPECT_EQ(send_header(6, 0, true, true, 0x9abcdef0u), h);
  expect_vector({"send se inv", h, "41 46 9abcdef0 00000000 00000006 00000000", hex("bb")});
}

TEST(DdpSegmentVectors, TerminateIsUntaggedOnQueueTwo) {
  DdpHeader h{.tagged = false,
              .last = true,
              .opcode = RdmapOpcode::kTerminate,
              .queue_number = kQnTerminate,
              .msn = 9};
  EXPECT_EQ(terminate_header(9), h);
  expect_vector({"terminate", h, "41 47 00000000 00000002 00000009 00000000", hex("20 02 00 00")});
}

TEST(DdpSegmentVectors, EmptyPayloadIsAZeroLengthMessage) {
  // RFC 6581 zero-length Send and Write RTRs are header-only segments.
  expect_vector(
      {"zero send", send_header(0, 0, true), "41 43 00000000 00000000 00000000 00000000", {}});
  expect_vector(
      {"zero write", rdma_write_header(0, 0, true), "c1 40 00000000 0000000000000000", {}});
}

TEST(DdpSegmentVectors, WrongVersionsAreEncodedAsGivenForNegativeTests) {
  DdpHeader h = send_header(1, 0, true);
  h.ddp_version = 2;
  h.rdmap_version = 2;
  EXPECT_EQ(to_hex(encode_header(h)), to_hex(hex("42 83 00000000 00000000 00000001 00000000")));
}

// ---- Opcode table ---------------------------------------------------------------------------

TEST(DdpOpcodes, BufferModelQueueAndNameFollowRfc5040Table) {
  EXPECT_TRUE(opcode_is_tagged(RdmapOpcode::kRdmaWrite));
  EXPECT_TRUE(opcode_is_tagged(RdmapOpcode::kRdmaReadResponse));
  for (RdmapOpcode op :
       {RdmapOpcode::kRdmaReadRequest, RdmapOpcode::kSend, RdmapOpcode::kSendWithInvalidate,
        RdmapOpcode::kSendWithSolicitedEvent, RdmapOpcode::kSendWithSolicitedEventAndInvalidate,
        RdmapOpcode::kTerminate}) {
    EXPECT_FALSE(opcode_is_tagged(op)) << opcode_name(op);
  }
  EXPECT_EQ(opcode_queue_number(RdmapOpcode::kRdmaReadRequest), kQnReadRequest);
  EXPECT_EQ(opcode_queue_number(RdmapOpcode::kTerminate), kQnTerminate);
  for (RdmapOpcode op :
       {RdmapOpcode::kSend, RdmapOpcode::kSendWithInvalidate, RdmapOpcode::kSendWithSolicitedEvent,
        RdmapOpcode::kSendWithSolicitedEventAndInvalidate}) {
    EXPECT_EQ(opcode_queue_number(op), kQnSend) << opcode_name(op);
  }
  std::set<std::string> names;
  for (int raw = 0; raw < 16; ++raw) {
    EXPECT_EQ(opcode_is_reserved(static_cast<std::uint8_t>(raw)), raw >= 8) << raw;
    if (raw < 8) {
      const std::string name(opcode_name(static_cast<RdmapOpcode>(raw)));
      EXPECT_FALSE(name.empty());
      EXPECT_TRUE(names.insert(name).second) << name;
    }
  }
}

// ---- Decode errors --------------------------------------------------------------------------

TEST(DdpSegmentDecodeErrors, TruncatedTaggedAndUntaggedHeaders) {
  expect_decode_error({}, WireError::kDdpTruncated);
  expect_decode_error(hex("c1"), WireError::kDdpTruncated);
  expect_decode_error(hex("c1 40 11223344 01020304050607"), WireError::kDdpTruncated);  // 13
  expect_decode_error(hex("41 43 00000000 00000000 00000003 000000"),
                      WireError::kDdpTruncated);  // 17
}

TEST(DdpSegmentDecodeErrors, BadDdpVersionOnTaggedSegment) {
  expect_decode_error(hex("c2 40 11223344 0102030405060708"), WireError::kDdpTaggedBadVersion);
  expect_decode_error(hex("c0 40 11223344 0102030405060708"), WireError::kDdpTaggedBadVersion);
  expect_decode_error(hex("c3 42 11223344 0102030405060708"), WireError::kDdpTaggedBadVersion);
}

TEST(DdpSegmentDecodeErrors, BadDdpVersionOnUntaggedSegment) {
  expect_decode_error(hex("42 43 00000000 00000000 00000003 00000000"),
                      WireError::kDdpUntaggedBadVersion);
  expect_decode_error(hex("40 43 00000000 00000000 00000003 00000000"),
                      WireError::kDdpUntaggedBadVersion);
}

TEST(DdpSegmentDecodeErrors, BadRdmapVersion) {
  expect_decode_error(hex("41 83 00000000 00000000 00000003 00000000"),
                      WireError::kRdmapBadVersion);
  expect_decode_error(hex("41 03 00000000 00000000 00000003 00000000"),
                      WireError::kRdmapBadVersion);
  expect_decode_error(hex("c1 c0 11223344 0102030405060708"), WireError::kRdmapBadVersion);
}

TEST(DdpSegmentDecodeErrors, ReservedOpcodesEightToFifteen) {
  for (int op = 8; op < 16; ++op) {
    SCOPED_TRACE(op);
    char untagged[64], tagged[48];
    std::snprintf(untagged, sizeof untagged, "41 %02x 00000000 00000000 00000000 00000000",
                  0x40 | op);
    std::snprintf(tagged, sizeof tagged, "c1 %02x 11223344 0102030405060708", 0x40 | op);
    expect_decode_error(hex(untagged), WireError::kRdmapBadOpcode);
    expect_decode_error(hex(tagged), WireError::kRdmapBadOpcode);
  }
}

TEST(DdpSegmentDecodeErrors, OpcodeOnTheWrongBufferModel) {
  // Untagged opcodes in a tagged segment.
  expect_decode_error(hex("c1 43 11223344 0102030405060708"),
                      WireError::kRdmapOpcodeWrongBufferModel);
  expect_decode_error(hex("c1 41 11223344 0102030405060708"),
                      WireError::kRdmapOpcodeWrongBufferModel);
  expect_decode_error(hex("c1 47 11223344 0102030405060708"),
                      WireError::kRdmapOpcodeWrongBufferModel);
  // Tagged opcodes in an untagged segment.
  expect_decode_error(hex("41 40 00000000 00000000 00000000 00000000"),
                      WireError::kRdmapOpcodeWrongBufferModel);
  expect_decode_error(hex("41 42 00000000 00000000 00000000 00000000"),
                      WireError::kRdmapOpcodeWrongBufferModel);
}

TEST(DdpSegmentDecodeErrors, QueueNumberThatDoesNotMatchTheOpcode) {
  expect_decode_error(hex("41 43 00000000 00000001 00000000 00000000"),
                      WireError::kDdpInvalidQueueNumber);
  expect_decode_error(hex("41 43 00000000 00000002 00000000 00000000"),
                      WireError::kDdpInvalidQueueNumber);
  expect_decode_error(hex("41 45 00000000 00000003 00000000 00000000"),
                      WireError::kDdpInvalidQueueNumber);
  expect_decode_error(hex("41 44 00000000 ffffffff 00000000 00000000"),
                      WireError::kDdpInvalidQueueNumber);
  expect_decode_error(concat(hex("41 41 00000000 00000000 00000000 00000000"), kReadRequestBody),
                      WireError::kDdpInvalidQueueNumber);
  expect_decode_error(hex("41 47 00000000 00000000 00000000 00000000 20 02 00 00"),
                      WireError::kDdpInvalidQueueNumber);
}

TEST(DdpSegmentDecodeErrors, ReadRequestBodyMustBeExactly28Octets) {
  const Bytes header = hex("41 41 00000000 00000001 00000000 00000000");
  Bytes short_body(kReadRequestBody.begin(), kReadRequestBody.end() - 1);
  Bytes long_body = concat(kReadRequestBody, hex("00"));
  expect_decode_error(concat(header, short_body), WireError::kRdmapReadRequestBadLength);
  expect_decode_error(concat(header, long_body), WireError::kRdmapReadRequestBadLength);
  expect_decode_error(header, WireError::kRdmapReadRequestBadLength);
}

TEST(DdpSegmentDecodeErrors, ReadRequestAndTerminateMustBeASingleLastSegment) {
  expect_decode_error(concat(hex("01 41 00000000 00000001 00000000 00000000"), kReadRequestBody),
                      WireError::kRdmapSingleSegmentRequired);
  expect_decode_error(hex("01 47 00000000 00000002 00000000 00000000 20 02 00 00"),
                      WireError::kRdmapSingleSegmentRequired);
  // L set but not the first segment of its message.
  expect_decode_error(concat(hex("41 41 00000000 00000001 00000000 0000001c"), kReadRequestBody),
                      WireError::kRdmapSingleSegmentRequired);
}

TEST(DdpSegmentToString, MentionsTheOpcode) {
  EXPECT_FALSE(to_string(send_header(1, 0, true)).empty());
  EXPECT_NE(to_string(rdma_write_header(1, 2, true)), to_string(send_header(1, 0, true)));
}

}  // namespace
}  // namespace rdma_interop::wire
