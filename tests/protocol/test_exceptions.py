"""The project's exceptions: every class defined in ``watch_service`` and ``spark_jobs`` derives
from ``AuditsyncError`` (found by walking and importing every module, so a new class cannot
slip past), and the HTTP errors carry their status, code and headers as class data. The
plugin's classes are walked in ``tests/airflow/test_exceptions.py``, where Airflow is loaded."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from watch_service.protocol.errors import (
    ApiError,
    AuditsyncError,
    Forbidden,
    InvalidRequest,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    Throttled,
    TopicNotFound,
    Unauthorized,
    Unavailable,
)

pytestmark = pytest.mark.unit


def exception_classes(package: str) -> list[type[BaseException]]:
    """Every exception class defined at the top level of a module of ``package``."""
    root = importlib.import_module(package)
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # importing it runs the command
        module = importlib.import_module(info.name)
        found += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == module.__name__ and issubclass(cls, BaseException)
        ]
    return found


def not_rooted(classes: list[type[BaseException]]) -> list[str]:
    return [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, AuditsyncError)
    ]


@pytest.mark.parametrize("package", ["watch_service", "spark_jobs"])
def test_every_exception_class_derives_from_the_root(package):
    classes = exception_classes(package)
    assert classes, f"the walk of {package} found no exception class"
    assert not_rooted(classes) == []


def test_the_walk_sees_classes_in_every_layer():
    names = {c.__name__ for c in exception_classes("watch_service")}
    assert {
        "ApiError",
        "AuthzInputError",
        "AuthzStoreError",
        "HistoryLost",
        "LandingError",
        "SettingsError",
        "KeyFileError",
    } <= names


def test_http_errors_carry_status_and_code_as_class_data():
    assert [
        (c.status, c.code)
        for c in (
            ApiError,
            InvalidRequest,
            Unauthorized,
            Forbidden,
            NotFound,
            TopicNotFound,
            MethodNotAllowed,
            NotAcceptable,
            PayloadTooLarge,
            Throttled,
            Unavailable,
        )
    ] == [
        (500, "internal"),
        (400, "invalid_request"),
        (401, "unauthorized"),
        (403, "forbidden"),
        (404, "not_found"),
        (404, "topic_not_found"),
        (405, "method_not_allowed"),
        (406, "not_acceptable"),
        (413, "payload_too_large"),
        (429, "throttled"),
        (503, "unavailable"),
    ]
    assert dict(Unauthorized.headers) == {"WWW-Authenticate": "Bearer"}
    assert dict(Throttled.headers) == {"Retry-After": "2"}
    assert dict(InvalidRequest.headers) == {}
    assert dict(MethodNotAllowed("m", ["GET", "PUT"]).headers) == {"Allow": "GET, PUT"}


def test_each_class_carries_its_message_and_body():
    for cls in (
        InvalidRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        NotAcceptable,
        PayloadTooLarge,
        Throttled,
    ):
        err = cls("field: broke the rule")
        assert type(err) is cls and err.message == str(err) == "field: broke the rule"
        assert err.body() == {"error": {"code": cls.code, "message": "field: broke the rule"}}
    gone = TopicNotFound("orders")
    assert type(gone) is TopicNotFound and isinstance(gone, NotFound)
    assert gone.body() == {
        "error": {"code": "topic_not_found", "message": "topic 'orders' does not exist"}
    }
