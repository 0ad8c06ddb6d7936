//! The exceptions of `crescent`: one base, `CrescentError`, whose instances carry the stable
//! code of the failure in `.code` (the wire codes of docs/api.md, plus the client's own:
//! NO_LEADER, FAILOVER_INTERRUPTED, CHECKSUM_MISMATCH, IO_ERROR), and one subclass per family
//! of codes, grouped as the `crescent` CLI groups them for its exit status (docs/python.md).

use crescent_client::ClientError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    crescent,
    CrescentError,
    PyException,
    "A failed Crescent call; `.code` is its stable code."
);
create_exception!(
    crescent,
    InvalidArgumentError,
    CrescentError,
    "INVALID_ARGUMENT, PAYLOAD_TOO_LARGE."
);
create_exception!(
    crescent,
    NotFoundError,
    CrescentError,
    "NOT_FOUND: no such key."
);
create_exception!(
    crescent,
    UnavailableError,
    CrescentError,
    "UNAVAILABLE, NOT_LEADER, NO_LEADER, BUSY, NOT_READY, FAILOVER_INTERRUPTED, \
     REQUEST_TIMEOUT: worth retrying."
);
create_exception!(
    crescent,
    ConflictError,
    CrescentError,
    "CONFLICT, STALE_GENERATION, FENCED, LEASE_EXPIRED."
);
create_exception!(
    crescent,
    CapacityError,
    CrescentError,
    "OUT_OF_SPACE, QUOTA_EXCEEDED, DURABILITY_FAILED, POLICY_UNSATISFIABLE."
);
create_exception!(
    crescent,
    AuthError,
    CrescentError,
    "UNAUTHENTICATED, PERMISSION_DENIED."
);
create_exception!(
    crescent,
    IntegrityError,
    CrescentError,
    "CHECKSUM_MISMATCH: the bytes read are not the bytes stored."
);

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CrescentError", py.get_type::<CrescentError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("UnavailableError", py.get_type::<UnavailableError>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add("CapacityError", py.get_type::<CapacityError>())?;
    m.add("AuthError", py.get_type::<AuthError>())?;
    m.add("IntegrityError", py.get_type::<IntegrityError>())?;
    Ok(())
}

/// The exception for a stable `code` with `message`, `.code` set.
pub fn error_for(py: Python<'_>, code: &str, message: String) -> PyErr {
    // An API error's text already starts with its code.
    let text = match message.starts_with(code) {
        true => message,
        false => format!("{code}: {message}"),
    };
    let err = match code {
        "INVALID_ARGUMENT" | "PAYLOAD_TOO_LARGE" => InvalidArgumentError::new_err(text),
        "NOT_FOUND" => NotFoundError::new_err(text),
        "UNAVAILABLE"
        | "NOT_LEADER"
        | "NO_LEADER"
        | "BUSY"
        | "NOT_READY"
        | "FAILOVER_INTERRUPTED"
        | "WRONG_CLUSTER"
        | "REQUEST_TIMEOUT" => UnavailableError::new_err(text),
        "CONFLICT" | "STALE_GENERATION" | "FENCED" | "LEASE_EXPIRED" => {
            ConflictError::new_err(text)
        }
        "OUT_OF_SPACE" | "QUOTA_EXCEEDED" | "DURABILITY_FAILED" | "POLICY_UNSATISFIABLE" => {
            CapacityError::new_err(text)
        }
        "UNAUTHENTICATED" | "PERMISSION_DENIED" => AuthError::new_err(text),
        "CHECKSUM_MISMATCH" => IntegrityError::new_err(text),
        _ => CrescentError::new_err(text),
    };
    // An exception instance has a `__dict__`: setting the attribute cannot fail.
    let _ = err.value(py).setattr("code", code);
    err
}

/// A client error as its Python exception.
pub fn to_py(py: Python<'_>, e: ClientError) -> PyErr {
    error_for(py, e.code_str(), e.to_string())
}

/// `Ok` as is, `Err` as the Python exception.
pub fn check<T>(py: Python<'_>, r: Result<T, ClientError>) -> PyResult<T> {
    r.map_err(|e| to_py(py, e))
}

/// A bad argument found on the Python side (never sent).
pub fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    error_for(py, "INVALID_ARGUMENT", message.into())
}
