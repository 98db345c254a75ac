"""Operators (the provider layout): the Spark step (Spark Connect or spark-submit), the run's
start, quality checkpoint and publish, its finish and pruning, and landing retention."""
