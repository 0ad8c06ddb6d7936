//! The C ABI of a transfer engine, after Mooncake's `transfer_engine_c.h`, and a safe wrapper
//! around one engine instance of a dlopened library.
//!
//! Version followed: the `mooncake-transfer-engine/include/transfer_engine_c.h` shape in which
//! `struct transfer_request` is `{int opcode; void *source; int32_t target_id;
//! uint64_t target_offset; uint64_t length}` (no `file_id` member), `createTransferEngine` takes
//! `(metadata_conn_string, local_server_name, ip_or_host_name, uint64_t rpc_port,
//! int auto_discover)` and `registerLocalMemory` takes `(engine, addr, length, location,
//! int remote_accessible)` (no `remote_atomic`). Later upstream headers add a `file_id` member
//! and earlier ones a `remote_atomic` argument; both change the ABI, so a library built from
//! those headers does not fit this binding.
//!
//! Crescent's use of the API (the mini engine in `c/` implements exactly this): a served
//! segment is registered with `remote_accessible = 1` and `location` = its segment id, and
//! `openSegment(segment id)` names it; `target_offset` is the offset inside that segment. Plain
//! local buffers are registered with `remote_accessible = 0`.
//!
//! The library must be thread-safe (Mooncake's engine is; the mini engine holds a mutex).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use libloading::Library;

use crate::error::{Result, TransportError};
use crate::memory::SegmentMemory;

pub const OPCODE_READ: c_int = 0;
pub const OPCODE_WRITE: c_int = 1;

pub const STATUS_WAITING: c_int = 0;
pub const STATUS_PENDING: c_int = 1;
pub const STATUS_INVALID: c_int = 2;
pub const STATUS_CANCELED: c_int = 3;
pub const STATUS_COMPLETED: c_int = 4;
pub const STATUS_TIMEOUT: c_int = 5;
pub const STATUS_FAILED: c_int = 6;

pub const INVALID_BATCH: u64 = u64::MAX;

/// `struct transfer_request`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TransferRequest {
    pub opcode: c_int,
    pub source: *mut c_void,
    pub target_id: i32,
    pub target_offset: u64,
    pub length: u64,
}

/// `struct transfer_status`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TransferStatus {
    pub status: c_int,
    pub transferred_bytes: u64,
}

type CreateFn =
    unsafe extern "C" fn(*const c_char, *const c_char, *const c_char, u64, c_int) -> *mut c_void;
type InstallTransportFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, *mut *mut c_void) -> *mut c_void;
type RegisterFn =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *const c_char, c_int) -> c_int;
type UnregisterFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type OpenSegmentFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> i32;
type CloseSegmentFn = unsafe extern "C" fn(*mut c_void, i32) -> c_int;
type AllocateBatchFn = unsafe extern "C" fn(*mut c_void, usize) -> u64;
type SubmitFn = unsafe extern "C" fn(*mut c_void, u64, *mut TransferRequest, usize) -> c_int;
type StatusFn = unsafe extern "C" fn(*mut c_void, u64, usize, *mut TransferStatus) -> c_int;
type FreeBatchFn = unsafe extern "C" fn(*mut c_void, u64) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut c_void);

/// The resolved entry points. The fn pointers stay valid while `_library` is loaded.
struct Api {
    create: CreateFn,
    install_transport: InstallTransportFn,
    register: RegisterFn,
    unregister: UnregisterFn,
    open_segment: OpenSegmentFn,
    close_segment: CloseSegmentFn,
    allocate_batch: AllocateBatchFn,
    submit: SubmitFn,
    status: StatusFn,
    free_batch: FreeBatchFn,
    destroy: DestroyFn,
    _library: Library,
}

impl Api {
    fn load(path: &str) -> Result<Api> {
        // SAFETY: loading runs the library's initialisers; the operator chose this library in
        // configuration as a transfer engine, which is the trust we extend to it.
        let library = unsafe { Library::new(path) }.map_err(|e| TransportError::LibraryLoad {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        macro_rules! symbol {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is declared with the signature of the header version this
                // module documents; the pointer is only used while `library` stays loaded (it
                // is stored beside the pointers in `Api`).
                let symbol = unsafe { library.get::<$ty>(concat!($name, "\0").as_bytes()) };
                *symbol.map_err(|e| TransportError::LibraryLoad {
                    path: path.to_owned(),
                    reason: format!("missing symbol {}: {e}", $name),
                })?
            }};
        }
        Ok(Api {
            create: symbol!("createTransferEngine", CreateFn),
            install_transport: symbol!("installTransport", InstallTransportFn),
            register: symbol!("registerLocalMemory", RegisterFn),
            unregister: symbol!("unregisterLocalMemory", UnregisterFn),
            open_segment: symbol!("openSegment", OpenSegmentFn),
            close_segment: symbol!("closeSegment", CloseSegmentFn),
            allocate_batch: symbol!("allocateBatchID", AllocateBatchFn),
            submit: symbol!("submitTransfer", SubmitFn),
            status: symbol!("getTransferStatus", StatusFn),
            free_batch: symbol!("freeBatchID", FreeBatchFn),
            destroy: symbol!("destroyTransferEngine", DestroyFn),
            _library: library,
        })
    }
}

/// Arguments of `createTransferEngine`.
#[derive(Clone, Debug)]
pub struct EngineParams<'a> {
    pub metadata_conn_string: &'a str,
    pub local_server_name: &'a str,
    pub ip_or_host_name: &'a str,
    pub rpc_port: u64,
    pub protocol: &'a str,
}

fn c_string(what: &str, value: &str) -> Result<CString> {
    CString::new(value)
        .map_err(|_| TransportError::InvalidArgument(format!("{what} contains a NUL byte")))
}

/// One engine instance. Memory registered through it is kept alive (by `Arc`) until it is
/// unregistered or the engine is destroyed, so the engine never points at freed memory.
pub struct Engine {
    api: Api,
    handle: NonNull<c_void>,
    registered: Mutex<HashMap<usize, Arc<SegmentMemory>>>,
}

// SAFETY: the engine handle is an opaque pointer owned by this value; the library is required
// to be thread-safe (documented above), so calls may come from any thread, concurrently.
unsafe impl Send for Engine {}
// SAFETY: see `Send`; `&Engine` only makes library calls, which are thread-safe.
unsafe impl Sync for Engine {}

impl Engine {
    /// Loads `path`, creates an engine and installs `params.protocol`.
    pub fn open(path: &str, params: &EngineParams<'_>) -> Result<Engine> {
        let api = Api::load(path)?;
        let metadata = c_string("metadata_conn_string", params.metadata_conn_string)?;
        let name = c_string("local_server_name", params.local_server_name)?;
        let host = c_string("ip_or_host_name", params.ip_or_host_name)?;
        let protocol = c_string("protocol", params.protocol)?;
        // SAFETY: the strings are valid NUL-terminated C strings that outlive the call (the
        // header says the library does not keep them).
        let raw = unsafe {
            (api.create)(
                metadata.as_ptr(),
                name.as_ptr(),
                host.as_ptr(),
                params.rpc_port,
                0,
            )
        };
        let handle = NonNull::new(raw).ok_or_else(|| TransportError::Engine {
            call: "createTransferEngine",
            reason: format!("returned NULL (metadata {:?})", params.metadata_conn_string),
        })?;
        let engine = Engine {
            api,
            handle,
            registered: Mutex::default(),
        };
        // SAFETY: `handle` is a live engine; `protocol` is a valid C string; a NULL args array
        // is what the header's callers pass when a transport needs no arguments.
        let transport = unsafe {
            (engine.api.install_transport)(
                engine.handle.as_ptr(),
                protocol.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        if transport.is_null() {
            return Err(TransportError::Engine {
                call: "installTransport",
                reason: format!("protocol {:?} was refused", params.protocol),
            });
        }
        Ok(engine)
    }

    /// Registers `memory` (kept alive until unregistered).
    pub fn register(&self, memory: Arc<SegmentMemory>, location: &str, remote: bool) -> Result<()> {
        let location = c_string("location", location)?;
        // SAFETY: the region is valid for `len` bytes and stays so while registered: its Arc
        // is kept in `registered` until `unregister` or drop.
        let rc = unsafe {
            (self.api.register)(
                self.handle.as_ptr(),
                memory.as_ptr().cast(),
                memory.len(),
                location.as_ptr(),
                c_int::from(remote),
            )
        };
        if rc != 0 {
            return Err(TransportError::Engine {
                call: "registerLocalMemory",
                reason: format!("returned {rc}"),
            });
        }
        self.lock_registered()
            .insert(memory.as_ptr() as usize, memory);
        Ok(())
    }

    /// Unregisters a region registered with [`Engine::register`].
    pub fn unregister(&self, memory: &SegmentMemory) -> Result<()> {
        // SAFETY: `handle` is live; the address is only compared by the library.
        let rc = unsafe { (self.api.unregister)(self.handle.as_ptr(), memory.as_ptr().cast()) };
        if rc != 0 {
            return Err(TransportError::Engine {
                call: "unregisterLocalMemory",
                reason: format!("returned {rc}"),
            });
        }
        self.lock_registered().remove(&(memory.as_ptr() as usize));
        Ok(())
    }

    fn lock_registered(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Arc<SegmentMemory>>> {
        self.registered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `openSegment`: the segment's handle, or `None` if the engine does not know it.
    pub fn open_segment(&self, name: &str) -> Result<Option<i32>> {
        let name = c_string("segment id", name)?;
        // SAFETY: `handle` is live and `name` a valid C string not kept by the library.
        let id = unsafe { (self.api.open_segment)(self.handle.as_ptr(), name.as_ptr()) };
        Ok((id >= 0).then_some(id))
    }

    /// `closeSegment`.
    pub fn close_segment(&self, id: i32) {
        // SAFETY: `handle` is live; a stale id is reported by the return code, which has no
        // consequence here.
        let _ = unsafe { (self.api.close_segment)(self.handle.as_ptr(), id) };
    }

    /// `allocateBatchID`.
    pub fn allocate_batch(&self, size: usize) -> Result<u64> {
        // SAFETY: `handle` is live.
        let id = unsafe { (self.api.allocate_batch)(self.handle.as_ptr(), size) };
        if id == INVALID_BATCH {
            return Err(TransportError::Engine {
                call: "allocateBatchID",
                reason: format!("no batch of {size} available"),
            });
        }
        Ok(id)
    }

    /// `submitTransfer`.
    ///
    /// # Safety
    /// Every `source..source+length` must stay valid, and untouched by anyone else, until the
    /// engine reports a final status for that task.
    pub unsafe fn submit(&self, batch: u64, requests: &mut [TransferRequest]) -> Result<()> {
        // SAFETY: `handle` is live, `requests` is a valid array of `len` entries for the call,
        // and the caller guarantees the source ranges (see above).
        let rc = unsafe {
            (self.api.submit)(
                self.handle.as_ptr(),
                batch,
                requests.as_mut_ptr(),
                requests.len(),
            )
        };
        if rc != 0 {
            return Err(TransportError::Engine {
                call: "submitTransfer",
                reason: format!("returned {rc}"),
            });
        }
        Ok(())
    }

    /// `getTransferStatus` of one task.
    pub fn status(&self, batch: u64, task: usize) -> Result<TransferStatus> {
        let mut status = TransferStatus::default();
        // SAFETY: `handle` is live and `status` a valid out-pointer for the call.
        let rc = unsafe { (self.api.status)(self.handle.as_ptr(), batch, task, &mut status) };
        if rc != 0 {
            return Err(TransportError::Engine {
                call: "getTransferStatus",
                reason: format!("returned {rc} for task {task}"),
            });
        }
        Ok(status)
    }

    /// `freeBatchID`.
    pub fn free_batch(&self, batch: u64) {
        // SAFETY: `handle` is live; freeing is only done once every task is final.
        let _ = unsafe { (self.api.free_batch)(self.handle.as_ptr(), batch) };
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: `handle` came from createTransferEngine and is destroyed once; registered
        // memory is released only after this (the map drops after the call).
        unsafe { (self.api.destroy)(self.handle.as_ptr()) }
    }
}
