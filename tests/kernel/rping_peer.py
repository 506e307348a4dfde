"""rping's application protocol spoken over our tcp provider, in both roles.

rdma-core's ``librdmacm/examples/rping.c`` runs this loop per iteration ("ping"):

    client: Send  rping_rdma_info{buf, rkey, size} of its *start* buffer (the source)
    server: RDMA Read of `size` octets from it into its own buffer
    server: Send  16 octets "go ahead" (the server's send buffer, never filled: zeros)
    client: Send  rping_rdma_info of its *sink* buffer (`rdma_buf`)
    server: RDMA Write strlen(buffer) + 1 octets into the sink
    server: Send  "go ahead"
    client: (with -V) sink == start

``rping_rdma_info`` is ``be64 buf, be32 rkey, be32 size`` (16 octets); both sides check
that every received Send is exactly 16 octets. The client fills its start buffer with
"rdma-ping-<i>: " followed by letters cycling through 'A'..'z' from a per-iteration start
letter, and a final NUL (so the server's strlen()+1 Write covers the whole buffer).

:func:`run_client` plays the client against a kernel ``rping -s``; :func:`serve_one`
plays the server for a kernel ``rping -c``. Both return an :class:`RpingResult` with the
connection's negotiated parameters (ConnectionInfo), or raise :class:`RpingError` naming
the step that failed and why (completion status, Terminate, connection state).

Against kernel siw as server, give the client a policy with first_fpdu_delay_ms
(guest.SIW_FIRST_FPDU_DELAY_MS): siw ignores an FPDU that lands while it hands its socket to
the QP after its MPA Reply (core/cm/mpa_policy.h), and our stack holds the RTR, or the
first Send, for that long.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any

from rdma_interop.provider import (
    Access,
    ConnectError,
    Connection,
    ConnectionInfo,
    ConnectionState,
    InitialRecv,
    Listener,
    MpaPolicy,
    Provider,
    QpCaps,
    Rtr,
    WcOpcode,
    WorkCompletion,
    WrOpcode,
)
from rdma_interop.wire import MpaFrame

#: struct rping_rdma_info: __be64 buf; __be32 rkey; __be32 size.
RDMA_INFO = struct.Struct(">QII")
#: rping's default ping size (-S), and the largest it allows (RPING_BUFSIZE - 1).
DEFAULT_SIZE = 64
MAX_SIZE = 64 * 1024 - 1
#: Receives kept posted, as rping's max_recv_wr.
RECV_SLOTS = 2


_WR_SEND_ADV = 1
_WR_READ = 2
_WR_WRITE = 3
_WR_GO_AHEAD = 4
_WR_RECV = 100  # + slot, receives into the registered recv buffer
_WR_EARLY = 1100  # + slot, receives posted with the connection (QpCaps.initial_recvs)


class RpingError(Exception):
    """A step of the rping exchange failed.

    Attributes:
        step: what we were doing ("connect", "recv start advertisement", "rdma read"...).
        iteration: the ping number (0-based), or None before the loop.
        detail: one sentence for a human.
        completion: the failed completion, if one said so.
        connect_error: the ConnectError, when the step was connection setup.
        info: the connection's ConnectionInfo when it was established.
        state: the connection state when the step failed.
        terminate_received: str() of the Terminate the peer sent, if any.
        terminate_sent: str() of the Terminate we sent, if any.
    """

    def __init__(self, step: str, detail: str, *, iteration: int | None = None,
                 completion: WorkCompletion | None = None,
                 connect_error: ConnectError | None = None, info: ConnectionInfo | None = None,
                 state: ConnectionState | None = None, terminate_received: str | None = None,
                 terminate_sent: str | None = None) -> None:
        where = f"iteration {iteration}: " if iteration is not None else ""
        super().__init__(f"rping {where}{step}: {detail}")
        self.step = step
        self.iteration = iteration
        self.detail = detail
        self.completion = completion
        self.connect_error = connect_error
        self.info = info
        self.state = state
        self.terminate_received = terminate_received
        self.terminate_sent = terminate_sent


@dataclass
class RpingResult:
    """A finished exchange: who we were, what was negotiated, what was verified."""

    role: str  # "client" or "server"
    info: ConnectionInfo
    iterations: int
    size: int
    bytes_verified: int
    first_fpdu_delay_ms: int = 0
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def negotiated(self) -> dict[str, Any]:
        """Our side's view, as rdma-probe's JSON "negotiated" object."""
        return self.info.params.to_json()

    @property
    def peer_negotiated(self) -> dict[str, Any]:
        """The kernel side's view, as far as its MPA frame states it."""
        return frame_view(self.info.received_frame, self.info.sent_frame)

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "local_address": self.info.local_address,
            "peer_address": self.info.peer_address,
            "negotiated": self.negotiated,
            "peer_negotiated": self.peer_negotiated,
            "sent_frame": frame_hex(self.info.sent_frame),
            "received_frame": frame_hex(self.info.received_frame),
            "iterations": self.iterations,
            "size": self.size,
            "bytes_verified": self.bytes_verified,
            "first_fpdu_delay_ms": self.first_fpdu_delay_ms,
            "elapsed_s": round(self.elapsed_s, 3),
        }


def rping_start_buffer(ping: int, size: int) -> bytes:
    """What rping's client puts in its start buffer for ping number `ping` (rping.c
    rping_test_client): "rdma-ping-<ping>: ", letters from a start letter that advances
    one per ping through 'A'..'z' (65..122), each octet the next letter, then a NUL."""
    text = f"rdma-ping-{ping}: ".encode()[: size]
    buf = bytearray(size)
    buf[: len(text)] = text
    c = 65 + ping % (122 - 65 + 1)
    for i in range(len(text), size):
        buf[i] = c
        c = 65 if c >= 122 else c + 1
    buf[size - 1] = 0
    return bytes(buf)


def frame_view(frame: MpaFrame, other: MpaFrame) -> dict[str, Any]:
    """A side's parameters as its own MPA frame states them (`other` is the peer's frame),
    shaped like rdma-probe's "negotiated" object: for the kernel, whose view we cannot ask."""
    rtr = None
    if frame.enhanced is not None and frame.peer_to_peer:
        chosen = [n for n, on in (("send", frame.rtr_send), ("write", frame.rtr_write),
                                  ("read", frame.rtr_read)) if on]
        rtr = ",".join(chosen) or None
    return {
        "source": f"its MPA {frame.kind.value}",
        "revision": frame.revision,
        "crc": frame.crc or other.crc,
        "markers_to_peer": other.markers,
        "markers_from_peer": frame.markers,
        "enhanced": frame.enhanced is not None,
        "peer_to_peer": bool(frame.peer_to_peer),
        "rtr": rtr,
        "ird": frame.ird,
        "ord": frame.ord,
        "peer_ird": other.ird,
        "peer_ord": other.ord,
    }


def frame_hex(frame: MpaFrame) -> str:
    """The frame's wire bytes in hex (re-encoded from the decoded frame, which is
    byte-exact for any frame our decoder accepts)."""
    return frame.encode().hex()


# ---- the shared machinery -------------------------------------------------------------


class _Endpoint:
    """One connection with rping's buffers, and bounded waits for its completions."""

    def __init__(self, conn: Connection, size: int, early: list[bytearray],
                 timeout_s: float) -> None:
        self.conn = conn
        self.early = early
        self.size = size
        self.timeout_s = timeout_s
        rw = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE
        self.start = bytearray(size)  # client: RDMA Read source
        self.start_mr = conn.register(self.start, rw)
        self.rdma = bytearray(size)  # client: Write sink; server: Read sink
        self.rdma_mr = conn.register(self.rdma, rw)
        self.send_buf = bytearray(RDMA_INFO.size)
        self.send_mr = conn.register(self.send_buf, Access.LOCAL_WRITE)
        self.recv_buf = bytearray(RDMA_INFO.size * len(early))
        self.recv_mr = conn.register(self.recv_buf, Access.LOCAL_WRITE)
        self.pending: list[WorkCompletion] = []
        self.iteration: int | None = None

    def fail(self, step: str, detail: str, completion: WorkCompletion | None = None) -> RpingError:
        term_r = self.conn.terminate_received
        term_s = self.conn.terminate_sent
        state = self.conn.state
        if state is not ConnectionState.CONNECTED:
            detail += f" (connection {state.value}: {self.conn.error_detail})"
        return RpingError(step, detail, iteration=self.iteration, completion=completion,
                          info=self.conn.info, state=state,
                          terminate_received=None if term_r is None else str(term_r),
                          terminate_sent=None if term_s is None else str(term_s))

    def wait(self, opcode: WcOpcode, step: str) -> WorkCompletion:
        """The next completion of `opcode` (others are kept for later); RpingError on an
        error completion, a dead connection or the timeout."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            for wc in self.pending:
                if not wc.ok:
                    self.pending.remove(wc)
                    raise self.fail(step, f"{wc.opcode.value} completion {wc.status.value}"
                                    + (f", Terminate {wc.terminate}" if wc.terminate else ""), wc)
                if wc.opcode is opcode:
                    self.pending.remove(wc)
                    return wc
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.fail(step, f"no {opcode.value} completion within {self.timeout_s:g} s")
            got = self.conn.poll_completions(max=16, timeout_ms=int(min(left, 0.2) * 1000) + 1)
            self.pending += got
            if not got and self.conn.state is not ConnectionState.CONNECTED:
                raise self.fail(step, f"connection ended before the {opcode.value} completion")

    def recv_info(self, step: str) -> tuple[int, int, int]:
        wc = self.wait(WcOpcode.RECV, step)
        if wc.byte_len != RDMA_INFO.size:
            raise self.fail(step, f"received {wc.byte_len} octets, rping sends {RDMA_INFO.size}")
        if wc.wr_id >= _WR_EARLY:
            # An early receive is used once; a registered slot takes its place.
            slot = wc.wr_id - _WR_EARLY
            data = bytes(self.early[slot])
        else:
            slot = wc.wr_id - _WR_RECV
            data = bytes(self.recv_buf[slot * RDMA_INFO.size:(slot + 1) * RDMA_INFO.size])
        self.conn.post_recv(self.recv_mr, slot * RDMA_INFO.size, RDMA_INFO.size,
                            wr_id=_WR_RECV + slot)
        buf, rkey, size = RDMA_INFO.unpack(data)
        return int(buf), int(rkey), int(size)

    def send_info(self, buf: int, rkey: int, size: int, step: str) -> None:
        RDMA_INFO.pack_into(self.send_buf, 0, buf, rkey, size)
        self.conn.post_send(WrOpcode.SEND, self.send_mr, 0, RDMA_INFO.size, wr_id=_WR_SEND_ADV)
        self.wait(WcOpcode.SEND, step)


def _initial_recvs(slots: int) -> tuple[tuple[InitialRecv, ...], list[bytearray]]:
    """One 16-octet receive per slot, posted before the first FPDU can arrive (as rping
    posts its receive before rdma_connect/rdma_accept)."""
    bufs = [bytearray(RDMA_INFO.size) for _ in range(slots)]
    return tuple(InitialRecv(b, wr_id=_WR_EARLY + i) for i, b in enumerate(bufs)), bufs


# ---- client: we connect to `rping -s` ----------------------------------------------------


def run_client(provider: Provider, uri: str, policy: MpaPolicy, *, count: int = 1,
               size: int = DEFAULT_SIZE, private_data: bytes = b"",
               timeout_s: float = 20.0) -> RpingResult:
    """Connects to an rping server at `uri` and runs `count` pings of `size` octets.

    Raises RpingError (step "connect" with ``connect_error`` set when setup failed)."""
    if not 16 <= size <= MAX_SIZE:
        raise ValueError(f"rping sizes are 16..{MAX_SIZE}")
    early_wrs, early_bufs = _initial_recvs(RECV_SLOTS)
    t0 = time.monotonic()
    try:
        conn = provider.connect(uri, policy, private_data,
                                QpCaps(initial_recvs=early_wrs), timeout_ms=int(timeout_s * 1000))
    except ConnectError as e:
        raise RpingError("connect", f"{e.failure or e.kind}: {e.detail or e}",
                         connect_error=e) from e
    try:
        info = conn.info
        ep = _Endpoint(conn, size, early_bufs, timeout_s)
        verified = 0
        for ping in range(count):
            ep.iteration = ping
            want = rping_start_buffer(ping, size)
            ep.start[:] = want
            ep.rdma[:size] = bytes(size)
            # A region is advertised by its tagged offset (0 on the tcp provider, the
            # address on verbs), which is what the server names it by.
            ep.send_info(ep.start_mr.tagged_offset, ep.start_mr.stag, size, "send start advertisement")
            ep.recv_info("recv go-ahead after the server's RDMA Read")
            ep.send_info(ep.rdma_mr.tagged_offset, ep.rdma_mr.stag, size, "send sink advertisement")
            ep.recv_info("recv go-ahead after the server's RDMA Write")
            got = bytes(ep.rdma[:size])
            if got != want:
                first = next(i for i in range(size) if got[i] != want[i])
                raise ep.fail("verify sink", f"sink differs from start at octet {first}: "
                              f"{got[first:first + 16]!r} != {want[first:first + 16]!r}")
            verified += size
        conn.disconnect()
        return RpingResult("client", info, count, size, verified, policy.first_fpdu_delay_ms,
                           time.monotonic() - t0)
    except BaseException:
        conn.disconnect(timeout_ms=200)
        raise


# ---- server: `rping -c` connects to us ---------------------------------------------------


def serve_one(listener: Listener, *, count: int = 1, private_data: bytes = b"",
              timeout_s: float = 20.0) -> RpingResult:
    """Accepts the next connection on `listener` and serves rping's protocol for `count`
    pings (the client's data checked against rping's pattern), then waits for the client
    to disconnect. Raises RpingError."""
    t0 = time.monotonic()
    pending = listener.next_request(timeout_ms=int(timeout_s * 1000))
    if pending is None:
        failures = listener.take_setup_failures()
        detail = "; ".join(f"{peer}: {err.failure or err.kind}: {err.detail}"
                           for peer, err, _ in failures) or "no MPA Request arrived"
        raise RpingError("accept", f"no connection within {timeout_s:g} s ({detail})")
    early_wrs, early_bufs = _initial_recvs(RECV_SLOTS)
    try:
        conn = pending.accept(private_data, QpCaps(initial_recvs=early_wrs))
    except ConnectError as e:
        raise RpingError("accept", f"{e.failure or e.kind}: {e.detail or e}",
                         connect_error=e) from e
    try:
        info = conn.info
        ep = _Endpoint(conn, MAX_SIZE, early_bufs, timeout_s)
        verified = 0
        size = 0
        for ping in range(count):
            ep.iteration = ping
            addr, rkey, size = ep.recv_info("recv start advertisement")
            if not 0 < size <= MAX_SIZE:
                raise ep.fail("recv start advertisement", f"advertised size {size}")
            ep.rdma[:size] = bytes(size)
            conn.post_send(WrOpcode.RDMA_READ, ep.rdma_mr, 0, size, wr_id=_WR_READ,
                           remote_stag=rkey, remote_addr=addr)
            ep.wait(WcOpcode.RDMA_READ, "rdma read of the client's start buffer")
            got = bytes(ep.rdma[:size])
            want = rping_start_buffer(ping, size)
            if got != want:
                first = next(i for i in range(size) if got[i] != want[i])
                raise ep.fail("verify read data", f"octet {first} differs from rping's pattern: "
                              f"{got[first:first + 16]!r} != {want[first:first + 16]!r}")
            verified += size
            RDMA_INFO.pack_into(ep.send_buf, 0, 0, 0, 0)  # rping's server sends zeros
            conn.post_send(WrOpcode.SEND, ep.send_mr, 0, RDMA_INFO.size, wr_id=_WR_GO_AHEAD)
            ep.wait(WcOpcode.SEND, "send go-ahead after the RDMA Read")
            addr, rkey, sink_size = ep.recv_info("recv sink advertisement")
            length = got.index(0) + 1 if 0 in got else size  # rping: strlen(rdma_buf) + 1
            if length > sink_size:
                raise ep.fail("recv sink advertisement", f"sink of {sink_size} octets, "
                              f"{length} to write")
            conn.post_send(WrOpcode.RDMA_WRITE, ep.rdma_mr, 0, length, wr_id=_WR_WRITE,
                           remote_stag=rkey, remote_addr=addr)
            ep.wait(WcOpcode.RDMA_WRITE, "rdma write into the client's sink")
            conn.post_send(WrOpcode.SEND, ep.send_mr, 0, RDMA_INFO.size, wr_id=_WR_GO_AHEAD)
            ep.wait(WcOpcode.SEND, "send go-ahead after the RDMA Write")
        ep.iteration = None
        # The client disconnects after its last ping; our receives flush then.
        deadline = time.monotonic() + timeout_s
        while conn.state is ConnectionState.CONNECTED and time.monotonic() < deadline:
            conn.poll_completions(max=16, timeout_ms=200)
        return RpingResult("server", info, count, size, verified, 0, time.monotonic() - t0)
    finally:
        conn.disconnect(timeout_ms=500)


def main(argv: list[str] | None = None) -> int:
    """By hand: ``rping_peer.py client tcp://127.0.0.1:PORT --rtr write`` against an
    ``rping -s``, or ``rping_peer.py server tcp://127.0.0.1:PORT`` for an ``rping -c``;
    prints the RpingResult as JSON (exit 0) or the RpingError (exit 1)."""
    import argparse
    import json

    from rdma_interop.provider import Crc, PeerToPeer, open_provider

    parser = argparse.ArgumentParser(description="rping's protocol over our tcp provider")
    parser.add_argument("role", choices=["client", "server"])
    parser.add_argument("uri", help="client: the rping server; server: where to listen")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE)
    parser.add_argument("--revision", type=int, default=2, choices=[1, 2])
    parser.add_argument("--crc", default="want", choices=[c.value for c in Crc])
    parser.add_argument("--rtr", action="append", choices=[r.value for r in Rtr],
                        help="client: ask for peer-to-peer offering this RTR type; server: "
                             "accept only these (repeatable)")
    args = parser.parse_args(argv)
    policy = MpaPolicy(revision=args.revision, crc=Crc(args.crc),
                       peer_to_peer=PeerToPeer.WHEN_ASKED if args.role == "server" else
                       PeerToPeer.ON if args.rtr else PeerToPeer.OFF)
    if args.rtr:
        policy = policy.replace(rtr_offer=frozenset(Rtr(r) for r in args.rtr))
    provider = open_provider("tcp")
    try:
        if args.role == "client":
            result = run_client(provider, args.uri, policy, count=args.count, size=args.size)
        else:
            with provider.listen(args.uri, policy) as listener:
                print(json.dumps({"listening": listener.local_address}), flush=True)
                result = serve_one(listener, count=args.count)
    except RpingError as e:
        print(json.dumps({"error": str(e), "step": e.step, "iteration": e.iteration}))
        return 1
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
