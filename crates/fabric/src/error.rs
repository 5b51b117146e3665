//! Errors of the safe wrapper: a failed libfabric call, a failed completion
//! (with the provider's own message), a missing provider, timeouts and misuse.

use std::ffi::CStr;
use std::time::Duration;

/// Errors from the `fabric` crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// A libfabric call returned a negative error code.
    #[error("{call} failed: {message} (-{code})")]
    Call {
        /// The libfabric function, e.g. `fi_enable`.
        call: &'static str,
        /// The positive `FI_E*` code.
        code: i32,
        /// `fi_strerror(code)`.
        message: String,
    },
    /// `fi_getinfo` found no provider matching the requested name.
    #[error(
        "libfabric provider {requested:?} is not available for these hints (fi_getinfo: {message}); \
         providers on this host (as `fi_info -l` lists them): {available}"
    )]
    NoProvider {
        /// The provider name asked for, e.g. `efa`.
        requested: String,
        /// `fi_strerror` of what `fi_getinfo` returned.
        message: String,
        /// Comma-separated provider names libfabric offers here.
        available: String,
    },
    /// An operation completed with an error (read with `fi_cq_readerr`).
    #[error("{provider}: {op} failed: {message} (-{err}); provider error {prov_errno}: {prov_message}")]
    Completion {
        /// The provider, e.g. `tcp;ofi_rxm`.
        provider: String,
        /// What failed, e.g. `RMA write of 4096 bytes to 0x0 key 0x2`.
        op: String,
        /// The generic `FI_E*` code of the completion.
        err: i32,
        /// `fi_strerror(err)`.
        message: String,
        /// The provider-specific error number.
        prov_errno: i32,
        /// `fi_cq_strerror` for `prov_errno`: the provider's own message.
        prov_message: String,
    },
    /// A wait ran out of time.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// How long was waited.
        waited: Duration,
        /// What was awaited.
        what: String,
    },
    /// The cancel flag given to `Endpoint::set_cancel` was set during a wait.
    #[error("cancelled while waiting for {what}")]
    Cancelled {
        /// What was awaited.
        what: String,
    },
    /// A value the caller passed cannot be used.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// `Result` with [`FabricError`].
pub type Result<T, E = FabricError> = std::result::Result<T, E>;

/// `fi_strerror` of a (positive or negative) libfabric error code.
pub fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror accepts any int and returns a pointer to a static
    // NUL-terminated string (or a thread-local buffer for unknown codes).
    let ptr = unsafe { fabric_sys::fi_strerror(code.abs()) };
    if ptr.is_null() {
        return format!("error {code}");
    }
    // SAFETY: non-null, NUL-terminated, valid until the next call on this thread;
    // we copy it out immediately.
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

/// Turns a libfabric return value (negative = error) into a `Result`.
pub(crate) fn check(call: &'static str, ret: i64) -> Result<i64> {
    if ret < 0 {
        let code = i32::try_from(-ret).unwrap_or(i32::MAX);
        Err(FabricError::Call {
            call,
            code,
            message: strerror(code),
        })
    } else {
        Ok(ret)
    }
}
