//! Memory regions of an endpoint: page-aligned buffers we own, registered
//! with the domain as the provider's `mr_mode` asks (requested or provider
//! keys, bind + enable under `FI_MR_ENDPOINT`, virtual or offset
//! addressing), and what a peer needs to write into one.
//!
//! The table owns buffers and registrations; it knows nothing of operations.
//! The endpoint counts each region's in-flight operations in
//! [`Mr::inflight`] and closes the table between its endpoint and its address
//! vector ([`MrTable::close_all`]).

use std::alloc::{self, Layout};
use std::ptr;

use fabric_sys as sys;

use crate::error::{check, FabricError, Result};

/// A memory region registered on an [`crate::Endpoint`] (an index; valid for the endpoint's lifetime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrHandle(pub(crate) usize);

/// What a peer needs to RDMA-write into a memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteMr {
    /// The base remote address: the buffer's virtual address under `FI_MR_VIRT_ADDR`, else 0 (offsets).
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// The MR key.
    pub key: u64,
}

/// Who may access a memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only local operations (source of sends and writes, target of receives).
    Local,
    /// Also remote writes and reads from peers.
    Remote,
}

/// The `fid` of a libfabric object.
pub(crate) fn fid_of<T>(obj: *mut T) -> *mut sys::fid {
    // Every fid_* struct starts with `struct fid fid;`, so the object pointer is its fid pointer.
    obj.cast()
}

/// A page-aligned, zeroed heap buffer (`FI_MR_ALLOCATED`: we own the pages).
pub(crate) struct Buffer {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

impl Buffer {
    fn new(len: usize) -> Result<Buffer> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|e| FabricError::InvalidArgument(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            alloc::handle_alloc_error(layout);
        }
        Ok(Buffer { ptr, len })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), 4096).expect("layout was valid at allocation");
        // SAFETY: allocated in Buffer::new with this same layout and freed once.
        unsafe { alloc::dealloc(self.ptr, layout) };
    }
}

/// One registered region and its buffer.
pub(crate) struct Mr {
    fid: *mut sys::fid_mr,
    pub(crate) buf: Buffer,
    pub(crate) desc: *mut std::os::raw::c_void,
    pub(crate) key: u64,
    access: Access,
    /// Posted operations that read or write this region (kept by the endpoint).
    pub(crate) inflight: usize,
}

impl Mr {
    fn close(&mut self) {
        if !self.fid.is_null() {
            // SAFETY: an open MR, closed once (the pointer is cleared).
            unsafe { sys::fis_close(fid_of(self.fid)) };
            self.fid = ptr::null_mut();
        }
    }
}

/// The regions of one endpoint, by [`MrHandle`].
pub(crate) struct MrTable {
    pub(crate) slots: Vec<Mr>,
    mr_mode: u32,
    next_key: u64,
}

impl MrTable {
    pub(crate) fn new(mr_mode: u32) -> MrTable {
        MrTable {
            slots: Vec::new(),
            mr_mode,
            next_key: 1,
        }
    }

    /// Allocates and registers a zeroed, page-aligned buffer of `len` bytes
    /// on `domain`, honouring the provider's `mr_mode`: a requested key unless
    /// `FI_MR_PROV_KEY`, bind to `ep` + enable under `FI_MR_ENDPOINT`.
    pub(crate) fn register(
        &mut self,
        domain: *mut sys::fid_domain,
        ep: *mut sys::fid_ep,
        len: usize,
        access: Access,
    ) -> Result<MrHandle> {
        let buf = Buffer::new(len)?;
        let mut flags = (sys::FI_READ | sys::FI_WRITE | sys::FI_SEND | sys::FI_RECV) as u64;
        if access == Access::Remote {
            flags |= (sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE) as u64;
        }
        let requested_key = if self.mr_mode & sys::FI_MR_PROV_KEY != 0 {
            0
        } else {
            self.next_key
        };
        self.next_key += 1;
        let mut fid: *mut sys::fid_mr = ptr::null_mut();
        // SAFETY: `domain` is open (the endpoint's, which outlives the table's
        // registrations) and `buf` stays allocated for as long as the MR is
        // registered (both live in self.slots; the MR is closed before the buffer is freed).
        let ret = unsafe {
            sys::fis_mr_reg(
                domain,
                buf.ptr.cast(),
                len,
                flags,
                0,
                requested_key,
                0,
                &mut fid,
                ptr::null_mut(),
            )
        };
        check("fi_mr_reg", ret.into())?;
        let mut mr = Mr {
            fid,
            buf,
            desc: ptr::null_mut(),
            key: 0,
            access,
            inflight: 0,
        };
        if self.mr_mode & sys::FI_MR_ENDPOINT != 0 {
            // SAFETY: mr and ep are open; binding an MR to its endpoint then enabling it is
            // the FI_MR_ENDPOINT protocol. On failure `mr` is closed below.
            let r = unsafe {
                check("fi_mr_bind", sys::fis_mr_bind(fid, fid_of(ep), 0).into())
                    .and_then(|_| check("fi_mr_enable", sys::fis_mr_enable(fid).into()))
            };
            if let Err(e) = r {
                mr.close();
                return Err(e);
            }
        }
        // SAFETY: fid is a registered (and if needed enabled) MR.
        unsafe {
            mr.desc = sys::fis_mr_desc(fid);
            mr.key = sys::fis_mr_key(fid);
        }
        if mr.key == sys::FI_ADDR_UNSPEC {
            mr.close();
            return Err(FabricError::Call {
                call: "fi_mr_key",
                code: sys::FI_EINVAL as i32,
                message: "key not available (FI_MR_RAW is not supported)".into(),
            });
        }
        self.slots.push(mr);
        Ok(MrHandle(self.slots.len() - 1))
    }

    pub(crate) fn get(&self, h: MrHandle) -> Result<&Mr> {
        self.slots
            .get(h.0)
            .ok_or_else(|| FabricError::InvalidArgument(format!("unknown MR handle {}", h.0)))
    }

    /// A region registered for local access only (the ones this side may write into).
    pub(crate) fn local(&self, h: MrHandle) -> Result<&Mr> {
        let mr = self.get(h)?;
        if mr.access != Access::Local {
            return Err(FabricError::InvalidArgument(
                "MR is remotely writable: use remote_bytes/remote_bytes_mut".into(),
            ));
        }
        Ok(mr)
    }

    /// What a peer needs to write into `h`: the address is the buffer's virtual
    /// address under `FI_MR_VIRT_ADDR` and 0 otherwise (remote addresses are then offsets).
    pub(crate) fn remote(&self, h: MrHandle) -> Result<RemoteMr> {
        let mr = self.get(h)?;
        if mr.access != Access::Remote {
            return Err(FabricError::InvalidArgument(
                "MR was registered for local access only".into(),
            ));
        }
        let addr = if self.mr_mode & sys::FI_MR_VIRT_ADDR != 0 {
            mr.buf.ptr as u64
        } else {
            0
        };
        Ok(RemoteMr {
            addr,
            size: mr.buf.len as u64,
            key: mr.key,
        })
    }

    /// Closes every registration (the buffers are freed when the table drops).
    pub(crate) fn close_all(&mut self) {
        for mr in &mut self.slots {
            mr.close();
        }
    }
}
