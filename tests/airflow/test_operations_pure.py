"""The operations layer's pure core: Airflow's ports derived together, alert messages rendered
(text, webhook JSON, autoescaped HTML), alert settings, and the verify deadline."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from auditsync_plugin import deadlines
from auditsync_plugin.notifications import alerts, alerts_render
from auditsync_plugin.notifications.notifiers import AlertSettings
from watch_service.settings import Settings, SettingsError
from watch_service.tools.airflow_env import airflow_env, api_server_env

pytestmark = pytest.mark.unit
BASE = "http://127.0.0.1:8093"


# -- one setting moves Airflow's port ---------------------------------------------------------
def test_the_default_port_and_everything_that_must_agree_with_it(tmp_path: Path):
    env = airflow_env(Settings(local_dir=tmp_path), {})
    assert {k: env[k] for k in api_server_env("127.0.0.1", 8080)} == {
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": "8080",
        "AIRFLOW__API__BASE_URL": "http://127.0.0.1:8080",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://127.0.0.1:8080/execution/",
    }


@pytest.mark.parametrize("name", ["AUDITSYNC_AIRFLOW_PORT", "AIRFLOW__API__PORT"])
def test_one_setting_moves_the_api_server_and_the_execution_api(tmp_path: Path, name: str):
    env = airflow_env(Settings(local_dir=tmp_path), {name: "8093"})
    assert env["AIRFLOW__API__PORT"] == "8093"
    assert env["AIRFLOW__API__BASE_URL"] == BASE
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"{BASE}/execution/"


def test_auditsync_airflow_port_wins_and_bad_values_are_named(tmp_path: Path):
    env = airflow_env(
        Settings(local_dir=tmp_path), {"AUDITSYNC_AIRFLOW_PORT": "9001", "AIRFLOW__API__PORT": "1"}
    )
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:9001/execution/"
    with pytest.raises(SettingsError, match="AUDITSYNC_AIRFLOW_PORT: expected a port number"):
        airflow_env(Settings(local_dir=tmp_path), {"AUDITSYNC_AIRFLOW_PORT": "http"})
    with pytest.raises(SettingsError, match="expected 1-65535"):
        airflow_env(Settings(local_dir=tmp_path), {"AUDITSYNC_AIRFLOW_PORT": "70000"})


def test_a_wildcard_bind_is_called_on_loopback():
    env = api_server_env("0.0.0.0", 8081)
    assert env["AIRFLOW__API__HOST"] == "0.0.0.0"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:8081/execution/"
    assert api_server_env("::1", 8081)["AIRFLOW__API__BASE_URL"] == "http://[::1]:8081"


# -- alert channels: off by default, one line each --------------------------------------------
def test_alerts_are_off_by_default_and_one_line_turns_each_on(tmp_path: Path):
    env = airflow_env(Settings(local_dir=tmp_path), {})
    assert not AlertSettings.from_env(env).enabled
    assert not any(k.startswith(("AUDITSYNC_ALERT", "AIRFLOW_CONN_AUDITSYNC_SMTP")) for k in env)
    hook = "https://hooks.slack.com/services/T0/B0/sekret"
    env = airflow_env(
        Settings(local_dir=tmp_path),
        {
            "AUDITSYNC_ALERT_EMAIL": "ops@example.com; oncall@example.com",
            "AUDITSYNC_ALERT_SMTP": "smtp://mailer:pw@mail.example:2525",
            "AUDITSYNC_ALERT_WEBHOOK": hook,
        },
    )
    assert json.loads(env["AIRFLOW_CONN_AUDITSYNC_ALERT_WEBHOOK"]) == {
        "conn_type": "http",
        "host": hook,
    }
    assert json.loads(env["AIRFLOW_CONN_AUDITSYNC_SMTP"]) == {
        "conn_type": "smtp",
        "host": "mail.example",
        "port": 2525,
        "login": "mailer",
        "password": "pw",
        "extra": {"disable_ssl": True, "disable_tls": True},
    }
    assert AlertSettings.from_env(env) == AlertSettings(
        email_to=("ops@example.com", "oncall@example.com"),
        smtp_conn_id="auditsync_smtp",
        webhook_conn_id="auditsync_alert_webhook",
    )
    with pytest.raises(SettingsError, match="AUDITSYNC_ALERT_SMTP: expected smtp://"):
        airflow_env(Settings(local_dir=tmp_path), {"AUDITSYNC_ALERT_SMTP": "http://m:25"})


# -- messages ----------------------------------------------------------------------------------
SUMMARY = [  # runs.run_summary rows: consumer, topic, status, count, remaining, example_seqs
    ("primary", "orders", "delivered", 388, 0, []),
    ("primary", "orders", "silent_gap", 12, 0, []),
    ("primary", "orders", "phantom", 1, 1, [407]),
    ("primary", "pay<b>", "mismatch", 2, 2, [5, 6, 7, 9]),
]
WINDOWS = [("primary", "orders", 0, 400), ("primary", "pay<b>", 0, 300)]
RUN = "audit_sync_20250601T120000Z_20250601T121500Z"
# spark_jobs.findings.build rows (the columns alerts read): pay<b>'s could not be read
FOUND = [
    {"consumer": "primary", "topic": "orders", "status": status, "seq_from": a, "seq_to": b}
    for status, a, b in [
        ("silent_gap", 11, 15),
        ("silent_gap", 20, 21),
        ("silent_gap", 22, 22),
        ("silent_gap", 30, 30),
        ("silent_gap", 40, 41),
        ("silent_gap", 50, 50),
        ("silent_gap", 60, 60),
        ("phantom", 407, 407),
    ]
]


def lines() -> tuple[alerts.Finding, ...]:
    defects = ("silent_gap", "mismatch", "phantom")
    return alerts.findings(SUMMARY, WINDOWS, defects, BASE, RUN, FOUND)


def test_ranges_are_collapsed_and_bounded():
    assert alerts_render.ranges([9, 3, 4, 5, 5]) == [(3, 5), (9, 9)]
    assert alerts_render.merge_spans([(9, 9), (3, 4), (5, 5), (4, 6)]) == [(3, 6), (9, 9)]
    assert alerts_render.format_ranges([5, 6, 7, 9]) == "5–7, 9"
    assert alerts_render.format_ranges(range(0, 20, 2), limit=2) == "0, 2 and 8 more"
    assert alerts_render.format_spans([(201, 300), (305, 305)]) == "201–300, 305"
    assert alerts_render.format_window((0, 400)) == "1–400"
    assert alerts_render.format_window((400, 400)) == ""


def test_a_run_with_defects_renders_counts_ranges_and_the_page_link():
    alert = alerts.run_alert(
        alerts.VERIFY_FAILED,
        "audit_sync",
        "manual__2025-06-01T12:20:00+00:00",
        RUN,
        ("failed", 15, 3, {}),
        lines(),
        BASE,
        error="Spark step verify did not pass",
    )
    assert alert is not None
    assert alerts_render.text(alert) == "\n".join(
        [
            "[auditsync] audit_sync: verify failed for run "
            "audit_sync_20250601T120000Z_20250601T121500Z: 3 of 15 defects remain after backfill",
            "pipeline run: audit_sync_20250601T120000Z_20250601T121500Z",
            "Airflow run: manual__2025-06-01T12:20:00+00:00",
            "status: failed",
            "defects found: 15",
            "defects left: 3",
            "consumer/topic pairs: 2",
            "- primary/orders silent_gap: found 12, left 0, seqs 11–15, 20–22, 30, 40–41, 50 "
            "and 1 more",
            "- primary/orders phantom: found 1, left 1, seqs 407, still defective 407",
            "- primary/pay<b> mismatch: found 2, left 2, window 1–300, still defective 5–7, 9",
            "Spark step verify did not pass",
            f"Reconciliation page: {BASE}/auditsync/",
            f"Findings: {BASE}/auditsync/findings?run={RUN}",
            f"Airflow run: {BASE}/dags/audit_sync/runs/manual__2025-06-01T12%3A20%3A00%2B00%3A00",
        ]
    )
    assert alerts_render.webhook_body(alert) == {"text": alerts_render.text(alert)}
    page = alerts_render.html(alert)
    assert "pay&lt;b&gt;" in page and "pay<b>" not in page  # autoescaped
    link = f"{BASE}/auditsync/findings?run={RUN}&amp;consumer=primary&amp;topic="
    assert f'<a href="{link}pay%3Cb%3E&amp;status=mismatch">findings</a>' in page
    assert "<td>5–7, 9</td>" in page and '<td class="bad">2</td>' in page
    assert "<td>11–15, 20–22, 30, 40–41, 50 and 1 more</td>" in page
    assert "<td>window 1–300</td>" in page


def test_a_clean_run_sends_nothing_and_a_repaired_one_says_so():
    found = alerts.DEFECTS_FOUND
    clean = [("primary", "orders", "delivered", 400, 0, [])]
    assert not alerts.findings(clean, WINDOWS, ("silent_gap",), BASE, RUN)
    assert alerts.run_alert(found, "d", "r", "p", ("passed", 0, 0, {}), (), BASE) is None
    repaired = [f for f in lines() if f.status == "silent_gap"]
    alert = alerts.run_alert(found, "d", "r", "p", ("passed", 12, 0, {}), repaired, BASE)
    assert alert is not None and alert.title == "d: run p found 12 defects (all repaired)"


STEPS = {"reconcile": {"rewound": {"q": [[21, 30]], "orders": [[201, 300], [305, 305]]}}}
REWOUND_LINE = (
    " source_rewound: seqs {}: the source lost these acknowledged seqs (a failover to a "
    "lagging replica or a restore) and writes them again: consumers may hold other content "
    "for them"
)


def test_a_rewound_source_is_carried_by_the_alert_even_without_defects():
    """``source_rewound``: one line per topic naming the ranges and the reason, in the
    webhook's text and the e-mail's own table; a rewind alone is worth an alert."""
    assert alerts.rewinds(STEPS) == (
        alerts.Rewound("orders", ((201, 300), (305, 305))),
        alerts.Rewound("q", ((21, 30),)),
    )
    assert alerts.rewinds({}) == alerts.rewinds(None) == ()
    row = ("passed", 0, 0, STEPS)
    alert = alerts.run_alert(alerts.DEFECTS_FOUND, "d", "r", "p", row, (), BASE)
    assert alert is not None
    assert alert.title == "d: run p found 0 defects (all repaired); source rewound on orders, q"
    assert alerts_render.text(alert).splitlines()[7:9] == [
        "- orders" + REWOUND_LINE.format("201–300, 305"),
        "- q" + REWOUND_LINE.format("21–30"),
    ]
    page = alerts_render.html(alert)
    assert '<table id="rewound" class="rewound">' in page
    assert (
        '<tr><td>orders</td><td class="rewound">201–300, 305</td><td>the source lost these '
        "acknowledged seqs (a failover to a lagging replica or a restore) and writes them "
        "again: consumers may hold other content for them</td></tr>"
    ) in page


def test_lag_and_deadline_alerts():
    lag = alerts.lag_alert(
        "audit_sync",
        "r1",
        [alerts.Lagging("primary", "orders", 380, 400), alerts.Lagging("b", "t", 1, 2)],
        "timed out",
        BASE,
    )
    assert lag.title == (
        "audit_sync: sinks lag behind the service for run r1: b, primary (20 seqs behind)"
    )
    assert "- primary/orders: cursor 380, head 400, 20 seqs behind" in alerts_render.text(lag)
    assert '<td class="bad">20</td>' in alerts_render.html(lag)
    late = alerts.deadline_alert("audit_sync", "r2", ("12:00", "12:15"), "13:00", BASE)
    assert late.title == "audit_sync: data interval 12:00 – 12:15 not verified by 13:00"
    assert late.kind == alerts.DEADLINE_MISSED


# -- deadline ------------------------------------------------------------------------------------
def test_the_deadline_is_three_periods_after_the_interval_by_default():
    assert deadlines.schedule_period("*/15 * * * *") == timedelta(minutes=15)
    assert deadlines.schedule_period("0 9 * * 1-5") == timedelta(days=3)  # Friday → Monday
    assert deadlines.verify_deadline("*/15 * * * *") == (
        timedelta(minutes=45),
        timedelta(minutes=60),
    )
    assert deadlines.verify_deadline("*/15 * * * *", "600") == (
        timedelta(minutes=10),
        timedelta(minutes=25),
    )
    with pytest.raises(ValueError, match="AUDITSYNC_VERIFY_DEADLINE_S"):
        deadlines.verify_deadline("*/15 * * * *", "soon")


def test_no_deadline_under_dags_test():
    """`airflow dags test` has no scheduler to watch a deadline, and Airflow 3.3.2's
    ``dag.test()`` fails a successful run of a DAG carrying one."""
    week = timedelta(days=7)
    assert deadlines.dag_deadline(week, {}, ["/venv/bin/airflow", "dags", "test", "x"]) is None
    alert = deadlines.dag_deadline(week, {}, ["/venv/bin/airflow", "scheduler"])
    assert alert is not None and alert.interval == week
    assert alert.callback.path == "auditsync_plugin.notifications.notifiers.deadline_missed"


# -- every Airflow setting is one Airflow reads -------------------------------------------------
def airflow_options(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {
        name: tuple(name.removeprefix("AIRFLOW__").lower().split("__", 1))  # type: ignore[misc]
        for name in env
        if name.startswith("AIRFLOW__")
    }


def test_every_airflow_setting_names_an_option_airflow_reads(tmp_path: Path):
    """Airflow ignores a setting under an old section without a word: the DAG processor's parse
    interval was set as ``AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL``, which Airflow 3 no
    longer reads (it moved to ``[dag_processor]``). Each ``AIRFLOW__SECTION__KEY`` the local setup
    and the compose file set is an option of this Airflow's configuration, or a per-component
    override its description names (``[scheduler] mp_start_method``: "overridden per component
    by setting ``mp_start_method`` in the ``[scheduler]`` … section")."""
    import yaml
    from airflow.configuration import conf

    described = conf.configuration_description
    known = {(section, key) for section, d in described.items() for key in d.get("options", {})}
    start = described["core"]["options"]["mp_start_method"]["description"]
    known |= {
        (section, "mp_start_method")
        for section in ("scheduler", "triggerer", "dag_processor")
        if f"``[{section}]``" in start
    }
    compose = yaml.safe_load((Path(__file__).parents[2] / "docker-compose.yml").read_text())
    envs = {"airflow_env": airflow_env(Settings(local_dir=tmp_path), {})}
    for name, service in compose["services"].items():
        if isinstance(service.get("environment"), dict):
            envs[name] = service["environment"]
    unknown = {
        (where, name)
        for where, env in envs.items()
        for name, (section, key) in airflow_options(env).items()
        if (section, key) not in known
    }
    assert unknown == set()
    assert airflow_options(envs["airflow_env"])["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"]


def test_a_failed_log_check_names_its_topic_and_first_bad_seq():
    why = "orders: seq 5 differs from the signed log: the audit log has no row of it; the signed log holds a record"  # noqa: E501
    steps = {"verify": {"passed": False, "log_failure": {"topic": "orders", "seq": 5, "why": why}}}
    assert alerts.log_failure(steps) == ("topic orders, first bad seq 5", why)
    assert alerts.log_failure({"verify": {"log_failure": None}}) is None
    alert = alerts.run_alert(alerts.VERIFY_FAILED, "d", "r", "p", ("failed", 0, 0, steps), (), BASE)
    assert alert is not None
    assert alert.title == (
        "d: verify failed for run p; the signed audit log does not verify (topic orders, first "
        "bad seq 5)"
    )
    assert f"signed audit log: topic orders, first bad seq 5: {why}" in alerts_render.text(alert)
    assert "first bad seq 5: orders: seq 5 differs" in alerts_render.html(alert)
    tiles = {"verify": {"log_failure": {"topic": "q", "seq": None, "why": "the tiles of q: …"}}}
    assert alerts.log_failure(tiles) == ("topic q", "the tiles of q: …")
