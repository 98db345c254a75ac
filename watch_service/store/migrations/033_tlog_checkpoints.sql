-- The signed audit log (issue 33): each run's checkpoint per topic, beside its snapshot ids.
--
-- pipeline_runs.checkpoints: topic -> {old_size, checked: [start, end], swept, size, root,
--   note}: the signed seqs verify re-checked (start, end], the next run's sweep cursor, and the
--   C2SP checkpoint it signed (size, base64 root hash, the signed note's text).
-- pipeline_runs.log_status: 'signed', 'unsigned: <why>' (no signing key configured), or
--   'failed: <topic>: seq N differs …' (the audit log no longer matches what was signed).
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS checkpoints jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS log_status text;
