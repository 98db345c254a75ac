"""watch_service/storage.py: how a location is named (pure: parse, join, uri, hadoop_uri, the
refusals and their messages, the S3 settings) and what a Storage does with one, on a local
folder and on a real S3 server (S3Proxy): whole-object writes, reads, listings, deletes,
Parquet."""

from __future__ import annotations

import datetime as dt
import threading

import pyarrow as pa
import pytest

from watch_service.protocol import sigv4
from watch_service.storage import (
    TMP_PREFIX,
    Location,
    S3Config,
    Storage,
    StorageError,
    hadoop_conf,
)

from .support import ON_BOTH_STORAGES, ON_S3

SUPPORTED = (
    "use a local path, file:///absolute/path or s3://bucket/prefix (supported schemes: file, s3)"
)


@pytest.mark.unit
def test_a_path_or_file_uri_is_an_absolute_local_location(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = Location("file", str(tmp_path / "land"))
    assert Location.parse("land") == Location.parse(tmp_path / "land") == local
    assert Location.parse(f"file://{tmp_path}/land/") == local
    assert Location.parse(f"file://localhost{tmp_path}/land") == local
    assert Location.parse(f" {tmp_path}/land/./x/.. ") == local
    assert local.is_local and local.uri == f"file://{tmp_path}/land"
    assert local.hadoop_uri == f"file://{tmp_path}/land" and local.fs_path == f"{tmp_path}/land"
    assert local.local_path() == tmp_path / "land" and str(local) == local.uri


@pytest.mark.unit
def test_an_s3_uri_is_a_bucket_and_a_clean_prefix():
    loc = Location.parse("S3://bars/landing/zone/")
    assert loc == Location("s3", "landing/zone", "bars") and not loc.is_local
    assert loc.uri == "s3://bars/landing/zone" and loc.hadoop_uri == "s3a://bars/landing/zone"
    assert loc.fs_path == "bars/landing/zone"
    root = Location.parse("s3://bars")
    assert (root.uri, root.hadoop_uri, root.fs_path) == ("s3://bars", "s3a://bars", "bars")
    with pytest.raises(
        StorageError, match=r"^s3://bars/landing/zone is not on a local filesystem$"
    ):
        loc.local_path()


@pytest.mark.unit
def test_join_stays_inside_the_location():
    s3 = Location.parse("s3://bars/landing")
    assert s3.join("c1", "faults/part-1.jsonl").uri == "s3://bars/landing/c1/faults/part-1.jsonl"
    assert Location.parse("s3://bars").join("c1").uri == "s3://bars/c1"
    assert s3.join() == s3 and s3.join(".") == s3
    assert Location.parse("/data/land").join("c1", "state.json").path == "/data/land/c1/state.json"
    for bad in ("../up", "/abs", "c1/../../up"):
        with pytest.raises(StorageError, match="not a relative path inside s3://bars/landing"):
            s3.join(bad)


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, message",
    [
        ("gs://bars/landing", f"unsupported location 'gs://bars/landing': {SUPPORTED}"),
        ("abfss://c@acct.dfs.core.windows.net/x", "unsupported location 'abfss://c@acct"),
        ("s3:/bars/landing", f"unsupported location 's3:/bars/landing': {SUPPORTED}"),
        ("file:relative", "unsupported location 'file:relative'"),
        ("S3://Bad_Bucket", "location 'S3://Bad_Bucket': 'Bad_Bucket' is not a valid bucket name"),
        (
            "s3://b..x/y",
            "location 's3://b..x/y': 'b..x' is not a valid bucket name (3-63 characters:",
        ),
        ("s3://ab/y", "location 's3://ab/y': 'ab' is not a valid bucket name"),
        (
            "s3://bars/a/../b",
            "location 's3://bars/a/../b': the prefix holds an empty, . or .. part",
        ),
        ("s3://bars/a//b", "location 's3://bars/a//b': the prefix holds an empty, . or .. part"),
        ("s3://bars/x?versionId=1", "location 's3://bars/x?versionId=1': no query or fragment"),
        ("file://host/x", "location 'file://host/x': file:// takes no host (file:///abs/path)"),
        ("  ", "empty location: give a path, file:///… or s3://bucket/prefix"),
    ],
)
def test_what_is_refused_and_why(text, message):
    with pytest.raises(StorageError) as caught:
        Location.parse(text)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


@pytest.mark.unit
def test_s3_settings_come_from_the_standard_aws_variables():
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "ak",
        "AWS_SECRET_ACCESS_KEY": "sk",
        "AWS_DEFAULT_REGION": "eu-west-3",
    }
    cfg = S3Config.from_env(env)
    assert cfg == S3Config("http://127.0.0.1:9000", "ak", "sk", None, "eu-west-3")
    assert S3Config.from_env(env | {"AWS_ENDPOINT_URL_S3": "https://s3.example"}).secure
    assert not cfg.secure and cfg.environ() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "ak",
        "AWS_SECRET_ACCESS_KEY": "sk",
        "AWS_REGION": "eu-west-3",
    }
    assert S3Config.from_env({}) == S3Config(region="us-east-1")
    with pytest.raises(StorageError, match=r"^AWS_ENDPOINT_URL='minio:9000': expected http\(s\)"):
        S3Config.from_env({"AWS_ENDPOINT_URL": "minio:9000"})
    conf = cfg.hadoop_conf()
    assert conf["fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["fs.s3a.path.style.access"] == "true"
    assert conf["fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["fs.s3a.access.key"] == "ak" and conf["fs.s3a.endpoint.region"] == "eu-west-3"
    assert hadoop_conf([Location.parse("/x")], cfg) == {}
    assert hadoop_conf([Location.parse("/x"), Location.parse("s3://bars/w")], cfg) == conf
    props = cfg.pyiceberg_properties()
    assert props["s3.endpoint"] == "http://127.0.0.1:9000" and props["s3.access-key-id"] == "ak"


@pytest.mark.unit
def test_a_get_is_signed_as_aws_documents_it():
    """AWS's published Signature Version 4 example (GET Object with a Range header)."""
    headers = sigv4.sign(
        "GET",
        "examplebucket.s3.amazonaws.com",
        "/test.txt",
        {"Range": "bytes=0-9"},
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "us-east-1",
        dt.datetime(2013, 5, 24, tzinfo=dt.UTC),
    )
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )
    assert headers["x-amz-date"] == "20130524T000000Z"
    assert sigv4.object_url("http://127.0.0.1:9000", "r", "bars", "a b/c~d.json") == (
        "http://127.0.0.1:9000/bars/a%20b/c~d.json",
        "127.0.0.1:9000",
        "/bars/a%20b/c~d.json",
    )
    assert sigv4.object_url(None, "eu-west-3", "bars", "k")[0] == (
        "https://s3.eu-west-3.amazonaws.com/bars/k"
    )
    assert "sk" not in repr(S3Config("http://e", "ak", "sk", "tok"))


@ON_BOTH_STORAGES
def test_whole_objects_are_written_read_listed_and_deleted(landing_location):
    store = landing_location
    store.ensure()
    assert store.read_bytes("c1/state.json") is None and not store.exists("c1")
    assert store.files("c1") == [] and store.folders() == []
    store.write_bytes("c1/state.json", b'{"frame_no": 1}')
    store.write_bytes("c1/state.json", b'{"frame_no": 22}')  # replaced whole
    store.write_bytes("c1/faults/part-1.jsonl", b"x\n")
    store.write_bytes("c2/state.json", b"{}")
    assert store.read_bytes("c1/state.json") == b'{"frame_no": 22}'
    assert store.exists("c1/state.json") and store.exists("c1")
    assert store.folders() == ["c1", "c2"]
    assert store.files("c1") == [("state.json", 16)]
    assert store.files("c1", recursive=True) == [("faults/part-1.jsonl", 2), ("state.json", 16)]
    c1 = store.child("c1")
    assert c1.uri() == store.uri("c1") == f"{store.uri()}/c1"
    assert c1.read_bytes("faults/part-1.jsonl") == b"x\n" and c1.files("faults") == [
        ("part-1.jsonl", 2)
    ]
    c1.delete("state.json")
    c1.delete("state.json")  # already gone: nothing to do
    assert c1.read_bytes("state.json") is None
    store.delete_tree("c2")
    store.delete_tree("c9")
    assert store.files(recursive=True) == [("c1/faults/part-1.jsonl", 2)]
    assert store.remove_temp_files() == []


@ON_BOTH_STORAGES
def test_parquet_is_one_whole_object_with_its_metadata(landing_location):
    table = pa.table({"seq": pa.array([1, 2], pa.int64())}).replace_schema_metadata({b"k": b"v"})
    landing_location.write_parquet("c1/part-1.parquet", table)
    assert landing_location.parquet_schema("c1/part-1.parquet").metadata == {b"k": b"v"}
    back = landing_location.read_parquet("c1/part-1.parquet", columns=["seq"])
    assert back.column("seq").to_pylist() == [1, 2]


def test_local_temp_files_are_hidden_and_cleared_and_locks_exclude(landing_location):
    store = landing_location
    store.write_bytes("c1/state.json", b"{}")
    folder = store.location.local_path() / "c1"
    (folder / f"{TMP_PREFIX}state.json").write_bytes(b"{")
    assert store.files("c1") == [("state.json", 2)]
    assert store.child("c1").remove_temp_files() == [f"{TMP_PREFIX}state.json"]
    held = store.lock_file("c1/.lock")
    assert held is not None and store.lock_file("c1/.lock") is None
    held.release()
    again = store.lock_file("c1/.lock")
    assert again is not None
    again.release()


@ON_BOTH_STORAGES
def test_an_object_replaced_while_it_is_read_comes_back_whole(landing_location):
    """A reader of a state.json a live sink keeps replacing gets one version, never a mix
    (pyarrow's HEAD + ranged GET returned the new version cut to the old size)."""
    short, long = b'{"v": "' + b"a" * 300 + b'"}', b'{"v": "' + b"b" * 340 + b'"}'
    landing_location.write_bytes("c1/state.json", short)
    done = threading.Event()

    def replace() -> None:
        for n in range(40):
            landing_location.write_bytes("c1/state.json", long if n % 2 == 0 else short)
        done.set()

    writer = threading.Thread(target=replace)
    writer.start()
    seen = []
    while not done.is_set():
        seen.append(landing_location.read_bytes("c1/state.json"))
    writer.join()
    assert seen and set(seen) <= {short, long}


@ON_S3
def test_s3_has_no_file_locks_and_a_missing_bucket_is_named(landing_location, object_store):
    with pytest.raises(StorageError, match=r"file locks exist only on a local filesystem$"):
        landing_location.lock_file("c1/.lock")
    missing = Storage.at("s3://no-such-bucket/x", object_store.config)
    with pytest.raises(
        StorageError,
        match=rf"^s3://no-such-bucket/x: bucket 'no-such-bucket' does not exist "
        rf"\(endpoint {object_store.endpoint}\)$",
    ):
        missing.ensure()
