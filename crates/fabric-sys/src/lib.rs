//! Raw bindings to the system libfabric.
//!
//! # Layout
//! - The `fi_*` / `FI_*` / `struct fi_*` / `struct fid_*` items come from
//!   bindgen run over `<rdma/fabric.h>`, `fi_domain.h`, `fi_endpoint.h`,
//!   `fi_cm.h`, `fi_rma.h`, `fi_tagged.h`, `fi_errno.h` and `fi_eq.h`.
//! - `fis_*` are real functions from `shim.c` that forward to libfabric's
//!   `static inline` calls (`fi_fabric`, `fi_domain`, `fi_cq_read`,
//!   `fi_writemsg`, ... have no symbol in `libfabric.so`). Each has the same
//!   signature as the `fi_*` call it wraps. Real symbols (`fi_getinfo`,
//!   `fi_freeinfo`, `fi_dupinfo`, `fi_strerror`, `fi_tostr`, `fi_version`)
//!   are bound directly.
//! - [`FI_ADDR_UNSPEC`] and [`header_version`] stand in for the macros that
//!   bindgen cannot evaluate (a cast and a function-like macro).
//!
//! # Why the bindings are generated at build time
//! The project's machines run Debian 12's libfabric 1.17, but EFA hosts
//! usually carry AWS's installer build (1.2x / 2.x). The structures this crate
//! exposes (`fi_info`, `fi_domain_attr`, `fi_cq_err_entry`, ...) grew fields
//! between those releases, so bindings checked in from one version would
//! silently mis-describe the other. Running bindgen against the headers of the
//! libfabric that is actually linked keeps layouts and the `fi_getinfo` API
//! version ([`header_version`]) consistent by construction; the cost is a
//! build dependency on libclang (Debian `libclang-dev` + `clang`, installed by
//! `provisioning/host/install-deps.sh`). Set `LIBFABRIC_INCLUDE_DIR` to point
//! at a non-pkg-config install.
//!
//! Everything here is `unsafe` to call; the safe API is the `fabric` crate.

#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    unsafe_op_in_unsafe_fn
)]
#![allow(clippy::all, clippy::pedantic, clippy::undocumented_unsafe_blocks)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// `FI_ADDR_UNSPEC` (`(uint64_t)-1`): "any source" / "no address".
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;

/// `FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)` of the headers this crate
/// was generated from; the API version to pass to `fi_getinfo` so that the
/// returned structures match these bindings.
pub fn header_version() -> u32 {
    // SAFETY: a pure C function without arguments or side effects.
    unsafe { fis_header_version() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_header_version_matches_macros() {
        assert_eq!(header_version(), (FI_MAJOR_VERSION << 16) | FI_MINOR_VERSION);
        // SAFETY: pure C function without arguments.
        assert_eq!(unsafe { fis_addr_unspec() }, FI_ADDR_UNSPEC);
    }

    #[test]
    fn test_runtime_library_is_at_least_headers() {
        // SAFETY: fi_version takes no arguments and only returns a constant.
        let runtime = unsafe { fi_version() };
        assert!(
            runtime >= header_version(),
            "libfabric.so {runtime:#x} older than headers"
        );
    }

    #[test]
    fn test_strerror_names_eagain() {
        // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string.
        let msg = unsafe { std::ffi::CStr::from_ptr(fi_strerror(FI_EAGAIN as i32)) };
        assert!(!msg.to_bytes().is_empty());
    }
}
