-- SSE watch sessions (seed 002): the definition, the server-side cursor map, and the creating
-- key, so any replica (or this one after a restart) resumes a wid exactly.
CREATE TABLE watch_sessions (
    wid               text        PRIMARY KEY,
    definition        jsonb       NOT NULL,
    cursors           jsonb       NOT NULL,
    key_hash          text,                 -- sha256 of the creating key; NULL = dev mode
    key_id            text,
    key_scopes        text[],
    key_prefixes      text[],
    created_at        timestamptz NOT NULL DEFAULT now(),
    last_active_at    timestamptz NOT NULL DEFAULT now(),
    stream_lease_until timestamptz           -- an open stream renews this; GC never takes it
);
CREATE INDEX watch_sessions_idle ON watch_sessions (last_active_at);
