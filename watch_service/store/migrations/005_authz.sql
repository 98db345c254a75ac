-- Authorization data (seeds 000 Permify, 001 SpiceDB): tenants, relationship tuples,
-- attributes and versioned schema text. Every change is also appended, in the same
-- transaction, to the tenant's change topic (see store/authz.py); this schema holds only
-- the current state. '' is the "no subject relation" value, so the primary key works.
CREATE TABLE authz_tenants (
    id          text        PRIMARY KEY,
    name        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO authz_tenants (id, name) VALUES ('t1', 't1');

CREATE TABLE authz_tuples (
    tenant            text NOT NULL REFERENCES authz_tenants (id) ON DELETE CASCADE,
    entity_type       text NOT NULL,
    entity_id         text NOT NULL,
    relation          text NOT NULL,
    subject_type      text NOT NULL,
    subject_id        text NOT NULL,
    subject_relation  text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, entity_type, entity_id, relation, subject_type, subject_id,
                 subject_relation)
);
CREATE INDEX authz_tuples_subject ON authz_tuples (tenant, subject_type, subject_id);

CREATE TABLE authz_attributes (
    tenant       text  NOT NULL REFERENCES authz_tenants (id) ON DELETE CASCADE,
    entity_type  text  NOT NULL,
    entity_id    text  NOT NULL,
    attribute    text  NOT NULL,
    value        jsonb NOT NULL,   -- the typed value as sent: {"@type": ..., "data": ...}
    PRIMARY KEY (tenant, entity_type, entity_id, attribute)
);

CREATE TABLE authz_schemas (
    tenant      text        NOT NULL REFERENCES authz_tenants (id) ON DELETE CASCADE,
    version     text        NOT NULL,
    body        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, version)
);
CREATE INDEX authz_schemas_latest ON authz_schemas (tenant, created_at DESC);
