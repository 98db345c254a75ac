-- search_index_marks: how far each sink has indexed, kept in the index's own database (issue
-- 32). The sink's landing state says the same (indexed_frame_no), but a restore or failover of
-- this database takes the index back in time while the sink's state survives: the sink then
-- compares the two and re-indexes from the lower one. The row goes back with the documents.
CREATE TABLE IF NOT EXISTS search_index_marks (
    consumer    text        PRIMARY KEY,
    frame_no    bigint      NOT NULL CHECK (frame_no >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- The pipeline's index verify reads a window of one topic's documents by seq.
CREATE INDEX IF NOT EXISTS search_documents_topic_seq ON search_documents (topic, seq);
-- index_scrubs: per warehouse and topic, how far the pipeline's index verify has re-checked
-- the verified history (beyond each run's own windows); it starts over from the bottom once
-- it reaches the newest verified seq (spark_jobs/verify/index_plan.py).
CREATE TABLE IF NOT EXISTS index_scrubs (
    warehouse         text        NOT NULL,
    topic             text        NOT NULL,
    scrubbed_through  bigint      NOT NULL CHECK (scrubbed_through >= 0),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (warehouse, topic)
);
