-- session_marks (issue 32): per warehouse, each watch session's cursor per topic as the
-- pipeline last saw it at the source, with the session's stream generation and the payload
-- hash of the record at that cursor. The pipeline's memory of what the source had served: a
-- later run that finds a session's cursor below its mark reports the seqs between as
-- source_rewound (spark_jobs/steps/reconcile/session_cursors.py). A run replaces the
-- warehouse's rows in its commit, so the table holds one row per live session and topic.
CREATE TABLE IF NOT EXISTS session_marks (
    warehouse     text        NOT NULL,
    wid           text        NOT NULL,
    topic         text        NOT NULL,
    cursor        bigint      NOT NULL,
    stream_gen    bigint      NOT NULL,
    payload_hash  text,                   -- NULL: no record at the cursor (0, a gap)
    run_id        text        NOT NULL,
    seen_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (warehouse, wid, topic)
);
