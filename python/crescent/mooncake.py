"""A drop-in for Mooncake's store Python API on Crescent (docs/python.md, "Mooncake API").

A program written for ``mooncake.store.MooncakeDistributedStore`` runs on crescentd by
changing its import to ``from crescent.mooncake import MooncakeDistributedStore``;
``setup``'s ``master_server_addr`` names crescentd (``HOST:PORT``). Methods return ints as
Mooncake does: 0 (or a size, a count, 1/0 for existence) on success, a negative Mooncake
``ErrorCode`` on failure; ``get`` answers ``b""`` for a missing key. Nothing raises for a
store-side failure.

The negative codes are Mooncake's (``mooncake-store/include/types.h``), checked against the
``mooncake-transfer-engine-non-cuda`` 0.3.13 wheel where a call produces them. ``CODE_MAP`` maps
each Crescent code to one of them.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Iterable

from . import _native

OK = 0
INTERNAL_ERROR = -1
NO_AVAILABLE_HANDLE = -200
WRITE_FAIL = -500
INVALID_PARAMS = -600
ILLEGAL_CLIENT = -601
INVALID_READ = -701
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
LEASE_EXPIRED = -707
TRANSFER_FAIL = -800
RPC_FAIL = -900
RPC_TIMEOUT = -901
UNAVAILABLE_IN_CURRENT_STATUS = -1010
TENANT_QUOTA_EXCEEDED = -1700

# Crescent's stable code -> Mooncake's ErrorCode. Codes not listed are INTERNAL_ERROR.
CODE_MAP: dict[str, int] = {
    "NOT_FOUND": OBJECT_NOT_FOUND,
    "INVALID_ARGUMENT": INVALID_PARAMS,
    "PAYLOAD_TOO_LARGE": INVALID_PARAMS,
    "CONFLICT": OBJECT_ALREADY_EXISTS,
    "BUSY": OBJECT_HAS_LEASE,
    "NOT_READY": REPLICA_IS_NOT_READY,
    "LEASE_EXPIRED": LEASE_EXPIRED,
    "OUT_OF_SPACE": NO_AVAILABLE_HANDLE,
    "POLICY_UNSATISFIABLE": NO_AVAILABLE_HANDLE,
    "QUOTA_EXCEEDED": TENANT_QUOTA_EXCEEDED,
    "DURABILITY_FAILED": WRITE_FAIL,
    "UNAVAILABLE": RPC_FAIL,
    "NOT_LEADER": RPC_FAIL,
    "WRONG_CLUSTER": RPC_FAIL,
    "NO_LEADER": RPC_FAIL,
    "FAILOVER_INTERRUPTED": RPC_FAIL,
    "REQUEST_TIMEOUT": RPC_TIMEOUT,
    "UNAUTHENTICATED": ILLEGAL_CLIENT,
    "PERMISSION_DENIED": ILLEGAL_CLIENT,
    "STALE_GENERATION": UNAVAILABLE_IN_CURRENT_STATUS,
    "FENCED": UNAVAILABLE_IN_CURRENT_STATUS,
    "CHECKSUM_MISMATCH": INVALID_READ,
    "INTERNAL": INTERNAL_ERROR,
    "IO_ERROR": INTERNAL_ERROR,
}


def code_of(error: BaseException) -> int:
    """The Mooncake code of a Crescent failure (INTERNAL_ERROR for anything else)."""
    return CODE_MAP.get(getattr(error, "code", ""), INTERNAL_ERROR)


def _put_code(error: BaseException) -> int:
    # Mooncake answers 0 for a put of a key that already exists (the first value stays).
    code = code_of(error)
    return OK if code == OBJECT_ALREADY_EXISTS else code


class ReplicateConfig:
    """Mooncake's ``ReplicateConfig``: ``replica_num`` is honoured; the pin and segment
    preferences are accepted and ignored (docs/python.md, "Differences")."""

    def __init__(self) -> None:
        self.replica_num = 1
        self.with_soft_pin = False
        self.with_hard_pin = False
        self.preferred_segment = ""
        self.preferred_segments: list[str] = []


def _replicas(config: Any) -> int:
    n = getattr(config, "replica_num", 1) if config is not None else 1
    return max(int(n or 1), 1)


def _tenant(tenant_id: str | None) -> str | None:
    return None if tenant_id in (None, "", "default") else tenant_id


class MooncakeDistributedStore:
    """Mooncake's ``MooncakeDistributedStore``, served by crescentd."""

    def __init__(self) -> None:
        self._store: _native.Store | None = None
        self._hostname = ""
        self._buffers: dict[int, int] = {}  # address -> size (register_buffer)
        self._lock = threading.Lock()

    # --- life cycle -----------------------------------------------------------------------
    def setup(
        self,
        local_hostname: Any,
        metadata_server: str = "P2PHANDSHAKE",
        global_segment_size: int = 0,
        local_buffer_size: int = 0,
        protocol: str = "tcp",
        rdma_devices: str = "",
        master_server_addr: str = "127.0.0.1:50051",
        engine: Any = None,
        enable_ssd_offload: bool = False,
        ssd_offload_path: str = "",
        tenant_id: str = "default",
        enable_client_http_server: bool = False,
        client_http_port: int = 9300,
    ) -> int:
        """Connects to crescentd at ``master_server_addr`` and, with ``global_segment_size >
        0``, serves a segment of that size from this process (as a Mooncake client mounts its
        global segment). ``metadata_server``, ``local_buffer_size``, ``protocol``,
        ``rdma_devices`` and the rest are accepted and ignored (TCP; no staging buffer is
        needed). ``setup(config_dict)`` takes the same names as keys."""
        if isinstance(local_hostname, dict):
            config = dict(local_hostname)
            local_hostname = config.pop("local_hostname", "127.0.0.1")
            return self.setup(local_hostname, **config)
        if self._store is not None:
            return INVALID_PARAMS
        host = str(local_hostname).rsplit(":", 1)[0] if local_hostname else "127.0.0.1"
        try:
            self._store = _native.Store(
                master_server_addr,
                tenant=_tenant(tenant_id),
                segment_size=int(global_segment_size),
                local_hostname=host,
            )
        except _native.CrescentError as e:
            return code_of(e)
        self._hostname = str(local_hostname)
        return OK

    def init_all(self, protocol: str, device_name: str, mount_segment_size: int = 0) -> int:
        """Mooncake's older entry point; a no-op here (``setup`` does it all)."""
        return OK if self._store is not None else INVALID_PARAMS

    def close(self) -> int:
        store, self._store = self._store, None
        if store is not None:
            try:
                store.close()
            except _native.CrescentError as e:
                return code_of(e)
        return OK

    def get_hostname(self) -> str:
        return self._hostname

    def health_check(self) -> int:
        """0 healthy, 1 not set up or closed, 2 crescentd unreachable (as Mooncake)."""
        if self._store is None:
            return 1
        try:
            self._store.exists("__crescent_health_check__")
            return 0
        except _native.CrescentError:
            return 2

    def _s(self) -> _native.Store:
        if self._store is None:
            e = _native.InvalidArgumentError("the store is not set up (call setup first)")
            e.code = "INVALID_ARGUMENT"
            raise e
        return self._store

    # --- bytes in, bytes out ----------------------------------------------------------------
    def put(self, key: str, value: Any, config: Any = None) -> int:
        return self._put(key, value, config, upsert=False)

    def upsert(self, key: str, value: Any, config: Any = None) -> int:
        return self._put(key, value, config, upsert=True)

    def _put(self, key: str, value: Any, config: Any, upsert: bool) -> int:
        if len(memoryview(value)) == 0:
            return INVALID_PARAMS  # Mooncake refuses empty values
        try:
            self._s().put(key, value, replicas=_replicas(config), upsert=upsert)
            return OK
        except _native.CrescentError as e:
            return _put_code(e)

    def put_batch(self, keys: list[str], values: list[Any], config: Any = None) -> int:
        """0, or the code of the first item that failed (as Mooncake's ``put_batch``)."""
        if len(keys) != len(values) or any(len(memoryview(v)) == 0 for v in values):
            return INVALID_PARAMS
        try:
            results = self._s().put_batch(keys, values, replicas=_replicas(config))
        except _native.CrescentError as e:
            return _put_code(e)
        for r in results:
            if r is not None and _put_code(r) != OK:
                return _put_code(r)
        return OK

    def get(self, key: str) -> bytes:
        try:
            return self._s().get(key)
        except _native.CrescentError:
            return b""

    def get_batch(self, keys: list[str]) -> list[bytes]:
        try:
            results = self._s().get_batch(keys)
        except _native.CrescentError:
            return [b""] * len(keys)
        return [r if isinstance(r, bytes) else b"" for r in results]

    def get_size(self, key: str) -> int:
        try:
            return self._s().get_size(key)
        except _native.CrescentError as e:
            return code_of(e)

    def is_exist(self, key: str) -> int:
        try:
            return 1 if self._s().exists(key) else 0
        except _native.CrescentError as e:
            return code_of(e)

    def batch_is_exist(self, keys: list[str]) -> list[int]:
        """1 present, 0 absent, -1 for an item that could not be checked (as Mooncake)."""
        try:
            results = self._s().batch_exists(keys)
        except _native.CrescentError:
            return [-1] * len(keys)
        return [(1 if r else 0) if isinstance(r, bool) else -1 for r in results]

    # --- removal ----------------------------------------------------------------------------
    def remove(self, key: str, force: bool = False) -> int:
        try:
            self._s().remove(key, force=force)
            return OK
        except _native.CrescentError as e:
            return code_of(e)

    def batch_remove(self, keys: list[str], force: bool = False) -> list[int]:
        if force:
            return [self.remove(k, force=True) for k in keys]
        try:
            results = self._s().remove_batch(keys)
        except _native.CrescentError as e:
            return [code_of(e)] * len(keys)
        return [OK if r is None else code_of(r) for r in results]

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """Removes the keys ``re.search`` matches; returns how many were removed."""
        try:
            pattern = re.compile(regex_pattern)
        except re.error:
            return INVALID_PARAMS
        return self._remove_matching(lambda k: pattern.search(k) is not None, force)

    def remove_all(self, force: bool = False) -> int:
        """Removes every key of this store's tenant; returns how many were removed."""
        return self._remove_matching(lambda k: True, force)

    def _remove_matching(self, matches: Any, force: bool) -> int:
        try:
            keys = [k for k, _size, _complete in self._s().list("") if matches(k)]
        except _native.CrescentError as e:
            return code_of(e)
        removed = 0
        for i in range(0, len(keys), 1024):
            removed += sum(1 for r in self.batch_remove(keys[i : i + 1024], force) if r == OK)
        return removed

    # --- registered buffers (zero copy) -----------------------------------------------------
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        if buffer_ptr <= 0 or size <= 0:
            return INVALID_PARAMS
        with self._lock:
            self._buffers[int(buffer_ptr)] = int(size)
        return OK

    def unregister_buffer(self, buffer_ptr: int) -> int:
        with self._lock:
            return OK if self._buffers.pop(int(buffer_ptr), None) is not None else INVALID_PARAMS

    def _range(self, ptr: int, size: int) -> _native.Buffer:
        # Exactly [ptr, ptr+size): a value larger than `size` is refused, never written past
        # it. Registering is local to this process (no request to crescentd).
        return self._s().register_buffer_ptr(int(ptr), int(size))

    def put_from(self, key: str, buffer_ptr: int, size: int, config: Any = None) -> int:
        return self._put_from(key, buffer_ptr, size, config, upsert=False)

    def upsert_from(self, key: str, buffer_ptr: int, size: int, config: Any = None) -> int:
        return self._put_from(key, buffer_ptr, size, config, upsert=True)

    def _put_from(self, key: str, ptr: int, size: int, config: Any, upsert: bool) -> int:
        if ptr <= 0 or size <= 0:
            return INVALID_PARAMS
        try:
            buf = self._range(ptr, size)
            try:
                self._s().put_from(key, buf, 0, size, replicas=_replicas(config), upsert=upsert)
            finally:
                self._s().unregister_buffer(buf)
            return OK
        except _native.CrescentError as e:
            return _put_code(e)

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """The bytes read, or a negative code (INVALID_PARAMS when the value exceeds
        ``size``)."""
        if buffer_ptr <= 0 or size <= 0:
            return INVALID_PARAMS
        try:
            buf = self._range(buffer_ptr, size)
            try:
                return self._s().get_into(key, buf, 0)
            finally:
                self._s().unregister_buffer(buf)
        except _native.CrescentError as e:
            return code_of(e)

    def batch_put_from(
        self, keys: list[str], buffer_ptrs: list[int], sizes: list[int], config: Any = None
    ) -> list[int]:
        return self._batch_put_from(keys, buffer_ptrs, sizes, config, upsert=False)

    def batch_upsert_from(
        self, keys: list[str], buffer_ptrs: list[int], sizes: list[int], config: Any = None
    ) -> list[int]:
        return self._batch_put_from(keys, buffer_ptrs, sizes, config, upsert=True)

    def _batch_put_from(self, keys, ptrs, sizes, config: Any, upsert: bool) -> list[int]:
        if not (len(keys) == len(ptrs) == len(sizes)):
            return [INVALID_PARAMS] * len(keys)
        return self._batch(keys, ptrs, sizes, put=True, upsert=upsert, replicas=_replicas(config))

    def batch_get_into(self, keys: list[str], buffer_ptrs: list[int], sizes: list[int]) -> list[int]:
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            return [INVALID_PARAMS] * len(keys)
        return self._batch(keys, buffer_ptrs, sizes, put=False, upsert=False, replicas=1)

    def _batch(self, keys, ptrs, sizes, put: bool, upsert: bool, replicas: int) -> list[int]:
        out: list[int] = [INVALID_PARAMS] * len(keys)
        valid = [i for i, (p, s) in enumerate(zip(ptrs, sizes)) if p > 0 and s > 0]
        try:
            bufs = [self._range(ptrs[i], sizes[i]) for i in valid]
        except _native.CrescentError as e:
            return [code_of(e)] * len(keys)
        try:
            vkeys = [keys[i] for i in valid]
            if put:
                vsizes = [sizes[i] for i in valid]
                results = self._s().batch_put_from(
                    vkeys, bufs, [0] * len(bufs), vsizes, replicas=replicas, upsert=upsert
                )
            else:
                results = self._s().batch_get_into(vkeys, bufs, [0] * len(bufs))
        except _native.CrescentError as e:
            results = [e] * len(valid)
        finally:
            for b in bufs:
                self._s().unregister_buffer(b)
        for i, r in zip(valid, results):
            if isinstance(r, BaseException):
                out[i] = _put_code(r) if put else code_of(r)
            else:
                out[i] = OK if put else r
        return out


__all__: Iterable[str] = [
    "CODE_MAP",
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "code_of",
    "OBJECT_NOT_FOUND",
    "NO_AVAILABLE_HANDLE",
    "INVALID_PARAMS",
]
