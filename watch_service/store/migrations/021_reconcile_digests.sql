-- reconcile_digests: one hash per range of seqs a reconcile run judged, over the source as it
-- judged it: sha256 of the lines "<seq>:<sha256 hex of data>\n" of the range's records in seq
-- order. Seqs never change (invariant L2), so a range whose digest changed was written again:
-- the source was rewound (failover to a lagging replica, a restore). Written in the same
-- transaction as the run's reconcile_runs row; a later run re-hashes only the ranges its late
-- copies, landed rewound frames or a head below them point at.
CREATE TABLE reconcile_digests (
    warehouse  text   NOT NULL,
    topic      text   NOT NULL,
    seq_from   bigint NOT NULL,
    seq_to     bigint NOT NULL,
    digest     text   NOT NULL,
    run_id     text   NOT NULL,
    PRIMARY KEY (warehouse, topic, seq_from, seq_to),
    CHECK (seq_from <= seq_to)
);
CREATE INDEX reconcile_digests_reach ON reconcile_digests (warehouse, topic, seq_to);
