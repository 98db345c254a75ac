"""The per-socket cost of a live push, against a bare ``transport.write``. Not a test: it prints.

The fan-out's cost grows with the streams live at a topic's tail, so its per-socket part is
what the watch rows with 1,000 and 10,000 watchers mostly measure. Here it is alone, in one
process, so a loaded machine moves both figures alike: ``--streams`` loopback TCP connections
under uvloop, each the server side of a ``WatchStream`` live at one topic's tail; each round
pushes one record frame to all of them through the tailer's ``LiveSet.push`` (the service's
path), then writes the same number of bytes to each with a bare ``transport.write`` (the
floor's). CPU time of the process (``time.process_time``), medians of the rounds. The client
ends are read between rounds, outside the timing; nothing else runs on the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from watch_service.engine.fanout import Flags, LiveSet  # noqa: E402
from watch_service.protocol.stream_state import StreamState  # noqa: E402
from watch_service.server.watch_stream import WatchStream  # noqa: E402

TOPIC = "t"
GROUP = ((False, False, True), 100, 1 << 20, None)


class Item:
    """A cached record as the fan-out sees it."""

    __slots__ = ("node", "seq")

    def __init__(self, seq: int) -> None:
        self.seq, self.node = seq, None


def encoder(flags: Flags):
    return lambda item: f'{{"$seq":{item.seq},"$ts":1764393600000,"data":{{"t":17643936000}}}}'


def live_stream(transport: asyncio.Transport, clock) -> WatchStream:
    """A stream live at the topic's tail, as ``WatchStream.run`` leaves one once caught up
    (made without the request and response it would be served for)."""
    stream = WatchStream.__new__(WatchStream)
    stream.transport, stream.chunked, stream.ending = transport, True, None
    stream.state = StreamState({TOPIC: 0}, {TOPIC: 0})
    stream.state.live[TOPIC] = True
    stream.group, stream._sent, stream._clock, stream._last_write = GROUP, 0, clock, 0.0
    stream.solo_run, stream._run_base = None, 0
    stream.pushed, stream.active, stream.dirty = {TOPIC}, {}, set()
    return stream


async def main(n: int, rounds: int) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    live, transports, clients, streams = LiveSet(), [], [], []
    for _ in range(n):
        client = socket.create_connection(listener.getsockname())
        client.setblocking(False)
        server_end, _ = listener.accept()
        server_end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=server_end)
        streams.append(live_stream(transport, loop.time))
        live.join(streams[-1], TOPIC, 0)
        transports.append(transport)
        clients.append(client)

    def drain() -> None:
        for client in clients:
            try:
                while client.recv(1 << 16):
                    pass
            except BlockingIOError:
                pass

    pushed, bare, size = [], [], 0
    for seq in range(1, rounds + 1):
        drain()
        started = time.process_time()
        await live.push(TOPIC, [Item(seq)], seq - 1, seq, seq, encoder)
        pushed.append(time.process_time() - started)
        size = size or streams[0].sent
        data = b"x" * size
        drain()
        started = time.process_time()
        for transport in transports:
            transport.write(data)
        bare.append(time.process_time() - started)
    drain()
    push_us, bare_us = (1e6 * statistics.median(xs) / n for xs in (pushed, bare))
    print(
        f"{n} live streams, {size} bytes a frame: LiveSet.push {push_us:.2f} µs a stream, "
        f"bare transport.write {bare_us:.2f} µs, push / bare {push_us / bare_us:.2f} "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    for transport in transports:
        transport.abort()
    for client in clients:
        client.close()
    listener.close()


if __name__ == "__main__":
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="100 rounds (run_all.py --quick)")
    args = parser.parse_args()
    uvloop.run(main(args.streams, 100 if args.quick else args.rounds))
