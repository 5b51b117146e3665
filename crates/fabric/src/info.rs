//! Provider discovery: [`Hints`] (provider name, endpoint type, capabilities)
//! turned into an owned [`Info`] by `fi_getinfo`, and [`providers`], the list
//! `fi_info -l` would print.

use std::ffi::{CStr, CString};
use std::ptr;

use fabric_sys as sys;

use crate::error::{check, strerror, FabricError, Result};

/// Capabilities a fabric-write endpoint needs: messages and RMA. (Immediate data
/// is not a capability bit in 1.17 — rxm rejects `FI_REMOTE_CQ_DATA` in caps —
/// it is advertised by a non-zero `domain_attr->cq_data_size`, which
/// [`Info::cq_data_size`] reports and `Endpoint::write` checks.)
pub const DEFAULT_CAPS: u64 = sys::FI_MSG as u64 | sys::FI_RMA as u64;

/// The `mr_mode` bits this crate knows how to honour (advertised in the hints;
/// the provider answers with the subset it requires).
pub const SUPPORTED_MR_MODE: u32 =
    sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY | sys::FI_MR_ENDPOINT;

/// What to ask `fi_getinfo` for. Built with `&mut self` setters.
#[derive(Debug, Clone)]
pub struct Hints {
    provider: Option<String>,
    node: Option<String>,
    service: Option<String>,
    source: bool,
    caps: u64,
}

impl Default for Hints {
    fn default() -> Self {
        Self {
            provider: None,
            node: None,
            service: None,
            source: true,
            caps: DEFAULT_CAPS,
        }
    }
}

impl Hints {
    /// RDM endpoint with [`DEFAULT_CAPS`], any provider.
    pub fn new() -> Self {
        Self::default()
    }

    /// The provider name, as `fi_info -l` prints it: `tcp;ofi_rxm`, `efa`, `verbs;ofi_rxd`.
    pub fn provider(&mut self, name: impl Into<String>) -> &mut Self {
        self.provider = Some(name.into());
        self
    }

    /// The local node (address or host name) to bind to, e.g. `127.0.0.1`.
    pub fn node(&mut self, node: impl Into<String>) -> &mut Self {
        self.node = Some(node.into());
        self
    }

    /// The local service (port); unset lets the provider choose.
    pub fn service(&mut self, service: impl Into<String>) -> &mut Self {
        self.service = Some(service.into());
        self
    }

    /// Capabilities (`FI_*` bits); defaults to [`DEFAULT_CAPS`].
    pub fn caps(&mut self, caps: u64) -> &mut Self {
        self.caps = caps;
        self
    }

    /// Runs `fi_getinfo` and keeps the first (best) match.
    pub fn get(&self) -> Result<Info> {
        Info::query(self)
    }
}

/// An owned `fi_info` list from `fi_getinfo`; the first entry is the one used.
#[derive(Debug)]
pub struct Info {
    head: *mut sys::fi_info,
}

// SAFETY: the fi_info list is plain heap data owned exclusively by this value
// (freed once, in Drop); libfabric attaches no thread affinity to it.
unsafe impl Send for Info {}

/// Frees a `fi_info` list on drop unless released.
struct InfoGuard(*mut sys::fi_info);

impl Drop for InfoGuard {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from fi_allocinfo/fi_getinfo and is freed only here.
            unsafe { sys::fi_freeinfo(self.0) };
        }
    }
}

fn cstring(value: &str, what: &str) -> Result<CString> {
    CString::new(value).map_err(|_| FabricError::InvalidArgument(format!("{what} {value:?} contains a NUL byte")))
}

impl Info {
    /// Runs `fi_getinfo` for `hints`.
    pub fn query(hints: &Hints) -> Result<Info> {
        // SAFETY: fi_allocinfo returns a zeroed fi_info with all attribute structs allocated, or NULL.
        let raw = unsafe { sys::fis_allocinfo() };
        if raw.is_null() {
            return Err(FabricError::Call {
                call: "fi_allocinfo",
                code: sys::FI_ENOMEM as i32,
                message: strerror(12),
            });
        }
        let guard = InfoGuard(raw);
        // SAFETY: `raw` and its attribute structs were allocated by fi_allocinfo and
        // are exclusively ours; the strdup'd provider name is freed by fi_freeinfo.
        unsafe {
            let h = &mut *raw;
            h.caps = hints.caps;
            h.mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*h.ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            let d = &mut *h.domain_attr;
            d.mr_mode = SUPPORTED_MR_MODE as i32;
            d.threading = sys::fi_threading_FI_THREAD_DOMAIN;
            if let Some(name) = &hints.provider {
                let c = cstring(name, "provider name")?;
                (*h.fabric_attr).prov_name = libc::strdup(c.as_ptr());
            }
        }
        let node = hints.node.as_deref().map(|n| cstring(n, "node")).transpose()?;
        let service = hints.service.as_deref().map(|s| cstring(s, "service")).transpose()?;
        let flags = if hints.source && (node.is_some() || service.is_some()) {
            sys::FI_SOURCE
        } else {
            0
        };
        let mut out: *mut sys::fi_info = ptr::null_mut();
        // SAFETY: all pointers are valid or NULL as fi_getinfo allows; `out` receives an owned list.
        let ret = unsafe {
            sys::fi_getinfo(
                sys::header_version(),
                node.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                service.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                flags,
                raw,
                &mut out,
            )
        };
        drop(guard);
        if ret == -(sys::FI_ENODATA as i32) || (ret == 0 && out.is_null()) {
            return Err(FabricError::NoProvider {
                requested: hints.provider.clone().unwrap_or_else(|| "(any)".into()),
                message: strerror(ret),
                available: providers()
                    .map(|p| p.join(", "))
                    .unwrap_or_else(|e| format!("(unknown: {e})")),
            });
        }
        check("fi_getinfo", ret.into())?;
        Ok(Info { head: out })
    }

    /// The selected `fi_info` entry.
    pub(crate) fn raw(&self) -> *mut sys::fi_info {
        self.head
    }

    fn entry(&self) -> &sys::fi_info {
        // SAFETY: `head` is a non-null fi_info owned by self for its lifetime.
        unsafe { &*self.head }
    }

    fn domain_attr(&self) -> &sys::fi_domain_attr {
        // SAFETY: fi_getinfo always fills domain_attr; it lives as long as the list.
        unsafe { &*self.entry().domain_attr }
    }

    /// The provider name, e.g. `tcp;ofi_rxm`.
    pub fn provider_name(&self) -> String {
        // SAFETY: fabric_attr is filled by fi_getinfo; prov_name is a NUL-terminated string or NULL.
        unsafe { c_str((*self.entry().fabric_attr).prov_name) }
    }

    /// The fabric name (for tcp: the subnet, for EFA: `efa`).
    pub fn fabric_name(&self) -> String {
        // SAFETY: as in provider_name.
        unsafe { c_str((*self.entry().fabric_attr).name) }
    }

    /// The domain name (the interface or device).
    pub fn domain_name(&self) -> String {
        // SAFETY: domain_attr->name is a NUL-terminated string or NULL.
        unsafe { c_str(self.domain_attr().name) }
    }

    /// The memory registration mode the provider requires (`FI_MR_*` bits).
    pub fn mr_mode(&self) -> u32 {
        self.domain_attr().mr_mode as u32
    }

    /// Size in bytes of the remote CQ data (immediate) the provider carries (8 on tcp, 4 on EFA).
    pub fn cq_data_size(&self) -> usize {
        self.domain_attr().cq_data_size
    }

    /// Size in bytes of MR keys.
    pub fn mr_key_size(&self) -> usize {
        self.domain_attr().mr_key_size
    }

    /// Granted capabilities.
    pub fn caps(&self) -> u64 {
        self.entry().caps
    }

    /// Largest single message or RMA transfer.
    pub fn max_msg_size(&self) -> usize {
        // SAFETY: ep_attr is filled by fi_getinfo.
        unsafe { (*self.entry().ep_attr).max_msg_size }
    }

    /// Transmit ordering guarantees (`FI_ORDER_*` bits).
    pub fn msg_order(&self) -> u64 {
        // SAFETY: tx_attr is filled by fi_getinfo.
        unsafe { (*self.entry().tx_attr).msg_order }
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: `head` came from fi_getinfo and is freed exactly once, here.
        unsafe { sys::fi_freeinfo(self.head) };
    }
}

/// Copies a C string that may be NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_str(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-null and NUL-terminated per the caller's contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The provider names libfabric offers on this host, de-duplicated in
/// `fi_getinfo` order (what `fi_info -l` shows, with utility providers
/// spelled `core;util` as in `tcp;ofi_rxm`).
pub fn providers() -> Result<Vec<String>> {
    let mut out: *mut sys::fi_info = ptr::null_mut();
    // SAFETY: NULL node/service/hints are allowed; `out` receives an owned list.
    let ret = unsafe {
        sys::fi_getinfo(
            sys::header_version(),
            ptr::null(),
            ptr::null(),
            0,
            ptr::null(),
            &mut out,
        )
    };
    check("fi_getinfo", ret.into())?;
    let guard = InfoGuard(out);
    let mut names: Vec<String> = Vec::new();
    let mut cur = guard.0;
    while !cur.is_null() {
        // SAFETY: `cur` walks the list owned by `guard`; fabric_attr is always filled.
        let (name, next) = unsafe { (c_str((*(*cur).fabric_attr).prov_name), (*cur).next) };
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
        cur = next;
    }
    Ok(names)
}
