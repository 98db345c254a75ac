-- Results of the Spark reconciliation pipeline (spark_jobs/): one row per pipeline run, and a
-- summary row per run, consumer, topic and status. Written only through idempotent upserts
-- keyed by run_id, so rerunning a run_id replaces its rows. IF NOT EXISTS keeps this
-- migration safe to apply over a database where the tables were created by hand.
CREATE TABLE IF NOT EXISTS pipeline_runs (
    run_id             text        PRIMARY KEY,
    status             text        NOT NULL DEFAULT 'running'
                                   CHECK (status IN ('running', 'passed', 'failed')),
    started_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    steps              jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- step -> {seconds, counts…}
    defects_found      bigint,     -- silent_gap + mismatch + phantom found by reconcile
    defects_remaining  bigint      -- the same after backfill; > 0 fails the quality gate
);

CREATE TABLE IF NOT EXISTS reconcile_summary (
    run_id        text        NOT NULL,
    consumer      text        NOT NULL,
    topic         text        NOT NULL,
    status        text        NOT NULL,   -- spark_jobs/common/statuses.py SUMMARY_STATUSES
    count         bigint      NOT NULL,   -- found by reconcile, before backfill
    remaining     bigint,                 -- defects only: left after backfill (NULL until verify)
    example_seqs  bigint[],               -- defects only: a few seqs still defective
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, consumer, topic, status),
    CHECK (count >= 0 AND (remaining IS NULL OR remaining BETWEEN 0 AND count))
);
CREATE INDEX IF NOT EXISTS reconcile_summary_defects
    ON reconcile_summary (run_id) WHERE remaining > 0;
