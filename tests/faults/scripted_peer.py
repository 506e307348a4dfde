#!/usr/bin/python3
"""A deliberately misbehaving iWARP peer for fault tests, speaking MPA byte by byte.

It plays one role up to a chosen step of the handshake, prints ``at STEP`` on stdout, and
then does nothing until it is killed (the test sends SIGKILL, so the kernel closes its
socket exactly as it would for a crashed peer) or, for the scripted endings, finishes by
itself. Everything on the wire is built with rdma_interop.wire.

  scripted_peer.py initiator HOST PORT --stop-after {tcp,request,reply}
  scripted_peer.py responder HOST PORT --stop-after {tcp,request,reply,terminate}
  scripted_peer.py garbage HOST PORT --kind {http,truncated,oversized}
"""

from __future__ import annotations

import argparse
import socket
import sys
import time

from rdma_interop.wire import (
    DdpSegment,
    FpduDecoder,
    FpduEncoder,
    MpaEnhanced,
    MpaFrame,
    MpaKind,
    RdmapOpcode,
    Terminate,
)

HEADER_LEN = 20
#: RDMAP, remote operation error, catastrophic error localized to the stream (RFC 5040 s7).
MID_TRANSFER_TERMINATE = (0, 2, 0x07)


def say(step: str) -> None:
    print(f"at {step}", flush=True)


def idle_forever() -> None:
    while True:
        time.sleep(3600)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"peer closed after {len(data)} of {n} octets")
        data += chunk
    return data


def recv_frame(sock: socket.socket) -> MpaFrame:
    header = recv_exact(sock, HEADER_LEN)
    length = MpaFrame.frame_length(header)
    return MpaFrame.decode(header + recv_exact(sock, length - HEADER_LEN))


def request_frame() -> MpaFrame:
    return MpaFrame(
        MpaKind.REQUEST,
        crc=True,
        revision=2,
        enhanced=MpaEnhanced(peer_to_peer=True, rtr_write=True, rtr_read=True, ird=16, ord=16),
        private_data=b"scripted",
    )


def reply_to(request: MpaFrame) -> MpaFrame:
    enhanced = None
    if request.enhanced is not None:
        e = request.enhanced
        enhanced = MpaEnhanced(
            peer_to_peer=e.peer_to_peer,
            rtr_write=e.peer_to_peer and e.rtr_write,
            rtr_read=e.peer_to_peer and not e.rtr_write and e.rtr_read,
            rtr_send=e.peer_to_peer and not (e.rtr_write or e.rtr_read) and e.rtr_send,
            ird=16,
            ord=min(16, e.ird),
        )
    return MpaFrame(MpaKind.REPLY, crc=request.crc, revision=request.revision,
                    enhanced=enhanced, private_data=b"scripted")


def run_initiator(host: str, port: int, stop_after: str) -> None:
    sock = socket.create_connection((host, port), timeout=10)
    if stop_after == "tcp":
        say("tcp")
        idle_forever()
    sock.sendall(request_frame().encode())
    if stop_after == "request":
        say("request")
        idle_forever()
    reply = recv_frame(sock)
    print(f"reply {reply}", flush=True)
    say("reply")  # and never send the RTR
    idle_forever()


def run_responder(host: str, port: int, stop_after: str) -> None:
    listener = socket.create_server((host, port))
    print("listening", flush=True)
    sock, _ = listener.accept()
    if stop_after == "tcp":
        say("tcp")
        idle_forever()
    request = recv_frame(sock)
    if stop_after == "request":
        say("request")
        idle_forever()
    reply = reply_to(request)
    sock.sendall(reply.encode())
    if stop_after == "reply":
        say("reply")
        idle_forever()
    # "terminate": take the RTR and the first message, then answer with a Terminate.
    crc = request.crc or reply.crc
    rx = FpduDecoder(crc=crc)
    tx = FpduEncoder(crc=crc)
    messages: list[DdpSegment] = []
    while not any(m.header.opcode == RdmapOpcode.SEND and m.payload for m in messages):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("initiator closed before its first Send")
        messages += [DdpSegment.decode(u) for u in rx.feed(chunk)]
    layer, etype, code = MID_TRANSFER_TERMINATE
    sock.sendall(tx.encode(Terminate(layer, etype, code).encode(msn=1)))
    say("terminate")
    time.sleep(1)
    sock.close()


def run_garbage(host: str, port: int, kind: str) -> None:
    sock = socket.create_connection((host, port), timeout=10)
    if kind == "http":
        sock.sendall(b"GET / HTTP/1.1\r\nHost: iwarp\r\n\r\n")
    elif kind == "truncated":
        # A valid header promising 100 octets of private data, then only 10 of them.
        frame = MpaFrame(MpaKind.REQUEST, crc=True, private_data=bytes(100)).encode()
        sock.sendall(frame[: HEADER_LEN + 10])
    elif kind == "oversized":
        frame = bytearray(MpaFrame(MpaKind.REQUEST, crc=True).encode())
        frame[18:20] = (600).to_bytes(2, "big")  # PD_Length above the RFC's 512
        sock.sendall(bytes(frame) + bytes(600))
    say(kind)
    idle_forever()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=["initiator", "responder", "garbage"])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--stop-after", default="reply")
    parser.add_argument("--kind", default="http")
    args = parser.parse_args(argv)
    if args.role == "initiator":
        run_initiator(args.host, args.port, args.stop_after)
    elif args.role == "responder":
        run_responder(args.host, args.port, args.stop_after)
    else:
        run_garbage(args.host, args.port, args.kind)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
