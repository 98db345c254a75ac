"""The plugin's exception classes derive from the project's root, ``AuditsyncError`` (walked
here rather than in ``tests/protocol/test_exceptions.py`` because importing the plugin loads
Airflow)."""

from __future__ import annotations

import pytest

from tests.protocol.test_exceptions import exception_classes, not_rooted

pytestmark = pytest.mark.airflow


def test_every_plugin_exception_class_derives_from_the_root():
    classes = exception_classes("auditsync_plugin")
    assert "WatchServiceError" in {c.__name__ for c in classes}
    assert not_rooted(classes) == []
