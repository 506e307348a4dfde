"""A raw-socket iWARP initiator that misbehaves on purpose, for fault cases against a kernel
responder (rping -s on kernel siw).

It speaks MPA byte by byte with rdma_interop.wire (as tests/faults/scripted_peer.py does):
an MPA Request (revision 2, IRD/ORD, optional peer-to-peer with an RTR type, CRC on or
off, and optionally reserved bits or a wrong key), reads the Reply, sends the RTR, and
then sends any FPDU, good or deliberately broken (bad CRC, truncated, bad STag...). It
reads back whatever comes: FPDUs, each kept as its raw octets and decoded (Read Requests,
Sends, Terminates), and the end of the stream (FIN or RST), with timeouts.

No state machine guards what we send: the point is to send what a correct peer never
would. The client keeps only what it needs to make *valid* messages when asked (the
MSNs of its Send and Read Request queues, RFC 5041 s4.4: both start at 1).

    c = FaultClient.connect("127.0.0.1", guest.host_port(7001))
    reply = c.handshake(RequestOptions())          # Request, Reply, settle, RTR
    c.send_message(c.send_fpdu(RDMA_INFO.pack(0x1000, 0xabcd0100, 64)))
    rr = c.expect_read_request(timeout=10)         # rping's server reads our "buffer"
    c.send_raw(c.fpdu(c.write_ulpdu(0xdead0000, 0, b"x" * 16)))  # invalid STag
    obs = c.observe(timeout=10)                    # FPDUs (a Terminate?) and FIN/RST

The host reaches the guest only through 127.0.0.1 and qemu's hostfwd (tests/support/guest.py).
Through qemu's user-mode network the host sees the guest's TCP teardown as qemu's slirp
replays it on the host socket: an RST from the guest may arrive as a FIN, so ``fin`` and
``rst`` are what the host socket saw, not necessarily what the guest kernel sent.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Callable, Literal

from rdma_interop.wire import (
    DdpHeader,
    DdpSegment,
    FpduEncoder,
    MpaEnhanced,
    MpaFrame,
    MpaKind,
    RdmapOpcode,
    ReadRequest,
    WireError,
)

#: rping's struct rping_rdma_info: __be64 buf; __be32 rkey; __be32 size (librdmacm/examples/rping.c).
RDMA_INFO = struct.Struct(">QII")

#: Kernel siw, as MPA responder, sends its Reply and only then lets the QP take the socket
#: (siw_cm.c siw_accept(): siw_send_mpareqrep(), then siw_qp_socket_assoc()); an FPDU
#: landing in between sits unread until the next TCP segment (see rping_peer.py). We hold
#: the RTR this long after the Reply, so each fault is processed when it arrives.
SETTLE_AFTER_REPLY_S = 0.2

#: MPA ULPDU_Length (RFC 5044 s4.1) and CRC (always on the wire; zero when CRC is off).
_LEN = 2
_CRC = 4
_UNTAGGED_HEADER = 18
_TAGGED_HEADER = 14

RtrType = Literal["send", "write", "read"]


class FaultClientError(RuntimeError):
    """The exchange could not get to the point where the fault was to be injected."""


@dataclass(frozen=True)
class RequestOptions:
    """Our MPA Request. Defaults: the initiator personality the host's rping tests use
    (tools/personalities/siw.json: revision 2, IRD/ORD 16/16, CRC) with peer-to-peer and a
    zero-length Write RTR, so that there *is* an RTR step to misbehave around."""

    revision: int = 2
    crc: bool = True
    markers: bool = False
    peer_to_peer: bool = True
    rtr: RtrType = "write"
    ird: int = 16
    ord: int = 16
    private_data: bytes = b""
    #: RFC 5044 s7.1 Res bits (the four low flag bits); must be zero on a correct frame.
    reserved_bits: int = 0
    #: Replaces the 16-octet key ("MPA ID Req Frame") when set.
    key: bytes | None = None

    def frame(self) -> MpaFrame:
        enhanced = None
        if self.revision == 2:
            enhanced = MpaEnhanced(
                peer_to_peer=self.peer_to_peer,
                rtr_send=self.peer_to_peer and self.rtr == "send",
                rtr_write=self.peer_to_peer and self.rtr == "write",
                rtr_read=self.peer_to_peer and self.rtr == "read",
                ird=self.ird, ord=self.ord)
        return MpaFrame(MpaKind.REQUEST, markers=self.markers, crc=self.crc,
                        revision=self.revision, enhanced=enhanced,
                        private_data=self.private_data, reserved_bits=self.reserved_bits)

    def encode(self) -> bytes:
        data = self.frame().encode()
        if self.key is not None:
            if len(self.key) != 16:
                raise ValueError("an MPA key is 16 octets")
            data = self.key + data[16:]
        return data


@dataclass(frozen=True)
class ReceivedFpdu:
    """One FPDU from the peer, as it arrived and as we read it."""

    raw: bytes  # ULPDU_Length, ULPDU, pad, CRC: the octets on the wire (no markers)
    ulpdu: bytes
    #: None with CRC off; False when the CRC does not match (a finding of its own).
    crc_ok: bool | None
    segment: DdpSegment | None  # None when the DDP/RDMAP header does not decode
    decode_error: str | None
    at_s: float  # seconds since the TCP connection was made

    @property
    def opcode(self) -> RdmapOpcode | None:
        """The RDMAP opcode, read straight from the control octet (even if decoding failed)."""
        if len(self.ulpdu) < 2:
            return None
        try:
            return RdmapOpcode(self.ulpdu[1] & 0x0F)
        except ValueError:
            return None

    @property
    def is_terminate(self) -> bool:
        return self.opcode is RdmapOpcode.TERMINATE and not self.ulpdu[0] & 0x80

    def describe(self) -> str:
        if self.segment is not None:
            text = str(self.segment.header)
        else:
            text = f"undecodable ULPDU ({self.decode_error})"
        if self.crc_ok is False:
            text += " [bad CRC]"
        return f"{text} ({len(self.ulpdu)} octets)"


@dataclass(frozen=True)
class StreamEnd:
    """How the byte stream from the peer ended, as the host socket saw it."""

    kind: Literal["fin", "rst"]
    at_s: float
    #: Octets that arrived but did not complete an FPDU (or an MPA frame).
    leftover: bytes = b""


@dataclass
class Observation:
    """What came back after a step: FPDUs in order and, if it ended, how the stream ended."""

    fpdus: list[ReceivedFpdu] = field(default_factory=list)
    end: StreamEnd | None = None
    waited_s: float = 0.0

    @property
    def terminates(self) -> list[ReceivedFpdu]:
        return [f for f in self.fpdus if f.is_terminate]

    def describe(self) -> str:
        parts = [f.describe() for f in self.fpdus]
        if self.end is not None:
            parts.append(f"{self.end.kind.upper()} after {self.end.at_s:.2f} s"
                         + (f" ({len(self.end.leftover)} stray octets)" if self.end.leftover else ""))
        else:
            parts.append(f"connection still open after {self.waited_s:.1f} s")
        return "; ".join(parts)


@dataclass(frozen=True)
class ReadRequestSeen:
    """A peer's RDMA Read Request: its DDP header and body (its own sink STag, TO, length)."""

    header: DdpHeader
    body: ReadRequest
    fpdu: ReceivedFpdu


class FaultClient:
    """One TCP connection to an MPA responder, driven step by step."""

    def __init__(self, sock: socket.socket, *, settle_s: float = SETTLE_AFTER_REPLY_S) -> None:
        self.sock = sock
        self.settle_s = settle_s
        self.t0 = time.monotonic()
        self.request: MpaFrame | None = None
        self.request_bytes = b""
        self.reply: MpaFrame | None = None
        self.reply_bytes = b""
        self._buf = b""
        self._end: StreamEnd | None = None
        self._encoder: FpduEncoder | None = None
        self.crc = False
        # RFC 5041 s4.4: each untagged queue's MSN starts at 1.
        self.next_send_msn = 1
        self.next_read_msn = 1
        #: Every FPDU received so far, whichever call read it.
        self.received: list[ReceivedFpdu] = []

    # -- connection ----------------------------------------------------------------------

    @classmethod
    def connect(cls, host: str, port: int, *, timeout: float = 10.0,
                settle_s: float = SETTLE_AFTER_REPLY_S) -> FaultClient:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, settle_s=settle_s)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> FaultClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stream_end(self) -> StreamEnd | None:
        """How the peer's stream ended, once it has (None while it is open)."""
        return self._end

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # -- MPA connection setup (RFC 5044 s7.1, RFC 6581 s3) --------------------------------

    def send_request(self, options: RequestOptions) -> None:
        self.request = options.frame()
        self.request_bytes = options.encode()
        self.sock.sendall(self.request_bytes)

    def read_reply(self, timeout: float = 10.0) -> MpaFrame:
        """The responder's MPA Reply, decoded leniently (reserved bits kept, so the caller
        can check them). Raises FaultClientError if the stream ends or times out first, or
        the octets are not an MPA Reply."""
        deadline = time.monotonic() + timeout
        header_len = MpaFrame.HEADER_LEN
        while len(self._buf) < header_len:
            if not self._fill(deadline):
                raise FaultClientError(self._why_no("MPA Reply header", timeout))
        try:
            length = MpaFrame.frame_length(self._buf[:header_len], reject_reserved_bits=False)
        except WireError as e:
            raise FaultClientError(f"not an MPA Reply: {e} ({self._buf[:header_len].hex()})") from e
        while len(self._buf) < length:
            if not self._fill(deadline):
                raise FaultClientError(self._why_no("MPA Reply private data", timeout))
        raw, self._buf = self._buf[:length], self._buf[length:]
        frame = MpaFrame.decode(raw, reject_reserved_bits=False)
        if frame.kind is not MpaKind.REPLY:
            raise FaultClientError(f"got an MPA {frame.kind.value}, not a Reply: {raw.hex()}")
        self.reply, self.reply_bytes = frame, raw
        assert self.request is not None
        self.crc = self.request.crc or frame.crc  # RFC 5044 s7.1: CRC if either asks
        self._encoder = FpduEncoder(crc=self.crc)
        return frame

    @property
    def rtr(self) -> RtrType | None:
        """The RTR type the Reply chose (RFC 6581 s3), or None without peer-to-peer."""
        r = self.reply
        if r is None or r.enhanced is None or not r.peer_to_peer:
            return None
        if r.rtr_write:
            return "write"
        if r.rtr_read:
            return "read"
        if r.rtr_send:
            return "send"
        return None

    def rtr_ulpdu(self) -> bytes:
        """The zero-length RTR message of the chosen type (RFC 6581 s3)."""
        rtr = self.rtr
        if rtr == "write":
            return DdpSegment(DdpHeader.rdma_write(0, 0)).encode()
        if rtr == "read":
            return self.read_request_ulpdu(ReadRequest())
        if rtr == "send":
            return self.send_ulpdu(b"")
        raise FaultClientError("the Reply chose no RTR (no peer-to-peer), so there is none to send")

    def send_rtr(self) -> None:
        self.send_raw(self.fpdu(self.rtr_ulpdu()))

    def handshake(self, options: RequestOptions, *, send_rtr: bool = True,
                  timeout: float = 10.0) -> MpaFrame:
        """Request, Reply, a short settle (SETTLE_AFTER_REPLY_S) and the RTR if one was
        negotiated; raises FaultClientError if the responder did not accept."""
        self.send_request(options)
        reply = self.read_reply(timeout)
        if reply.reject:
            raise FaultClientError(f"the responder rejected the connection: {reply}")
        time.sleep(self.settle_s)
        if send_rtr and self.rtr is not None:
            self.send_rtr()
        return reply

    # -- building messages (each call that makes a valid message uses up its MSN) ----------

    def fpdu(self, ulpdu: bytes) -> bytes:
        """The FPDU framing `ulpdu` (RFC 5044 s4.1: length, pad, CRC32c)."""
        if self._encoder is None:
            raise FaultClientError("no FPDU before the MPA Reply")
        return self._encoder.encode(ulpdu)

    @staticmethod
    def corrupt_crc(fpdu: bytes) -> bytes:
        """The same FPDU with its CRC field inverted: a CRC mismatch on any CRC."""
        return fpdu[:-_CRC] + bytes(b ^ 0xFF for b in fpdu[-_CRC:])

    def send_ulpdu(self, payload: bytes, *, msn: int | None = None, last: bool = True) -> bytes:
        """A Send (untagged, QN 0); takes the next Send MSN unless `msn` is given."""
        if msn is None:
            msn = self.next_send_msn
            self.next_send_msn += 1
        return DdpSegment(DdpHeader.send(msn, last=last), payload).encode()

    def read_request_ulpdu(self, body: ReadRequest, *, msn: int | None = None) -> bytes:
        """An RDMA Read Request (untagged, QN 1); takes the next Read MSN unless given."""
        if msn is None:
            msn = self.next_read_msn
            self.next_read_msn += 1
        return DdpSegment(DdpHeader.read_request(msn), body.encode()).encode()

    @staticmethod
    def write_ulpdu(stag: int, to: int, payload: bytes) -> bytes:
        return DdpSegment(DdpHeader.rdma_write(stag, to), payload).encode()

    @staticmethod
    def read_response_ulpdu(stag: int, to: int, payload: bytes) -> bytes:
        return DdpSegment(DdpHeader.read_response(stag, to), payload).encode()

    # -- sending -------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown_write(self) -> None:
        """Our FIN: the peer sees the stream end; we can still read its answer."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    # -- receiving -----------------------------------------------------------------------

    def _fill(self, deadline: float) -> bool:
        """Reads more octets into the buffer; False at the end of the stream or deadline."""
        if self._end is not None:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except (TimeoutError, socket.timeout):
            return False
        except (ConnectionResetError, BrokenPipeError):
            self._end = StreamEnd("rst", self.elapsed(), self._buf)
            return False
        if not chunk:
            self._end = StreamEnd("fin", self.elapsed(), self._buf)
            return False
        self._buf += chunk
        return True

    def _why_no(self, what: str, timeout: float) -> str:
        if self._end is not None:
            extra = f", after {self._end.leftover.hex()}" if self._end.leftover else ""
            return f"the responder ended the stream ({self._end.kind.upper()}) before the {what}{extra}"
        return f"no {what} within {timeout:g} s"

    def _take_fpdu(self) -> ReceivedFpdu | None:
        """Splits one complete FPDU off the buffer (no markers: RFC 5044 s4.1 framing)."""
        if len(self._buf) < _LEN:
            return None
        ulpdu_len = struct.unpack_from(">H", self._buf)[0]
        total = _LEN + ulpdu_len + (-(_LEN + ulpdu_len) % 4) + _CRC
        if len(self._buf) < total:
            return None
        raw, self._buf = self._buf[:total], self._buf[total:]
        ulpdu = raw[_LEN:_LEN + ulpdu_len]
        crc_ok: bool | None = None
        if self.crc:
            # The CRC32c our encoder puts on the same ULPDU (the one siw accepts from us).
            crc_ok = FpduEncoder(crc=True).encode(ulpdu)[-_CRC:] == raw[-_CRC:]
        segment: DdpSegment | None = None
        error: str | None = None
        try:
            segment = DdpSegment.decode(ulpdu)
        except WireError as e:
            error = str(e)
        fpdu = ReceivedFpdu(raw, ulpdu, crc_ok, segment, error, self.elapsed())
        self.received.append(fpdu)
        return fpdu

    def observe(self, timeout: float, *,
                until: Callable[[ReceivedFpdu], bool] | None = None,
                linger_s: float = 0.0) -> Observation:
        """Reads FPDUs for up to `timeout` seconds or until the stream ends.

        `until`: stop early at the first FPDU it accepts. `linger_s`: after that FPDU (or
        after a Terminate when `until` is None), keep reading this long for what follows
        (more FPDUs, the close)."""
        obs = Observation()
        start = time.monotonic()
        deadline = start + timeout
        stop_at: float | None = None
        while True:
            while (fpdu := self._take_fpdu()) is not None:
                obs.fpdus.append(fpdu)
                hit = until(fpdu) if until is not None else fpdu.is_terminate
                if hit and stop_at is None:
                    stop_at = time.monotonic() + linger_s
                    if until is not None and linger_s == 0:
                        obs.waited_s = time.monotonic() - start
                        return obs
            limit = deadline if stop_at is None else min(deadline, stop_at)
            if not self._fill(limit):
                break
        obs.end = self._end
        obs.waited_s = time.monotonic() - start
        return obs

    def expect(self, what: str, accept: Callable[[ReceivedFpdu], bool],
               timeout: float) -> ReceivedFpdu:
        """The next FPDU `accept` takes; FaultClientError (naming everything seen instead)
        if the stream ends, the timeout passes or a Terminate comes first."""
        obs = self.observe(timeout, until=lambda f: accept(f) or f.is_terminate)
        if obs.fpdus and accept(obs.fpdus[-1]):
            return obs.fpdus[-1]
        seen = obs.describe() if obs.fpdus or obs.end else f"nothing within {timeout:g} s"
        raise FaultClientError(f"expected {what}; got {seen}")

    def expect_read_request(self, timeout: float = 10.0) -> ReadRequestSeen:
        f = self.expect("an RDMA Read Request",
                        lambda f: f.segment is not None
                        and f.segment.header.opcode is RdmapOpcode.RDMA_READ_REQUEST, timeout)
        assert f.segment is not None
        return ReadRequestSeen(f.segment.header, ReadRequest.decode(f.segment.payload), f)

    def expect_send(self, timeout: float = 10.0) -> DdpSegment:
        f = self.expect("a Send", lambda f: f.segment is not None
                        and f.segment.header.opcode is RdmapOpcode.SEND, timeout)
        assert f.segment is not None
        return f.segment


# ---- rping's server side, as far as the fault cases need it ------------------------------

#: Where our pretend buffers live: the server only ever echoes these back to us.
OUR_SOURCE = (0x0000_1000, 0x00AB_CD00)  # (TO, STag) of the "start" buffer rping reads
RPING_SIZE = 64  # rping's default -S, the size of the server's rdma_buf and its MR


def ping_data(size: int = RPING_SIZE) -> bytes:
    """What rping's client puts in its start buffer for ping 0 (rping_test_client)."""
    text = b"rdma-ping-0: "
    data = bytearray(size)
    data[: len(text)] = text
    c = 65
    for i in range(len(text), size):
        data[i] = c
        c = 65 if c >= 122 else c + 1
    data[size - 1] = 0
    return bytes(data)


def start_ping(client: FaultClient, timeout: float = 15.0) -> ReadRequestSeen:
    """Sends rping's start advertisement (a 16-octet Send naming OUR_SOURCE) and waits for
    the server's RDMA Read Request, which carries the server's own valid sink STag and TO
    (rping.c rping_test_server: the Read lands in its rdma_buf, registered with remote
    read and write access, RPING_SIZE octets)."""
    to, stag = OUR_SOURCE
    client.send_raw(client.fpdu(client.send_ulpdu(RDMA_INFO.pack(to, stag, RPING_SIZE))))
    return client.expect_read_request(timeout)


def answer_read(client: FaultClient, rr: ReadRequestSeen, timeout: float = 15.0) -> DdpSegment:
    """Answers the server's Read with rping's ping data and waits for its go-ahead Send."""
    data = ping_data(rr.body.size)
    client.send_raw(client.fpdu(client.read_response_ulpdu(
        rr.body.sink_stag, rr.body.sink_tagged_offset, data)))
    return client.expect_send(timeout)
