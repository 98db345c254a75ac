-- One wid, one stream: every GET takes the session's next stream generation. A stream's cursor
-- writes and its closing write carry its generation, so once a newer stream took over, the
-- older one's writes match no row (and it ends), wherever it runs.
ALTER TABLE watch_sessions ADD COLUMN stream_gen bigint NOT NULL DEFAULT 0;
