-- The per-key cap on watch sessions counts a key's live sessions on every POST /v0/watch;
-- this index keeps that count proportional to the key's own sessions (at most the cap).
-- Sessions created in dev mode keep key_hash NULL, which binds them to dev mode: once keys
-- are configured they no longer open (store/sessions, server/watch_routes).
CREATE INDEX watch_sessions_key ON watch_sessions (key_hash) WHERE key_hash IS NOT NULL;
