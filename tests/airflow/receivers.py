"""Real alert receivers on loopback for the tests: an SMTP server (``aiosmtpd``) and an HTTP
server (``aiohttp``) standing in for a Slack / Teams incoming webhook. Each runs in its own
thread and keeps what it received; :meth:`wait_for` waits on the arrival itself (a condition
variable), with a timeout; what the alert tests read of what came (an e-mail's HTML, the
alert ledger) and a screenshot of an e-mail as headless Chromium renders it."""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import threading
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiohttp import web
from aiosmtpd.controller import Controller

from ..browser import screenshot_file
from ..support import free_port

LEDGER = (
    "SELECT run_id, kind, channel FROM alerts_sent WHERE dag_id = 'audit_sync' ORDER BY 1, 2, 3"
)


def html_of(message) -> str:
    return message.get_body(("html",)).get_content()


def screenshot(html: str, png: Path) -> None:
    """``html`` at 1280 × 800 in headless Chromium, saved as ``png`` (beside its ``.html``)."""
    png.parent.mkdir(parents=True, exist_ok=True)
    page = png.with_suffix(".html")
    page.write_text(html, encoding="utf-8")
    screenshot_file(page, png)
    assert png.stat().st_size > 10_000


class _Inbox:
    def __init__(self) -> None:
        self.items: list[Any] = []
        self._cond = threading.Condition()

    def add(self, item: Any) -> None:
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def wait_for(self, match: Callable[[Any], bool], timeout: float, what: str) -> list[Any]:
        """Every item matching ``match``, once there is at least one."""
        with self._cond:
            if not self._cond.wait_for(lambda: any(match(i) for i in self.items), timeout):
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {what}; got {len(self.items)} "
                    f"other item(s): {[str(i)[:200] for i in self.items]}"
                )
            return [i for i in self.items if match(i)]


class SmtpReceiver(_Inbox):
    """Accepts every message; ``items`` are parsed :class:`EmailMessage`s."""

    def __init__(self) -> None:
        super().__init__()
        self.port = free_port()
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)

    async def handle_DATA(self, server, session, envelope) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.add(message)
        return "250 Message accepted for delivery"

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def __enter__(self) -> SmtpReceiver:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()


class WebhookReceiver(_Inbox):
    """``POST /hook/<name>`` with a JSON body answers 200 ``ok`` (as Slack does); ``items`` are
    ``(path, body)`` pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _hook(self, request: web.Request) -> web.Response:
        if request.content_type != "application/json":
            return web.Response(status=415, text="expected application/json")
        self.add((request.path, json.loads(await request.read())))
        return web.Response(text="ok")

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook/{name}", self._hook)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def url(self, name: str = "alerts") -> str:
        return f"http://127.0.0.1:{self.port}/hook/{name}"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
