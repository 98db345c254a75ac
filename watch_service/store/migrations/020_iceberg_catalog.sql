-- The warehouse's Iceberg catalog (issue 24): Apache Iceberg's JDBC catalog keeps, per table,
-- the location of its current metadata file; a commit is one compare-and-swap UPDATE of that
-- row, so several writers are safe on any object store without a lock service. Its two tables
-- live in their own schema; Spark's JdbcCatalog (jdbc.schema-version=V1) and pyiceberg's
-- SqlCatalog both read and write them. The DDL is Iceberg's own (JdbcUtil, V1).
CREATE SCHEMA IF NOT EXISTS iceberg;

CREATE TABLE IF NOT EXISTS iceberg.iceberg_tables (
    catalog_name               varchar(255)  NOT NULL,
    table_namespace            varchar(255)  NOT NULL,
    table_name                 varchar(255)  NOT NULL,
    metadata_location          varchar(1000),
    previous_metadata_location varchar(1000),
    iceberg_type               varchar(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);

CREATE TABLE IF NOT EXISTS iceberg.iceberg_namespace_properties (
    catalog_name   varchar(255)  NOT NULL,
    namespace      varchar(255)  NOT NULL,
    property_key   varchar(255)  NOT NULL,
    property_value varchar(1000),
    PRIMARY KEY (catalog_name, namespace, property_key)
);

-- Every pipeline run records the Iceberg snapshot ids it left each warehouse table at
-- ({"audit_log": 123, "deliveries": 456, ...}): "the audit log as run X left it" is one
-- time-travel read, and maintenance never expires a snapshot a kept run references.
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS snapshots jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS warehouse text;
