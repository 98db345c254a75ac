"""The pipeline's own error about the warehouse, below every module that raises it."""

from __future__ import annotations

from watch_service.protocol.errors import AuditsyncError


class WarehouseError(AuditsyncError):
    """The warehouse cannot be used as it is; the message says why and what to do."""
