"""How the plugin reaches the landing zone: an ``aws`` connection's fields as S3 settings
(pure), and the sinks' ``state.json`` read and discovered on a local folder and on S3."""

from __future__ import annotations

import json
import sys

import pytest

from auditsync_plugin.hooks.landing_store import (
    aws_conn_id_setting,
    hook_s3_config,
    landing_storage,
    s3_config,
)
from auditsync_plugin.sink_cursors import SinkPosition, read_positions
from watch_service.storage import S3Config, StorageError

from ..support import ON_BOTH_STORAGES, ON_S3, free_port

pytestmark = pytest.mark.airflow


@pytest.mark.unit
def test_an_aws_connection_becomes_s3_settings():
    extra = {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-3"}
    assert s3_config("s3_land", "AK", "SK", extra) == S3Config(
        endpoint="http://127.0.0.1:9000", access_key="AK", secret_key="SK", region="eu-west-3"
    )
    nested = {"service_config": {"s3": {"endpoint_url": "https://s3.example"}}}
    assert s3_config("c", "AK", "SK", nested).endpoint == "https://s3.example"
    token = {"aws_session_token": "T"}
    assert s3_config("c", None, "", token) == S3Config(session_token="T", region="us-east-1")
    named = {"profile_name": "ops", "region_name": "eu-west-3"}
    assert s3_config("c", None, None, named) == S3Config(region="eu-west-3", profile="ops")
    with pytest.raises(
        StorageError, match=r"^connection 'c': extra profile_name='': expected a profile's name$"
    ):
        s3_config("c", None, None, {"profile_name": ""})
    with pytest.raises(
        StorageError,
        match=r"^connection 'c': extra endpoint_url='minio:9000': expected http\(s\)://host",
    ):
        s3_config("c", "AK", "SK", {"endpoint_url": "minio:9000"})
    assert aws_conn_id_setting({"AUDITSYNC_AWS_CONN_ID": "s3_land"}) == "s3_land"
    assert aws_conn_id_setting({"AUDITSYNC_AWS_CONN_ID": ""}) is None
    with pytest.raises(StorageError, match="^unsupported location 'gs://bars/landing'"):
        landing_storage("gs://bars/landing")


@ON_BOTH_STORAGES
def test_state_files_are_read_and_discovered(landing_location):
    root = landing_location
    doc = {"wid": "w", "topics": ["a"], "cursors": {"a": 5}, "frame_no": 3}
    root.write_bytes("c1/state.json", json.dumps(doc).encode())
    root.write_bytes("broken/state.json", b"{not json")
    root.write_bytes("empty/part-000000000001-000000000001.parquet", b"PAR1")
    found, missing = read_positions(root, [])
    assert [p.consumer for p in found] == ["c1"] and missing == ["broken"]
    found, missing = read_positions(root, ["c1", "c2"])
    assert found == [SinkPosition("c1", ("a",), {"a": 5})] and missing == ["c2"]


@ON_S3
def test_an_s3_landing_is_read_with_the_named_aws_connection(
    landing_location, object_store, monkeypatch
):
    cfg = object_store.config
    conn = {
        "conn_type": "aws",
        "login": cfg.access_key,
        "password": cfg.secret_key,
        "extra": {"endpoint_url": cfg.endpoint, "region_name": cfg.region},
    }
    monkeypatch.setenv("AIRFLOW_CONN_S3_LANDING", json.dumps(conn))
    monkeypatch.setenv("AUDITSYNC_AWS_CONN_ID", "s3_landing")
    landing_location.write_bytes("c1/state.json", b'{"topics": ["a"], "cursors": {"a": 7}}')
    store = landing_storage(landing_location.uri())
    assert store.s3 == cfg
    assert read_positions(store) == ([SinkPosition("c1", ("a",), {"a": 7})], [])


@ON_S3
def test_the_amazon_providers_hook_reads_the_aws_connection(
    landing_location, object_store, monkeypatch
):
    """With the amazon provider installed, AwsBaseHook reads the connection: the keys are
    nowhere else (the S3 server refuses unsigned requests), and a role_arn makes the hook assume
    the role through STS first."""
    cfg = object_store.config
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    extra = {"service_config": {"s3": {"endpoint_url": cfg.endpoint}}, "region_name": cfg.region}
    conn = {"conn_type": "aws", "login": cfg.access_key, "password": cfg.secret_key}
    monkeypatch.setenv("AIRFLOW_CONN_S3_HOOKED", json.dumps({**conn, "extra": extra}))
    assert hook_s3_config("s3_hooked") == cfg
    landing_location.write_bytes("c1/state.json", b'{"topics": ["a"], "cursors": {"a": 3}}')
    store = landing_storage(landing_location.uri(), "s3_hooked")
    assert read_positions(store) == ([SinkPosition("c1", ("a",), {"a": 3})], [])

    sts = f"http://127.0.0.1:{free_port()}"  # nothing listens: STS cannot be reached
    role = {
        **extra,
        "role_arn": "arn:aws:iam::123456789012:role/landing-reader",
        "service_config": {**extra["service_config"], "sts": {"endpoint_url": sts}},
    }
    monkeypatch.setenv("AIRFLOW_CONN_S3_ROLE", json.dumps({**conn, "extra": role}))
    with pytest.raises(
        StorageError,
        match=rf"^connection 's3_role': AWS credentials: .*Could not connect to the endpoint "
        rf"URL: \"{sts}/\"",
    ):
        landing_storage(landing_location.uri(), "s3_role")


@ON_S3
def test_without_the_amazon_provider_the_connection_is_read_by_hand(
    landing_location, object_store, monkeypatch
):
    """The fallback: as if the provider were not installed, the connection's own fields."""
    monkeypatch.setitem(sys.modules, "airflow.providers.amazon.aws.hooks.base_aws", None)
    cfg = object_store.config
    extra = {"endpoint_url": cfg.endpoint, "region_name": cfg.region}
    conn = {"conn_type": "aws", "login": cfg.access_key, "password": cfg.secret_key}
    monkeypatch.setenv("AIRFLOW_CONN_S3_PLAIN", json.dumps({**conn, "extra": extra}))
    assert hook_s3_config("s3_plain") is None
    landing_location.write_bytes("c1/state.json", b'{"topics": ["a"], "cursors": {"a": 4}}')
    store = landing_storage(landing_location.uri(), "s3_plain")
    assert store.s3 == cfg
    assert read_positions(store) == ([SinkPosition("c1", ("a",), {"a": 4})], [])
