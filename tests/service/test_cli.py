"""The CLI reads like a product: a description, ``--version`` from the package metadata, every
flag's help with its default, and ``auditsync watch --url`` without a scheme refused at once."""

from __future__ import annotations

import argparse
import asyncio
import time
from importlib.metadata import version

import pytest

from tests.support import run_cli
from watch_service.cli import build_parser, main
from watch_service.sink.watch_command import build_parser as watch_parser

pytestmark = pytest.mark.unit


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest not in ("help", "version")]


def test_top_level_help_describes_the_product():
    text = build_parser().format_help()
    assert "audit-log sync over PostgreSQL" in text
    assert "auditsync db stop" in text
    for name in ("db", "migrate", "serve", "watch", "sink", "pipeline", "retention"):
        assert f"    {name}" in text


def test_every_flag_has_help_with_its_default():
    parsers = {**subparsers(build_parser()), "watch": watch_parser()}
    checked = 0
    for name, parser in parsers.items():
        if not parser.add_help:  # delegated: its own module's parser is checked instead
            continue
        text = parser.format_help()
        for action in flags(parser):
            assert action.help, (name, action.option_strings)
            if action.default not in (None, False):
                assert "default" in text.split(action.option_strings[-1], 1)[1], (name, action)
            checked += 1
    assert checked >= 15


def test_version_comes_from_the_package(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"auditsync {version('auditsync')}\n"


async def test_watch_url_without_a_scheme_is_refused_at_once():
    started = time.monotonic()
    code, out, err = await asyncio.wait_for(
        run_cli("watch", "--url", "localhost:8400", "--topics", "orders", env={}), 30
    )
    assert code == 2 and out == ""
    assert err.strip().endswith(
        "argument --url: expected the service's base URL, http://host:port or https://host, "
        "got 'localhost:8400'"
    )
    assert time.monotonic() - started < 15
