-- Incremental reconciliation (issue 13). A reconcile run judges, per consumer and topic, only
-- the window (reconciled_through, watermark]; what it judged is committed here in the same
-- transaction as its reconcile_summary rows, so a crash before the commit leaves no trace and
-- a crash after it leaves a complete record.
--
-- reconcile_runs: one row per reconcile run, of one warehouse (the id in its _layout.json:
--   progress belongs to the Parquet tables it describes). batch_from..batch_to are the delivery batches
--   (compact's numbered, committed outputs) it read; the next run reads batches after the
--   highest batch_to. repairs_open: the run found repairable defects that no verify has yet
--   seen repaired; backfill and verify of later runs carry them forward until one does.
-- reconcile_windows: per run, consumer and topic, the window it judged: seqs in
--   (seq_from, seq_to]. start_seq is the consumer's scope start (seqs at or below it were
--   never owed), filter_node its node filter. reconciled_through of a (consumer, topic) is the
--   highest seq_to (view reconcile_progress).
CREATE TABLE reconcile_runs (
    run_id        text        PRIMARY KEY,
    warehouse     text        NOT NULL,
    batch_from    bigint      NOT NULL,
    batch_to      bigint      NOT NULL,
    repairs_open  boolean     NOT NULL DEFAULT false,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (batch_from <= batch_to + 1)
);

CREATE TABLE reconcile_windows (
    run_id       text   NOT NULL REFERENCES reconcile_runs (run_id) ON DELETE CASCADE,
    consumer     text   NOT NULL,
    topic        text   NOT NULL,
    start_seq    bigint NOT NULL,
    seq_from     bigint NOT NULL,
    seq_to       bigint NOT NULL,
    filter_node  text,
    PRIMARY KEY (run_id, consumer, topic),
    CHECK (start_seq <= seq_from AND seq_from <= seq_to)
);
CREATE INDEX reconcile_windows_progress ON reconcile_windows (consumer, topic, seq_to DESC);

CREATE INDEX reconcile_runs_warehouse ON reconcile_runs (warehouse, batch_to);

CREATE VIEW reconcile_progress AS
SELECT DISTINCT ON (r.warehouse, w.consumer, w.topic)
       r.warehouse, w.consumer, w.topic, w.start_seq, w.seq_to AS reconciled_through,
       w.filter_node, w.run_id
  FROM reconcile_windows w JOIN reconcile_runs r USING (run_id)
 ORDER BY r.warehouse, w.consumer, w.topic, w.seq_to DESC;

-- A run's summary holds its new verdicts (count) and the verdicts of earlier runs it revised
-- (a late copy turning an earlier silent_gap into delivered revises one silent_gap): the net
-- count of a status over all runs is sum(count - revised), what a full audit finds.
ALTER TABLE reconcile_summary ADD COLUMN IF NOT EXISTS revised bigint NOT NULL DEFAULT 0
    CHECK (revised >= 0);
