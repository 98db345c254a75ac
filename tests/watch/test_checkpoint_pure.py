"""Checkpoint-token ids without a socket: when an id becomes a token, how long a token can get,
that it stands for exactly its map, and that a malformed one is refused with a reason."""

from __future__ import annotations

import base64
import hashlib
import random
import struct

import pytest

from watch_service.protocol import cursor
from watch_service.protocol.errors import InvalidRequest

pytestmark = pytest.mark.unit


def long_topics(n: int, length: int = 200) -> list[str]:
    return [f"t{i:03d}".ljust(length, "x") for i in range(n)]


def token_by_hand(cursors: dict[str, int]) -> str:
    """The documented format, built independently: ``ck.`` + base64url(6-byte fingerprint of
    the topic list, width, big-endian seqs of that width)."""
    top = max(cursors.values())
    width = next(w for w in (1, 2, 4, 8) if top < 1 << (8 * w))
    body = hashlib.sha256("\n".join(cursors).encode()).digest()[:6] + bytes([width])
    body += b"".join(seq.to_bytes(width, "big") for seq in cursors.values())
    return "ck." + base64.urlsafe_b64encode(body).rstrip(b"=").decode()


def test_small_maps_stay_inline_and_large_ones_become_tokens():
    small = {"orders": 5210, "notifications": 88130}
    assert cursor.frame_id(small) == cursor.encode(small)
    # The threshold is on the inline id's length: up to 4096 characters it stays inline.
    at_limit, over = {"a" * 3066: 1}, {"a" * 3067: 1}
    assert (len(cursor.encode(at_limit)), len(cursor.encode(over))) == (4096, 4098)
    assert cursor.frame_id(at_limit) == cursor.encode(at_limit)
    assert cursor.frame_id(over) == token_by_hand(over)
    big = dict.fromkeys(long_topics(256), 7)
    assert len(cursor.encode(big)) > 60_000
    assert cursor.frame_id(big) == token_by_hand(big)


def test_a_token_is_short_whatever_the_names_and_rewinds_to_its_exact_map():
    rng = random.Random(20261123)
    topics = long_topics(256)
    for top in (0, 255, 256, 65_535, 2**32 - 1, 2**32, 2**63 - 1):
        cursors = {t: rng.randint(0, top) for t in topics}
        cursors[topics[rng.randrange(256)]] = top
        token = cursor.frame_id(cursors)
        assert token == token_by_hand(cursors) and len(token) <= 2743
        back = cursor.parse_last_event_id(token, topics)
        assert back == cursors and list(back) == topics
    assert len(cursor.frame_id(dict.fromkeys(topics, 2**63 - 1))) == 2743


def test_inline_ids_still_parse_and_garbage_is_still_absent():
    topics = ["a", "b"]
    assert cursor.parse_last_event_id(cursor.encode({"a": 3, "b": 1}), topics) == {"a": 3, "b": 1}
    for garbage in (None, "", "%%%", "A" * 6000, "eyJ"):
        assert cursor.parse_last_event_id(garbage, topics) is None


def packed(body: bytes) -> str:
    return "ck." + base64.urlsafe_b64encode(body).rstrip(b"=").decode()


TOPICS = long_topics(3)
FP = hashlib.sha256("\n".join(TOPICS).encode()).digest()[:6]


@pytest.mark.parametrize(
    "token, why",
    [
        ("ck.", "truncated or unknown width"),
        ("ck.!!!!", "not base64url"),
        ("ck.A", "not base64url"),
        ("ck.é", "over 2749 characters or not ASCII"),
        ("ck." + "A" * 3000, "over 2749 characters or not ASCII"),
        (packed(FP + b"\x03" + b"\x00" * 9), "truncated or unknown width"),
        (packed(FP + b"\x01" + b"\x01\x02"), "expected 3 cursors of 1 bytes"),
        (packed(FP + b"\x01" + b"\x01\x02\x03\x04"), "expected 3 cursors of 1 bytes"),
        (packed(FP + b"\x08" + struct.pack(">3Q", 1, 2, 2**63)), "a cursor above 2^63-1"),
    ],
)
def test_a_malformed_token_is_refused_with_its_reason(token, why):
    with pytest.raises(InvalidRequest) as err:
        cursor.parse_last_event_id(token, TOPICS)
    assert err.value.message == f"Last-Event-ID: malformed checkpoint token ({why})"


def test_a_token_of_other_topics_is_refused():
    token = cursor.frame_id(dict.fromkeys(long_topics(40), 1))
    with pytest.raises(InvalidRequest) as err:
        cursor.parse_last_event_id(token, long_topics(41))
    assert err.value.message == (
        "Last-Event-ID: this checkpoint token belongs to a session over other topics"
    )
