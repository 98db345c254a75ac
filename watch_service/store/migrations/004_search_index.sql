-- The search index the sink keeps live and the backfill repairs: one document per key, the
-- newest $seq wins. doc_key = topic || '/' || tag for tagged records, else topic || '/' || seq.
-- body = to_tsvector('simple', data::text); every writer computes it the same way.
CREATE TABLE search_documents (
    doc_key     text        PRIMARY KEY,
    topic       text        NOT NULL,
    seq         bigint      NOT NULL,
    ts          bigint      NOT NULL,
    tag         text,
    data        jsonb       NOT NULL,
    body        tsvector    NOT NULL,
    updated_at  timestamptz DEFAULT now()
);
CREATE INDEX search_documents_body ON search_documents USING gin (body);
