-- The topic log: topics with an exact head/earliest, their records, and the gaps that
-- retention and deletion leave (invariant L2: loss is recorded, never silent).
CREATE TABLE topics (
    name          text PRIMARY KEY,
    head_seq      bigint      NOT NULL DEFAULT 0,
    earliest_seq  bigint      NOT NULL DEFAULT 1,
    last_ts       bigint      NOT NULL DEFAULT 0,   -- keeps $ts non-decreasing per topic
    max_records   bigint      CHECK (max_records > 0),
    ttl_ms        bigint      CHECK (ttl_ms > 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz,                      -- kept so a recreate continues numbering
    CHECK (earliest_seq >= 1 AND earliest_seq <= head_seq + 1)
);

CREATE TABLE records (
    topic  text   NOT NULL,
    seq    bigint NOT NULL,
    ts     bigint NOT NULL,
    tag    text   CHECK (char_length(tag) BETWEEN 1 AND 256),
    node   text   CHECK (char_length(node) BETWEEN 1 AND 128),
    meta   json,
    data   json   NOT NULL,
    PRIMARY KEY (topic, seq)
);

CREATE TABLE gaps (
    topic        text        NOT NULL,
    gap_from     bigint      NOT NULL,
    gap_to       bigint      NOT NULL,
    reason       text        NOT NULL CHECK (reason IN ('cap', 'ttl', 'deleted')),
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, gap_from),
    CHECK (gap_from <= gap_to)
);
