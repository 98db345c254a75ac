"""What a warehouse the hand-written Parquet layouts left looks like, and the refusal a run gives
one: a run never converts (``auditsync pipeline convert`` does, ``spark_jobs.legacy``), it names
the command. Costs one or two file lookups, on a local warehouse only: the old layouts lived on
one local filesystem that the driver and the executors share."""

from __future__ import annotations

import dataclasses
import json

from spark_jobs.common.errors import WarehouseError
from watch_service.storage import Storage

MARKER = "_layout.json"


@dataclasses.dataclass(frozen=True)
class Found:
    """An old warehouse: its layout version and the id its runs are keyed by ("" if none)."""

    version: int
    old_id: str

    @property
    def key(self) -> str:
        """The ``auditsync.legacy`` value of its converted tables' commits."""
        return self.old_id or f"layout{self.version}"

    @property
    def aside(self) -> str:
        return f"legacy-layout{self.version}"


def detect(house: Storage) -> Found | None:
    """The old layout at ``house``, or None (nothing to convert)."""
    if not house.location.is_local:
        return None  # the hand-written layouts lived on one local filesystem only
    marker = house.read_bytes(MARKER)
    if marker is not None:
        value = json.loads(marker)
        if value.get("version") != 2:
            raise WarehouseError(
                f"{house.uri(MARKER)}: layout version {value.get('version')}; only layout 2 "
                f"(or layout 1, without a marker) can be converted"
            )
        return Found(2, str(value.get("id") or ""))
    if house.is_folder("deliveries"):
        return Found(2 if house.is_folder("deliveries/_batches") else 1, "")
    return None


def refusal(work: str, found: Found) -> str:
    """The one line a run prints when it meets an old warehouse (pure)."""
    return (
        f"{work} is a layout-{found.version} warehouse (hand-written Parquet): convert it once "
        f"with `auditsync pipeline convert --work {work}`, then run again"
    )


def refuse_old(house: Storage, work: str) -> None:
    """Raise ``WarehouseError`` naming the convert command when ``house`` is an old layout."""
    found = detect(house)
    if found is not None:
        raise WarehouseError(refusal(work, found))
