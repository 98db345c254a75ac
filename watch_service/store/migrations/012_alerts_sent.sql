-- alerts_sent: every operations alert the pipeline sent, once per (dag_id, run_id, kind) and
-- channel (email, webhook). A callback claims its row before sending (INSERT … ON CONFLICT DO
-- NOTHING), so a retried task, a re-run of the same Airflow run or a second callback process
-- sends nothing new; a send that fails gives its claim back. run_id is Airflow's run id; kind
-- names the finding (defects_found, verify_failed, sink_lag, deadline_missed).
CREATE TABLE alerts_sent (
    dag_id   text        NOT NULL,
    run_id   text        NOT NULL,
    kind     text        NOT NULL,
    channel  text        NOT NULL,
    sent_at  timestamptz NOT NULL DEFAULT now(),
    summary  text        NOT NULL DEFAULT '',
    PRIMARY KEY (dag_id, run_id, kind, channel)
);
