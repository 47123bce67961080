"""The small HTTP server the ``--call http`` handlers call: standard library only, one asyncio
process, HTTP/1.1 keep-alive, every request answered ``200 ok`` (2 bytes) at once; ``GET /count``
answers how many requests it served before (the benchmarks read it to check the calls).

    python bench/_httpd.py --port PORT            # serve until SIGTERM
    python bench/_httpd.py --ceiling [-c 8] [--seconds 3]

``--ceiling`` measures it alone: a server process, then ``-c`` keep-alive connections from one
client process (raw sockets, one request at a time each, as a pooled client sends them) for
``--seconds``; prints the requests/s served and the server's CPU per request (from ``/proc``),
whose inverse is what one core of server could answer. The client shares the 2 cores: the rate
is a floor of the server's ceiling, the CPU per request the closer figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


class _Http(asyncio.Protocol):
    served = 0  # requests answered by this process

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:  # GETs carry no body
            head, self.buf = self.buf[:end], self.buf[end + 4 :]
            if head.startswith(b"GET /count "):
                body = str(_Http.served).encode()
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
            else:
                _Http.served += 1
                self.transport.write(OK)


def serve(port: int) -> None:
    """Serve on 127.0.0.1:port until SIGTERM or SIGINT."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Http, "127.0.0.1", port, backlog=1024)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()

    asyncio.run(main())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def ceiling(connections: int, seconds: float) -> None:
    """Measure the server alone (see the module's docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench._common import emit, free_port, stop_process, wait_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--port", str(port)])
    try:
        wait_port(port)
        request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

        async def client(deadline: float) -> int:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            n = 0
            while time.perf_counter() < deadline:
                writer.write(request)
                got = b""
                while not got.endswith(b"\r\n\r\nok"):
                    got += await reader.read(4096)
                n += 1
            writer.close()
            return n

        async def run() -> tuple[int, float, float]:
            cpu0, t0 = _cpu_seconds(proc.pid), time.perf_counter()
            counts = await asyncio.gather(*(client(t0 + seconds) for _ in range(connections)))
            return sum(counts), time.perf_counter() - t0, _cpu_seconds(proc.pid) - cpu0

        n, wall, cpu = asyncio.run(run())
        emit("http_served", n / wall, "req/s", f"{connections} keep-alive connections, one client")
        per = 1e6 * cpu / max(n, 1)
        emit("http_server_cpu", per, "us/req", f"one core of server: {1e6 / per:,.0f} req/s")
    finally:
        stop_process(proc)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ceiling", action="store_true", help="measure the server alone")
    p.add_argument("--connections", "-c", type=int, default=8)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    if args.ceiling:
        ceiling(args.connections, args.seconds)
    elif args.port:
        with contextlib.suppress(KeyboardInterrupt):
            serve(args.port)
    else:
        p.error("--port PORT or --ceiling")


if __name__ == "__main__":
    main()
