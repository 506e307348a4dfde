"""Runs an unchanged Python program with its TCP sockets over RDMA streams.

    python3 -m rdma_interop.stream_run CMD ARGS...

puts the stream preload (rdma_interop/stream_preload, whose sitecustomize replaces
socket.socket) and the directory this rdma_interop package is in first on PYTHONPATH, then
execs CMD: every Python process it starts (CMD itself when it is python3, and its children)
gets StreamSockets for AF_INET SOCK_STREAM. The environment variables of
rdma_interop.stream_socket (RDMA_STREAM_*) configure the node and the log.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

PRELOAD_DIR = Path(__file__).resolve().parent / "stream_preload"
PACKAGE_PARENT = Path(__file__).resolve().parent.parent


def preload_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: this process's) with the preload first on PYTHONPATH."""
    env = dict(os.environ if environ is None else environ)
    entries = [str(PRELOAD_DIR), str(PACKAGE_PARENT)]
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in entries]
    env["PYTHONPATH"] = os.pathsep.join(entries + rest)
    return env


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    program = shutil.which(args[0]) or args[0]
    try:
        os.execve(program, args, preload_environment())
    except OSError as e:
        print(f"stream_run: cannot run {args[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
