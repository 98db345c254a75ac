"""A watch client for crash tests, run as its own process and killed with SIGKILL: it opens
``GET /v0/watch/<wid>`` on a fresh connection (``Last-Event-ID`` never sent), prints the
worker that answered, then one line per record frame it has read: ``<topic> <first seq>
<last seq> <id>``, flushed, until it is killed. What it printed is what it processed.

    python -m tests.watch.crash_client PORT WID
"""

from __future__ import annotations

import json
import socket
import sys


def frames(body):
    """SSE frames (as field maps) from an iterator of body bytes."""
    buf = b""
    for data in body:
        buf += data
        while (end := buf.find(b"\n\n")) >= 0:
            raw, buf = buf[:end], buf[end + 2 :]
            fields = {}
            for line in raw.decode().split("\n"):
                name, sep, value = line.partition(": ")
                if sep and name:
                    fields[name] = value
            yield fields


def chunks(f):
    """The decoded body of a chunked HTTP/1.1 response read from file ``f``."""
    while size := int(f.readline().split(b";")[0], 16):
        yield f.read(size)
        f.readline()


def main(port: int, wid: str) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    request = (
        f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
    )
    sock.sendall(request.encode())
    f = sock.makefile("rb")
    status = f.readline()
    assert b" 200 " in status, status
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    print("worker", headers["x-auditsync-worker"], flush=True)
    for fields in frames(chunks(f)):
        if fields.get("event") == "record":
            records = json.loads(fields["data"])
            seqs = [r["$seq"] for r in records["records"]]
            print(records["topic"], seqs[0], seqs[-1], fields["id"], flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
