-- One run lifecycle (issue 35): a run that failed says where and why, and the run tables stay
-- bounded.
--
-- pipeline_runs.failed_step / failure_reason: the task or step that failed for good and its
--   one-line reason (NULL while running, and for a run that passed or failed its gate).
--   A re-run of the run id (start) clears them.
-- reconcile_summary_pruned: per warehouse, consumer, topic and status, the net verdicts
--   (sum of count - revised) of the runs pruned so far, so the cumulative summary a full audit
--   must reproduce still holds every run ever judged once their own rows are gone.
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS failed_step text;
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS failure_reason text;
CREATE INDEX IF NOT EXISTS pipeline_runs_warehouse ON pipeline_runs (warehouse, started_at);

CREATE TABLE reconcile_summary_pruned (
    warehouse  text   NOT NULL,
    consumer   text   NOT NULL,
    topic      text   NOT NULL,
    status     text   NOT NULL,
    net        bigint NOT NULL,
    PRIMARY KEY (warehouse, consumer, topic, status)
);
