"""An Ethernet switch for qemu guests, in this process, over UDP on 127.0.0.1.

qemu's `-netdev dgram` sends each Ethernet frame as one UDP datagram to one remote address
and receives frames the same way. A socket netdev joins only two guests and qemu's own hubs
live inside one qemu process, so a lab of more guests needs a switch; multicast would do it
but leaves the machine, and Debian's qemu has no vde. This is a learning switch: a UDP port
per guest on 127.0.0.1, frames to a known MAC go to its port, the rest (broadcast, multicast,
unknown) to every other port. Nothing but loopback datagrams is sent.

    hub = LinkHub(ports=3)            # one switch port per guest
    hub.qemu_netdev(i, "l0")          # the -netdev argument of guest i
    hub.start(); ...; hub.stop()
"""

from __future__ import annotations

import selectors
import socket
import threading

# Enough for a 9000-octet jumbo frame with headers.
_MAX_FRAME = 10240


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LinkHub:
    def __init__(self, ports: int) -> None:
        self._socks = []
        for _ in range(ports):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            # A burst (perftest's 64 KiB messages in 1 KiB frames) must wait here, not drop:
            # this switch runs in Python, slower than the guests can send.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.setblocking(False)
            self._socks.append(s)
        # Where each guest's netdev listens: fixed now, so the qemu command line can name it.
        self._guest_ports: list[int] = []
        while len(self._guest_ports) < ports:  # distinct, and not one of the switch's own
            port = _free_udp_port()
            if port not in self._guest_ports and all(
                    port != s.getsockname()[1] for s in self._socks):
                self._guest_ports.append(port)
        self._where: dict[bytes, int] = {}  # MAC -> switch port
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link-hub", daemon=True)
        self.frames = 0

    def qemu_netdev(self, port: int, netdev_id: str) -> str:
        return (f"dgram,id={netdev_id},"
                f"local.type=inet,local.host=127.0.0.1,local.port={self._guest_ports[port]},"
                f"remote.type=inet,remote.host=127.0.0.1,"
                f"remote.port={self._socks[port].getsockname()[1]}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for s in self._socks:
            s.close()

    def _send(self, port: int, frame: bytes) -> None:
        try:
            self._socks[port].sendto(frame, ("127.0.0.1", self._guest_ports[port]))
        except OSError:
            pass  # that guest is gone (a node that died): its frames are lost, as on a wire

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for i, s in enumerate(self._socks):
            sel.register(s, selectors.EVENT_READ, i)
        while not self._stop.is_set():
            for key, _ in sel.select(timeout=0.2):
                port = key.data
                while True:
                    try:
                        frame = key.fileobj.recv(_MAX_FRAME)  # type: ignore[union-attr]
                    except (BlockingIOError, OSError):
                        break
                    if len(frame) < 14:
                        continue
                    self.frames += 1
                    dst, src = frame[0:6], frame[6:12]
                    if not src[0] & 1:
                        self._where[src] = port
                    out = self._where.get(dst) if not dst[0] & 1 else None
                    if out is not None:
                        if out != port:
                            self._send(out, frame)
                    else:
                        for other in range(len(self._socks)):
                            if other != port:
                                self._send(other, frame)
        sel.close()
