-- A stream's cursor writes (several a second per stream, batched by the cursor flusher) change
-- no indexed column (store/sessions: last_active_at moves with the lease renewal only), so they
-- can be heap-only updates: the new row version on the same page, no new index entries. That
-- needs free room on the page; pages filled to 70 % keep it.
ALTER TABLE watch_sessions SET (fillfactor = 70);
