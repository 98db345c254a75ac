"""A Great Expectations store backend over ``watch_service.storage``: the validation results and
the Data Docs site live at a location (a path, ``file://…`` or ``s3://bucket/prefix``), so the
worker that runs the checkpoint and the API server that serves the pages need not share a disk.

GX 1.24 ships no S3 backend (its ``TupleS3StoreBackend`` is gone); this one is the GX
``TupleStoreBackend`` contract over :class:`Storage`: every object written whole (one PUT on
S3), listed by prefix, read with one GET. Credentials are the landing zone's
(``landing_store.landing_storage``: an ``aws`` connection, else the AWS default chain). GX
instantiates it from a store configuration naming this module and class.
"""

from __future__ import annotations

from typing import Any

from great_expectations.data_context.store.tuple_store_backend import TupleStoreBackend
from great_expectations.exceptions import InvalidKeyError, StoreBackendError

from .hooks.landing_store import landing_storage

MODULE = __name__
CLASS = "StorageStoreBackend"


class StorageStoreBackend(TupleStoreBackend):
    """Keys are tuples turned into ``/``-separated names under ``location`` (GX's own rule)."""

    def __init__(
        self,
        location: str,
        filepath_template: str | None = None,
        filepath_prefix: str | None = None,
        filepath_suffix: str | None = None,
        forbidden_substrings: list[str] | None = None,
        platform_specific_separator: bool = False,
        fixed_length_key: bool = False,
        suppress_store_backend_id: bool = True,
        manually_initialize_store_backend_id: str = "",
        base_public_path: str | None = None,
        store_name: str | None = None,
    ) -> None:
        super().__init__(
            filepath_template=filepath_template,
            filepath_prefix=filepath_prefix,
            filepath_suffix=filepath_suffix,
            forbidden_substrings=forbidden_substrings,
            platform_specific_separator=platform_specific_separator,
            fixed_length_key=fixed_length_key,
            suppress_store_backend_id=suppress_store_backend_id,
            manually_initialize_store_backend_id=manually_initialize_store_backend_id,
            base_public_path=base_public_path,
            store_name=store_name,
        )
        self.storage = landing_storage(location)
        config = {
            "location": location,
            "filepath_template": filepath_template,
            "filepath_prefix": filepath_prefix,
            "filepath_suffix": filepath_suffix,
            "forbidden_substrings": forbidden_substrings,
            "platform_specific_separator": platform_specific_separator,
            "fixed_length_key": fixed_length_key,
            "suppress_store_backend_id": suppress_store_backend_id,
            "manually_initialize_store_backend_id": manually_initialize_store_backend_id,
            "base_public_path": base_public_path,
            "store_name": store_name,
            "module_name": MODULE,
            "class_name": CLASS,
        }
        self._config = {k: v for k, v in config.items() if v}
        if not suppress_store_backend_id:
            _ = self.store_backend_id

    def _name(self, key: Any) -> str:
        return str(self._convert_key_to_filepath(key if isinstance(key, tuple) else key.to_tuple()))

    def _get(self, key: Any) -> str:  # type: ignore[override] # GX's backends return it
        data = self.storage.read_bytes(self._name(key))
        if data is None:
            raise InvalidKeyError(f"no GX object {self.storage.uri(self._name(key))}")
        return data.decode("utf-8").rstrip("\n")

    def _get_all(self) -> list[Any]:
        keys = [k for k in self.list_keys() if k != self.STORE_BACKEND_ID_KEY]
        return [self._get(k) for k in keys]

    def _set(self, key: Any, value: Any, **kwargs: Any) -> str:  # type: ignore[override]
        name = self._name(key)
        self.storage.write_bytes(name, value.encode("utf-8") if isinstance(value, str) else value)
        return self.storage.uri(name)

    def _move(self, source_key: Any, dest_key: Any, **kwargs: Any) -> Any:
        data = self.storage.read_bytes(self._name(source_key))
        if data is None:
            return False
        self.storage.write_bytes(self._name(dest_key), data)
        self.storage.delete(self._name(source_key))
        return dest_key

    def list_keys(self, prefix: tuple = ()) -> list[tuple]:
        base = "/".join(prefix)
        keys = []
        for name, _ in self.storage.files(base, recursive=True):
            path = f"{base}/{name}" if base else name
            if self._is_missing_prefix_or_suffix(self.filepath_prefix, self.filepath_suffix, path):
                continue
            key = self._convert_filepath_to_key(path)
            if key and not self.is_ignored_key(key):
                keys.append(key)
        return keys

    def remove_key(self, key: Any) -> bool:  # type: ignore[override]
        name = self._name(key)
        if not self.storage.exists(name):
            return False
        self.storage.delete(name)
        return True

    def _has_key(self, key: Any) -> bool:
        return self.storage.exists(self._name(key))

    def get_url_for_key(self, key: Any, protocol: str | None = None) -> str:
        return self.storage.uri(self._name(key))

    def get_public_url_for_key(self, key: Any, protocol: str | None = None) -> str:
        if not self.base_public_path:
            raise StoreBackendError(f"{CLASS}: no base_public_path configured")
        return str(self.base_public_path) + self._name(key)

    @property
    def config(self) -> dict:
        return self._config
