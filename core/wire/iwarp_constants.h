// iwarp_constants.h - every iWARP wire constant, named as the RFCs name them.
//
// One header for MPA (RFC 5044, updated by RFC 6581), DDP (RFC 5041) and RDMAP (RFC 5040),
// with the section each value comes from. Codecs include this; nothing else defines a
// protocol number.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace rdma_interop::wire {

// ---- MPA Request/Reply frames, RFC 5044 s7.1 -------------------------------------------
inline constexpr std::size_t kMpaKeyLen = 16;
inline constexpr std::array<std::uint8_t, kMpaKeyLen> kMpaRequestKey = {
    'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e'};
inline constexpr std::array<std::uint8_t, kMpaKeyLen> kMpaReplyKey = {
    'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ', 'F', 'r', 'a', 'm', 'e'};
// Key, one flags octet, Rev, PD_Length.
inline constexpr std::size_t kMpaHeaderLen = kMpaKeyLen + 4;
// Flags octet (octet 16): M, C, R, then reserved bits (RFC 5044 s7.1).
inline constexpr std::uint8_t kMpaFlagMarkers = 0x80;
inline constexpr std::uint8_t kMpaFlagCrc = 0x40;
inline constexpr std::uint8_t kMpaFlagReject = 0x20;
// RFC 6581 s3 enhanced connection establishment: the first reserved bit says "IRD/ORD
// words follow at the front of the private data" (Linux siw: MPA_RR_FLAG_ENHANCED, cxgb4:
// MPA_ENHANCED_RDMA_CONN). Only meaningful with Rev 2.
inline constexpr std::uint8_t kMpaFlagEnhanced = 0x10;
inline constexpr std::uint8_t kMpaFlagReservedMask = 0x0f;
// Vendor uses of the reserved bits, recognised so a receiver reports them as extensions rather
// than refusing them (no RFC defines them):
//  - Linux siw's GSO experiment, MPA_RR_FLAG_GSO_EXP 0x0800 over the flags and Rev octets
//    (drivers/infiniband/sw/siw/iwarp.h): flags bit 0x08, set and honoured only when siw is
//    built with try_gso (a compile-time false in Linux 6.18).
//  - Chelsio's proposal on linux-rdma (K. Eraparaju, 2020-04-28, "Re: [RFC PATCH] RDMA/siw:
//    Experimental e2e negotiation of GSO usage", never merged): flags bits 0x0c announce the
//    largest FPDU the sender accepts, 0x04 16K, 0x08 32K (siw's GSO bit reused), 0x0c 64K.
inline constexpr std::uint8_t kMpaFlagGsoExp = 0x08;
inline constexpr std::uint8_t kMpaFlagFpduSizeMask = 0x0c;
inline constexpr std::uint8_t kMpaFpduSize16k = 0x04;
inline constexpr std::uint8_t kMpaFpduSize32k = 0x08;
inline constexpr std::uint8_t kMpaFpduSize64k = 0x0c;
// The reserved bits no vendor is known to use: what a strict receiver still refuses.
inline constexpr std::uint8_t kMpaFlagUnusedReservedMask = 0x03;
inline constexpr std::uint8_t kMpaRevision1 = 1;  // RFC 5044
inline constexpr std::uint8_t kMpaRevision2 = 2;  // RFC 6581
// Alibaba erdma's own revision (drivers/infiniband/hw/erdma/erdma_cm.h MPA_REVISION_EXT_1):
// no RFC 6581 words; instead an 8-octet extension {be32 cookie, be32 bits} follows the
// 20-octet header and is not counted in PD_Length (erdma_send_mpareqrep, erdma_recv_mpa_rr).
// The low 4 bits of `bits` name the congestion control (enum erdma_cc_alg, NEWRENO = 0).
inline constexpr std::uint8_t kMpaRevisionErdma = 129;
inline constexpr std::size_t kErdmaExtensionLen = 8;
inline constexpr std::uint32_t kErdmaCcMask = 0x0000000f;
// RFC 5044 s7.1: PD_Length MUST NOT exceed 512. Linux siw and cxgb4 cap at 256
// (RDMA_MAX_PRIVATE_DATA), which is why the limit is a decode option.
inline constexpr std::size_t kMpaMaxPrivateDataRfc = 512;
inline constexpr std::size_t kMpaMaxPrivateDataLinux = 256;

// ---- RFC 6581 s3: IRD/ORD words at the front of the private data -----------------------
inline constexpr std::size_t kMpaEnhancedParamsLen = 4;  // 16-bit IRD word, 16-bit ORD word
inline constexpr std::uint16_t kMpaIrdOrdMask = 0x3fff;  // 14-bit IRD and ORD
// IRD word: A = peer-to-peer, B = zero-length Send (FPDU) RTR.
inline constexpr std::uint16_t kMpaIrdPeerToPeer = 0x8000;
inline constexpr std::uint16_t kMpaIrdRtrSend = 0x4000;
// ORD word: C = zero-length RDMA Write RTR, D = zero-length RDMA Read RTR.
inline constexpr std::uint16_t kMpaOrdRtrWrite = 0x8000;
inline constexpr std::uint16_t kMpaOrdRtrRead = 0x4000;

// ---- FPDU framing, RFC 5044 s4-s6 ------------------------------------------------------
inline constexpr std::size_t kUlpduLengthLen = 2;    // s4.1 ULPDU_Length
inline constexpr std::size_t kFpduAlignment = 4;     // s4.1 PAD to a multiple of 4 octets
inline constexpr std::size_t kCrcLen = 4;            // s4.1 CRC32c
inline constexpr std::size_t kMarkerInterval = 512;  // s4.3 every 512 octets of TCP sequence
inline constexpr std::size_t kMarkerLen = 4;         // s4.3 16 reserved bits + FPDUPTR
inline constexpr std::uint16_t kMaxUlpduLength = 0xffff;

// ---- DDP, RFC 5041 s4 ------------------------------------------------------------------
inline constexpr std::uint8_t kDdpVersion = 1;        // s4.2 DV
inline constexpr std::uint8_t kDdpFlagTagged = 0x80;  // s4.2 T
inline constexpr std::uint8_t kDdpFlagLast = 0x40;    // s4.2 L
inline constexpr std::uint8_t kDdpReservedMask = 0x3c;
inline constexpr std::uint8_t kDdpVersionMask = 0x03;
// s4.3/s4.4 header lengths including the 16-bit DDP control field (MPA's ULPDU_Length
// is not part of the DDP header).
inline constexpr std::size_t kDdpTaggedHeaderLen = 14;    // ctrl(2) STag(4) TO(8)
inline constexpr std::size_t kDdpUntaggedHeaderLen = 18;  // ctrl(2) RsvdULP(4) QN MSN MO

// ---- RDMAP, RFC 5040 s4 ----------------------------------------------------------------
inline constexpr std::uint8_t kRdmapVersion = 1;  // s4.2 RV
inline constexpr std::uint8_t kRdmapVersionMask = 0xc0;
inline constexpr std::uint8_t kRdmapReservedMask = 0x30;
inline constexpr std::uint8_t kRdmapOpcodeMask = 0x0f;

// s4.3 opcodes.
enum class RdmapOpcode : std::uint8_t {
  kRdmaWrite = 0x0,
  kRdmaReadRequest = 0x1,
  kRdmaReadResponse = 0x2,
  kSend = 0x3,
  kSendWithInvalidate = 0x4,
  kSendWithSolicitedEvent = 0x5,
  kSendWithSolicitedEventAndInvalidate = 0x6,
  kTerminate = 0x7,
};

// s5.1 untagged queue numbers.
inline constexpr std::uint32_t kQnSend = 0;
inline constexpr std::uint32_t kQnReadRequest = 1;
inline constexpr std::uint32_t kQnTerminate = 2;

// s4.4 RDMA Read Request body: sink STag(4) sink TO(8) size(4) source STag(4) source TO(8).
inline constexpr std::size_t kReadRequestBodyLen = 28;

// ---- Terminate, RFC 5040 s4.8, codes RFC 5040 s7, RFC 5041 s7, RFC 5044 s8, RFC 6581 s5 --
inline constexpr std::size_t kTerminateControlLen = 4;
inline constexpr std::uint8_t kTermHdrCtrlM = 0x80;  // DDP Segment Length valid
inline constexpr std::uint8_t kTermHdrCtrlD = 0x40;  // terminated DDP header included
inline constexpr std::uint8_t kTermHdrCtrlR = 0x20;  // terminated RDMAP header included
inline constexpr std::uint8_t kTermHdrCtrlReservedMask = 0x1f;
inline constexpr std::size_t kTermDdpSegmentLengthLen = 2;

enum class TermLayer : std::uint8_t { kRdmap = 0x0, kDdp = 0x1, kLlp = 0x2 };

// RDMAP error types (layer 0).
inline constexpr std::uint8_t kRdmapEtypeLocalCatastrophic = 0x0;
inline constexpr std::uint8_t kRdmapEtypeRemoteProtection = 0x1;
inline constexpr std::uint8_t kRdmapEtypeRemoteOperation = 0x2;
// RDMAP error codes.
inline constexpr std::uint8_t kRdmapCodeInvalidStag = 0x00;
inline constexpr std::uint8_t kRdmapCodeBaseOrBounds = 0x01;
inline constexpr std::uint8_t kRdmapCodeAccessRights = 0x02;
inline constexpr std::uint8_t kRdmapCodeStagNotAssociated = 0x03;
inline constexpr std::uint8_t kRdmapCodeToWrap = 0x04;
inline constexpr std::uint8_t kRdmapCodeInvalidVersion = 0x05;
inline constexpr std::uint8_t kRdmapCodeUnexpectedOpcode = 0x06;
inline constexpr std::uint8_t kRdmapCodeCatastrophicStream = 0x07;
inline constexpr std::uint8_t kRdmapCodeCatastrophicGlobal = 0x08;
inline constexpr std::uint8_t kRdmapCodeCannotInvalidate = 0x09;
inline constexpr std::uint8_t kRdmapCodeUnspecified = 0xff;

// DDP error types (layer 1).
inline constexpr std::uint8_t kDdpEtypeLocalCatastrophic = 0x0;
inline constexpr std::uint8_t kDdpEtypeTaggedBuffer = 0x1;
inline constexpr std::uint8_t kDdpEtypeUntaggedBuffer = 0x2;
// DDP tagged buffer codes.
inline constexpr std::uint8_t kDdpTaggedCodeInvalidStag = 0x00;
inline constexpr std::uint8_t kDdpTaggedCodeBaseOrBounds = 0x01;
inline constexpr std::uint8_t kDdpTaggedCodeStagNotAssociated = 0x02;
inline constexpr std::uint8_t kDdpTaggedCodeToWrap = 0x03;
inline constexpr std::uint8_t kDdpTaggedCodeInvalidVersion = 0x04;
// DDP untagged buffer codes.
inline constexpr std::uint8_t kDdpUntaggedCodeInvalidQn = 0x01;
inline constexpr std::uint8_t kDdpUntaggedCodeNoBuffer = 0x02;  // invalid MSN, no buffer
inline constexpr std::uint8_t kDdpUntaggedCodeMsnRange = 0x03;
inline constexpr std::uint8_t kDdpUntaggedCodeInvalidMo = 0x04;
inline constexpr std::uint8_t kDdpUntaggedCodeMessageTooLong = 0x05;
inline constexpr std::uint8_t kDdpUntaggedCodeInvalidVersion = 0x06;

// LLP (MPA) error type and codes (layer 2).
inline constexpr std::uint8_t kMpaEtype = 0x0;
inline constexpr std::uint8_t kMpaCodeTcpConnectionLost = 0x01;
inline constexpr std::uint8_t kMpaCodeCrcError = 0x02;
inline constexpr std::uint8_t kMpaCodeMarkerMismatch = 0x03;  // marker and ULPDU_Length mismatch
inline constexpr std::uint8_t kMpaCodeInvalidRequestReply = 0x04;
// RFC 6581 s5 enhanced connection establishment errors.
inline constexpr std::uint8_t kMpaCodeLocalCatastrophic = 0x05;
inline constexpr std::uint8_t kMpaCodeInsufficientIrd = 0x06;
inline constexpr std::uint8_t kMpaCodeNoMatchingRtr = 0x07;

}  // namespace rdma_interop::wire
