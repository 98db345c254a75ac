-- Versioned authorization schemas for both dialects (Permify schema language, SpiceDB
-- schema language) in the one table 005 created. A tenant has one history per dialect; the
-- latest row of (tenant, dialect) is the schema its writes are validated against.
--   source       the schema text exactly as written (was `body`)
--   definitions  the parsed form the dialect's validator uses (NULL for rows written before
--                this migration: their readers parse `source` again)
--   seq          the tenant change-topic seq of the change record the write appended
ALTER TABLE authz_schemas RENAME COLUMN body TO source;
ALTER TABLE authz_schemas ADD COLUMN dialect text NOT NULL DEFAULT 'permify';
ALTER TABLE authz_schemas ALTER COLUMN dialect DROP DEFAULT;
ALTER TABLE authz_schemas ADD COLUMN definitions jsonb;
ALTER TABLE authz_schemas ADD COLUMN seq bigint;
ALTER TABLE authz_schemas ADD CONSTRAINT authz_schemas_dialect
    CHECK (dialect IN ('permify', 'spicedb'));
DROP INDEX authz_schemas_latest;
CREATE INDEX authz_schemas_latest ON authz_schemas (tenant, dialect, created_at DESC, version DESC);
