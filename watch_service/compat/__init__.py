"""Compatibility surfaces for authorization data: Permify REST (``permify_rest``,
``permify_watch``) and SpiceDB gRPC (``spicedb_grpc``), translated onto ``store.authz_reads``,
``store.authz_writes`` and the shared topic tailer (``follow``)."""
