"""verify: defects left after backfill; the pipeline's quality gate."""
