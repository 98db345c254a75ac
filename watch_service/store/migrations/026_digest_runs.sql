-- Bounded reconcile_digests (issue 35): pruning runs merges the partial ranges the pruned runs
-- judged into their block's one range and drops ranges the source has trimmed
-- (watch_service.store.run_retention). This index finds a pruned run's ranges without reading
-- the warehouse's others.
CREATE INDEX IF NOT EXISTS reconcile_digests_run ON reconcile_digests (warehouse, run_id);
