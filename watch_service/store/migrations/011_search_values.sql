-- The search index indexes the VALUES of each document (strings and numbers, at any depth),
-- not its JSON keys: 004 built body from data::text, so every document matched its own field
-- names ('amt':1). body becomes a stored generated column, so the sink, the backfill and any
-- other writer get the same vector without computing it (jsonb_to_tsvector with an explicit
-- configuration is immutable). Dropping the column drops its GIN index; both are rebuilt here.
ALTER TABLE search_documents DROP COLUMN body;
ALTER TABLE search_documents
    ADD COLUMN body tsvector NOT NULL
    GENERATED ALWAYS AS (jsonb_to_tsvector('simple', data, '["string", "numeric"]')) STORED;
CREATE INDEX search_documents_body ON search_documents USING gin (body);
-- Search pages are ranked within one topic or over a key's topics; the topic filter comes first.
CREATE INDEX search_documents_topic ON search_documents (topic);
