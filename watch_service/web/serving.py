"""Serving the app over HTTP with the contract's rules below the routes: aiohttp's own parser
errors (a 64 KiB header, 200 headers, a NUL in the path, bad chunking, an unknown method)
answer the contract's JSON error body instead of aiohttp's text/plain echo of the request
bytes, and a request whose header does not arrive within ``settings.header_timeout_s`` of its
first byte gets 408 and the connection is closed (aiohttp has no header read timeout; a
half-sent request would otherwise hold its socket until the keep-alive timeout). The body read
timeout is ``web.json_body``'s; idle kept-alive connections close after
``settings.keepalive_timeout_s``.

aiohttp offers no public hook for either, so ``ContractRunner`` builds its ``Server`` with a
``RequestHandler`` subclass; the private attributes it reads are named where they are used.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import http_exceptions as hx
from aiohttp import web, web_protocol, web_server
from aiohttp.web_request import BaseRequest

from watch_service.protocol.errors import ApiError, InvalidRequest, RequestTimeout
from watch_service.settings import Settings
from watch_service.web.app_keys import GC_PACER, HANDOFF
from watch_service.web.errors import error_response
from watch_service.web.gc_pacing import GcPacer
from watch_service.web.handoff import HANDOFF_TO, PASSED, ConnectionHandoff
from watch_service.web.logs import AccessLogger

log = logging.getLogger("auditsync.server")
# How long a stream waits for room in its owner's queue of passed connections before it stays
# where it landed (``pass_stream_request``).
PASS_WAIT_S = 1.0

# Checked in order (subclasses first): what the client got wrong, never the bytes it sent.
_PARSER_ERRORS: tuple[tuple[type[Exception], str], ...] = (
    (hx.BadHttpMethod, "unknown or malformed HTTP method"),
    (hx.LineTooLong, "the request line or a header is too long"),
    (hx.InvalidURLError, "malformed request target (path)"),
    (hx.BadStatusLine, "malformed request line"),
    (hx.InvalidHeader, "malformed header"),
    (hx.TransferEncodingError, "malformed chunked body"),
    (hx.ContentLengthError, "malformed or conflicting Content-Length"),
    (hx.ContentEncodingError, "malformed Content-Encoding"),
)


def parser_error(status: int, exc: BaseException | None) -> ApiError:
    """The contract's error for a request aiohttp could not parse or serve."""
    if status >= 500:
        return ApiError("internal server error")
    for cls, text in _PARSER_ERRORS:
        if isinstance(exc, cls):
            return InvalidRequest(f"{text}; the request was not processed")
    if isinstance(exc, hx.BadHttpMessage) and "header" in str(exc.message).lower():
        return InvalidRequest("too many or malformed headers; the request was not processed")
    return InvalidRequest("malformed HTTP request; the request was not processed")


def _raw_response(err: ApiError) -> bytes:
    """A complete HTTP/1.1 response for ``err`` that closes the connection, for writing to
    the transport where no request object exists (a header that never completed)."""
    body = orjson.dumps(err.body())
    return (
        f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


class ContractRequestHandler(web_protocol.RequestHandler):
    """aiohttp's per-connection protocol, with contract error bodies, a header timeout, and
    the hand-off of its connection to another worker (web/handoff.py)."""

    def __init__(
        self,
        manager: web_server.Server,
        *,
        header_timeout: float,
        passable: bool = False,
        **kwargs: Any,
    ):
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        # For the hand-off (only where there is one): every byte received so far belongs to
        # a request parsed whole (a header read in one piece, then exactly its Content-Length
        # of body), so nothing of a next request is left in this handler's parser. Anything
        # else (a header in two reads, a chunked body, bytes past a request: pipelining), or
        # a connection another worker passed here (``keep_here``), makes it False for good.
        self._whole = passable
        self._body_left = 0  # bytes of the current request's body still to come
        # The current request's bytes, while they are all it sent (a header read in one
        # piece, no body): what goes with the connection when the request is passed unanswered.
        self._request_bytes: bytes | None = None
        self._replay = b""  # a request another worker passed with the connection, unread
        self._passed = False  # the current request went to another worker with its connection

    def keep_here(self, replay: bytes = b"") -> None:
        """This connection is never passed on (another worker passed it here, with ``replay``:
        the request it did not answer, served here as the connection's first)."""
        self._whole = False
        self._replay = replay

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._replay:  # before anything the socket brings: it was read first
            replay, self._replay = self._replay, b""
            self.data_received(replay)

    def data_received(self, data: bytes) -> None:
        # Idle: no request being handled and none queued (private state of RequestHandler),
        # so these bytes start or continue a header, not a body.
        idle = self._current_request is None and not self._messages
        count = self._request_count
        super().data_received(data)
        if self._whole and data:
            self._account(data, self._request_count - count)
        if self._request_count != count:
            self._cancel_header_timer()  # a whole header (or a parse error) arrived
        elif idle and self._header_timer is None:
            self._header_timer = self._loop.call_later(self._header_timeout, self._timed_out)

    def _account(self, data: bytes, messages: int) -> None:
        self._request_bytes = None
        if self._body_left:  # more of a body
            if messages or len(data) > self._body_left:
                self._whole = False
            else:
                self._body_left -= len(data)
            return
        end = data.find(b"\r\n\r\n")  # a new request: its whole header in this read
        if messages != 1 or len(self._messages) != 1 or end < 0:
            self._whole = False
            return
        message = self._messages[-1][0]
        length = getattr(message, "headers", {}).get("Content-Length", "0")
        body = len(data) - end - 4
        if getattr(message, "chunked", True) or not length.isdigit() or body > int(length):
            self._whole = False
        else:
            self._body_left = int(length) - body
            if not body and not self._body_left:
                self._request_bytes = data

    def pass_request(self, handoff: ConnectionHandoff, owner: int) -> bool:
        """Pass the connection to worker ``owner`` with the request being handled, unanswered,
        if that request is all the connection sent (a header in one read, no body) and
        nothing is half-done here; the handler then returns without answering."""
        replay = self._request_bytes
        if (
            replay is None
            or (sock := self._passable_socket()) is None
            or not handoff.send(sock, owner, replay)
        ):
            return False
        assert self.transport is not None  # _passable_socket checked it
        self.transport.pause_reading()  # the owner reads it from now on
        self._passed = True
        return True

    async def finish_response(
        self, request: BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        if self._passed:  # the owner answers it: nothing is written here
            request._finish()
            self.force_close()  # closes this process's descriptor; the owner holds its own
            return resp, True
        done = await super().finish_response(request, resp, start_time)
        owner = request.get(HANDOFF_TO)
        if (
            owner is not None
            and not done[1]
            and resp.keep_alive
            and isinstance(request, web.Request)
        ):
            self._hand_off(request.app[HANDOFF], owner)
        return done

    def _hand_off(self, handoff: ConnectionHandoff, owner: int) -> None:
        """Pass the connection to worker ``owner`` if nothing of it is half-done here."""
        sock = None if self._body_left else self._passable_socket()
        if sock is not None and handoff.send(sock, owner):
            self.force_close()  # closes this process's descriptor; the owner holds its own

    def _passable_socket(self) -> Any:
        """The connection's socket if it may go to another worker: every byte it sent was read
        in whole requests (no pipelined one queued, no header half-read), it is not closing,
        and nothing written is still buffered; else None."""
        transport = self.transport
        if (
            not self._whole
            or self._messages
            or self._header_timer is not None
            or self._force_close
            or self._close
            or transport is None
            or transport.get_write_buffer_size()
        ):
            return None
        return transport.get_extra_info("socket")

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _timed_out(self) -> None:
        self._header_timer = None
        if self._current_request is not None or self._messages or self.transport is None:
            return  # a request is being served: its body has web.json_body's timeout
        err = RequestTimeout(f"the request header did not arrive within {self._header_timeout:g} s")
        self.transport.write(_raw_response(err))
        self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            log.error("error handling %s %s", request.method, request.path, exc_info=exc)
        else:  # bad client bytes: expected on an open port, one line, no traceback
            log.info("unparseable request from %s: %s", request.remote, type(exc).__name__)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send the error")
        resp = error_response(parser_error(status, exc))
        resp.force_close()
        return resp


def pass_request(request: web.Request, owner: int) -> bool:
    """Pass ``request``'s connection, with the request unanswered, to worker ``owner``
    (``ContractRequestHandler.pass_request``); False where there is no other worker or it
    cannot be passed: then this worker answers it."""
    handoff = request.app.get(HANDOFF)
    protocol = request.protocol
    if (
        handoff is None
        or not isinstance(protocol, ContractRequestHandler)
        or not protocol.pass_request(handoff, owner)
    ):
        return False
    request[PASSED] = True
    return True


async def pass_stream_request(request: web.Request, owner: int) -> bool:
    """``pass_request``, waiting up to ``PASS_WAIT_S`` while the owner's queue is full (a
    burst of streams opening at once): for a stream, which stays on its worker from then on."""
    handoff = request.app.get(HANDOFF)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PASS_WAIT_S
    while not pass_request(request, owner):
        if handoff is None or owner not in handoff.full or loop.time() >= deadline:
            return False
        try:
            async with asyncio.timeout_at(deadline):
                await handoff.writable(owner)
        except TimeoutError:
            return False
    return True


class ContractServer(web_server.Server):
    """aiohttp's ``Server`` whose connections are ``ContractRequestHandler``s."""

    def __init__(
        self, *args: Any, header_timeout: float, passable: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout, self.passable = header_timeout, passable

    def __call__(self) -> ContractRequestHandler:
        return ContractRequestHandler(
            self,
            loop=self._loop,
            header_timeout=self.header_timeout,
            passable=self.passable,
            **self._kwargs,
        )


class ContractRunner(web.AppRunner):
    """``web.AppRunner`` for ``settings``: the contract's parser errors and read timeouts."""

    def __init__(self, app: web.Application, settings: Settings, **kwargs: Any) -> None:
        kwargs.setdefault("keepalive_timeout", settings.keepalive_timeout_s)
        # After a response, aiohttp reads what is left of an unread body for lingering_time
        # (default 10 s): no longer than the body read timeout.
        kwargs.setdefault("lingering_time", min(10.0, settings.body_timeout_s))
        super().__init__(app, **kwargs)
        self.header_timeout = settings.header_timeout_s

    async def _make_server(self) -> web_server.Server:
        plain = await super()._make_server()  # runs the app's startup, as AppRunner does
        return ContractServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            header_timeout=self.header_timeout,
            passable=self.app.get(HANDOFF) is not None,  # serve --workers N
            **plain._kwargs,
        )


async def serve(
    app: web.Application,
    settings: Settings,
    *,
    sock: socket.socket | None = None,
    on_started: Callable[[], Awaitable[bool]] | None = None,
    on_listening: Callable[[], None] | None = None,
    shutdown_timeout: float = 5.0,
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, then shut down: on ``sock`` (bound by the caller
    before anything else started) or on ``settings.host:port``. Once the app has started (its
    pool, its gRPC servers), ``on_started`` is awaited, if given: the socket is served only when
    it says True (a worker waits there for its supervisor). ``on_listening`` is called once it
    listens. The access log is on with ``settings.access_log``."""
    pacer = app[GC_PACER] = GcPacer()
    runner = ContractRunner(
        app,
        settings,
        access_log=logging.getLogger("auditsync.access") if settings.access_log else None,
        access_log_class=AccessLogger,
        shutdown_timeout=shutdown_timeout,
    )
    await runner.setup()
    handoff = app.get(HANDOFF)
    if handoff is not None:  # connections other workers pass here are served like our own
        handoff.handler_factory = runner.server
    # What start-up built (modules, the app, the pool) lives until shutdown: out of the
    # collector's way, so a full collection walks only what was made since (and the pacer
    # freezes what survives each one).
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if on_started is not None and not await _until_stopped(on_started(), stop):
            return
        if sock is not None:
            await web.SockSite(runner, sock).start()
        else:
            await web.TCPSite(runner, settings.host, settings.port).start()
        if on_listening is not None:
            on_listening()
        await stop.wait()
    finally:
        # The handlers stay until the loop closes: removing them restores Python's
        # KeyboardInterrupt handler while the signal may still be pending at the Python level
        # (uvloop), which would end a clean shutdown in a traceback. A second signal during
        # the shutdown only sets the event again.
        if handoff is not None:
            handoff.handler_factory = None  # a connection passed from now on is closed
        await runner.cleanup()
        pacer.close()


async def _until_stopped(go: Awaitable[bool], stop: asyncio.Event) -> bool:
    """What ``go`` answers, or False as soon as ``stop`` is set."""
    going, stopping = asyncio.ensure_future(go), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({going, stopping}, return_when=asyncio.FIRST_COMPLETED)
        return going.done() and not stop.is_set() and going.result()
    finally:
        going.cancel()
        stopping.cancel()
