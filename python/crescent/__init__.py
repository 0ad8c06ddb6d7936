"""Crescent's Python client (docs/python.md).

``Store`` is the native API; ``crescent.mooncake.MooncakeDistributedStore`` is a drop-in for
Mooncake's store API. Every network call releases the GIL; a ``Store`` may be shared by
threads. Failures raise ``CrescentError`` subclasses whose ``.code`` is the stable code.
"""

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
)

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
