"""watch_service/storage.py: how a location is named (pure: parse, join, uri, hadoop_uri, the
refusals and their messages, the S3 settings) and what a Storage does with one, on a local
folder and on a real S3 server (S3Proxy): whole-object writes, reads, listings, deletes,
Parquet."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pyarrow as pa
import pytest

from tests.conftest import TEST_BUCKET
from tests.support import ON_BOTH_STORAGES, ON_S3, unique
from watch_service.storage import (
    TMP_PREFIX,
    Location,
    S3Config,
    Storage,
    StorageError,
    hadoop_conf,
)

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
def test_without_keys_each_client_walks_the_default_chain_or_the_named_profile(
    tmp_path, monkeypatch
):
    """No keys: s3a gets the AWS SDK's default chain, pyarrow and pyiceberg get no keys (the
    AWS C++ SDK's own chain). A named profile: s3a reads it by name (then the chain), and the
    clients that take no profile name get the profile's keys, resolved by botocore."""
    bare = S3Config("http://127.0.0.1:9")
    assert bare.hadoop_conf()["fs.s3a.aws.credentials.provider"] == (
        "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
    )
    assert "fs.s3a.access.key" not in bare.hadoop_conf() and bare.keys() is None
    assert not {"s3.access-key-id", "s3.secret-access-key"} & set(bare.pyiceberg_properties())
    assert "AWS_PROFILE" not in bare.environ()

    credentials = tmp_path / "credentials"
    credentials.write_text("[ops]\naws_access_key_id = PK\naws_secret_access_key = PS\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent"))
    named = S3Config("http://127.0.0.1:9", profile="ops")
    conf = named.hadoop_conf()
    assert conf["fs.s3a.aws.credentials.provider"] == (
        "org.apache.hadoop.fs.s3a.auth.ProfileAWSCredentialsProvider,"
        "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
    )
    assert conf["fs.s3a.auth.profile.name"] == "ops" and "fs.s3a.access.key" not in conf
    assert named.keys() == ("PK", "PS", None)
    props = named.pyiceberg_properties()
    assert (props["s3.access-key-id"], props["s3.secret-access-key"]) == ("PK", "PS")
    assert named.environ()["AWS_PROFILE"] == "ops"
    # explicit keys win over a profile
    assert S3Config(access_key="ak", secret_key="sk", profile="ops").keys() == ("ak", "sk", None)
    with pytest.raises(StorageError, match=r"^AWS profile 'nope': "):
        S3Config(profile="nope").keys()
    assert "sk" not in repr(S3Config("http://e", "ak", "sk", "tok"))


@pytest.mark.s3
def test_the_tests_s3_server_refuses_unsigned_requests(object_store):
    """The S3 server the suite runs on answers an unsigned GET, HEAD or LIST with 403
    AccessDenied, as AWS does for a private bucket: a client that forgot to sign fails here."""
    store = Storage.at(f"s3://{TEST_BUCKET}/{unique('unsigned')}", object_store.config)
    store.write_bytes("c1/state.json", b"{}")
    assert store.read_bytes("c1/state.json") == b"{}"  # signed: served
    base = f"{object_store.endpoint}/{TEST_BUCKET}"
    unsigned = [
        ("GET", f"{base}/{store.location.path}/c1/state.json"),
        ("HEAD", f"{base}/{store.location.path}/c1/state.json"),
        ("GET", f"{base}?list-type=2&prefix={store.location.path}/"),
        ("GET", base),
        ("PUT", f"{base}/{store.location.path}/c1/other.json"),
    ]
    answers = []
    for method, url in unsigned:
        request = urllib.request.Request(url, method=method, data=b"x" if method == "PUT" else None)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        body = refused.value.read()
        answers.append((method, refused.value.code, b"<Code>AccessDenied</Code>" in body))
    assert answers == [
        ("GET", 403, True),
        ("HEAD", 403, False),  # a HEAD answer has no body
        ("GET", 403, True),
        ("GET", 403, True),
        ("PUT", 403, True),
    ]
    assert store.files("c1") == [("state.json", 2)]


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
