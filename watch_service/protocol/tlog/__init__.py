"""The audit log as a transparency log, pure: RFC 9162 Merkle hashing and proofs (``merkle``),
C2SP ``tlog-tiles`` (``tiles``), ``signed-note`` keys and ``tlog-checkpoint`` (``note``),
``tlog-proof`` (``proof``) and the bytes of one audit-log leaf (``leaf``). No I/O: the
warehouse side (``spark_jobs.tlog_store``) moves tiles and checkpoints in and out of storage."""
