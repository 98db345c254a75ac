"""The settings a pipeline JVM starts with on a local master (``session.local_conf``): what a
run's JVM, a DAG step's spark-submit and the Spark Connect server are given, as flags."""

from __future__ import annotations

import pytest

from spark_jobs.common.session import (
    SHORT_JVM_OPTIONS,
    jvm_conf,
    local_conf,
    local_cores,
    submit_flags,
)

pytestmark = pytest.mark.unit


def test_a_local_master_names_its_cores():
    assert [local_cores(m) for m in ("local", "local[2]", "local[3,2]", "local[8]")] == [1, 2, 3, 8]
    assert local_cores("local[*]") is not None and local_cores("local[*]") >= 1
    for other in ("spark://127.0.0.1:7077", "yarn", "local-cluster[2,1,1024]", None):
        assert local_cores(other) is None


def test_a_run_jvm_on_a_local_master_gets_c1_the_serial_collector_and_a_partition_per_core():
    assert local_conf("local[2]") == {
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }
    assert SHORT_JVM_OPTIONS == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    conf = jvm_conf(master="local[3]")
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf["spark.driver.extraJavaOptions"] == SHORT_JVM_OPTIONS


def test_a_long_lived_server_keeps_the_tiered_jit_and_a_cluster_gets_spark_s_defaults():
    assert local_conf("local[2]", long_lived=True) == {"spark.sql.shuffle.partitions": "2"}
    server = submit_flags(master="local[2]", long_lived=True)
    assert "spark.sql.shuffle.partitions=2" in server
    assert not any(f.startswith("spark.driver.extraJavaOptions") for f in server)
    assert local_conf("spark://127.0.0.1:7077") == {}
    cluster = submit_flags(master="spark://127.0.0.1:7077")
    assert not any(f.startswith(("spark.sql.shuffle", "spark.driver.extraJava")) for f in cluster)
