"""Crescent's Python client (docs/python.md).

``Store`` is the native API; ``crescent.mooncake.MooncakeDistributedStore`` is a drop-in for
Mooncake's store API. Every network call releases the GIL; a ``Store`` may be shared by
threads. Failures raise ``CrescentError`` subclasses whose ``.code`` is the stable code.
"""

import atexit

from ._native import (
    AuthError,
    Buffer,
    CapacityError,
    ConflictError,
    CrescentError,
    IntegrityError,
    InvalidArgumentError,
    NotFoundError,
    Store,
    UnavailableError,
    __version__,
    settle_all,
)

# Gets release their leases without waiting; send what is queued before the process exits.
atexit.register(settle_all)

__all__ = [
    "AuthError",
    "Buffer",
    "CapacityError",
    "ConflictError",
    "CrescentError",
    "IntegrityError",
    "InvalidArgumentError",
    "NotFoundError",
    "Store",
    "UnavailableError",
    "__version__",
]
