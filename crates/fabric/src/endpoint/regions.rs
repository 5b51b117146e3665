//! The endpoint's registered regions: registering one, and borrowing its
//! bytes only while no posted operation (ours) or peer (theirs) uses them.

use super::{Endpoint, OpKind, OpSlot};
use crate::error::{FabricError, Result};
use crate::mr::{Access, MrHandle, RemoteMr};
use crate::observe::Event;

impl Endpoint {
    /// Allocates and registers a zeroed, page-aligned buffer of `len` bytes,
    /// honouring the provider's `mr_mode` ([`MrTable::register`]).
    pub fn register(&mut self, len: usize, access: Access) -> Result<MrHandle> {
        let h = self.mrs.register(self.domain, self.ep, len, access)?;
        if let Some(observe) = self.observer.as_mut() {
            let mr = self.mrs.get(h)?;
            observe(&Event::Registered {
                addr: mr.buf.ptr as u64,
                len: len as u64,
                key: mr.key,
                remote: access == Access::Remote,
            });
        }
        Ok(h)
    }

    /// Length of a registered region.
    pub fn mr_len(&self, h: MrHandle) -> Result<usize> {
        Ok(self.mrs.get(h)?.buf.len)
    }

    /// What a peer needs to write into `h` ([`MrTable::remote`]).
    pub fn remote_mr(&self, h: MrHandle) -> Result<RemoteMr> {
        self.mrs.remote(h)
    }

    /// The bytes of a local-only region, for filling before a send or write.
    /// Fails while an operation that uses the region is in flight.
    pub fn local_bytes_mut(&mut self, h: MrHandle) -> Result<&mut [u8]> {
        let mr = self.mrs.local(h)?;
        if mr.inflight != 0 {
            return Err(FabricError::InvalidArgument(format!(
                "{} operations in flight on this MR",
                mr.inflight
            )));
        }
        let (p, len) = (mr.buf.ptr, mr.buf.len);
        // SAFETY: the buffer is `len` bytes we own; no posted operation reads or writes it
        // (inflight == 0), no peer has remote access, and `&mut self` excludes other borrows.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// The bytes of a region whatever is in flight on it, local or remote,
    /// for protocols that give each byte one owner at a time (a
    /// collective: a peer writes a range only between a barrier and the
    /// immediate that announces it; this endpoint's writes read ranges the
    /// caller leaves alone until they complete). Nothing is checked, as
    /// with the verbs layer's buffers: a byte the protocol lets a peer
    /// write while it is read shows as a wrong value, which its checks
    /// catch.
    pub fn shared_bytes_mut(&mut self, h: MrHandle) -> Result<&mut [u8]> {
        let mr = self.mrs.get(h)?;
        let (p, len) = (mr.buf.ptr, mr.buf.len);
        // SAFETY: the buffer is `len` bytes this endpoint owns and keeps
        // allocated while it lives; `&mut self` makes this the only Rust view
        // of it. Device and peer accesses are outside Rust's model, as for
        // every registered buffer; the caller's protocol orders them.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// Bytes `offset .. offset + len` of a local-only region, for restamping
    /// one slot while writes from other slots of the region are in flight.
    /// Fails while a posted write reads any byte of the range.
    pub fn local_range_mut(&mut self, h: MrHandle, offset: usize, len: usize) -> Result<&mut [u8]> {
        let mr = self.mrs.local(h)?;
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= mr.buf.len)
            .ok_or_else(|| {
                FabricError::InvalidArgument(format!(
                    "range {offset} + {len} is outside the MR's {} bytes",
                    mr.buf.len
                ))
            })?;
        let overlaps = |slot: &OpSlot| match slot.kind {
            OpKind::Write {
                mr: m,
                offset: o,
                len: l,
                ..
            } => m == h.0 && o < end && offset < o + l,
            _ => false,
        };
        if self.inflight.values().any(|s| overlaps(s)) || self.pending.iter().any(|s| overlaps(s)) {
            return Err(FabricError::InvalidArgument(format!(
                "a write in flight reads bytes {offset}..{end} of this MR"
            )));
        }
        let p = mr.buf.ptr;
        // SAFETY: the range lies within the `len` bytes we own (checked above); no posted
        // operation reads it (no in-flight or pending write overlaps it, and sends and
        // receives use the message region, not this one); no peer has remote access to a
        // local-only region; and `&mut self` excludes other borrows.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.add(offset), len) })
    }

    /// The bytes of a remotely accessible region.
    ///
    /// # Safety
    /// No peer may write into the region while the slice is alive: the caller
    /// must know that every remote write targeting it has completed (e.g. it saw
    /// the final immediate of the transfer) and that no new one will be issued.
    pub unsafe fn remote_bytes(&self, h: MrHandle) -> Result<&[u8]> {
        let mr = self.mrs.get(h)?;
        // SAFETY: we own the buffer; the caller guarantees there are no concurrent remote writes.
        Ok(unsafe { std::slice::from_raw_parts(mr.buf.ptr, mr.buf.len) })
    }

    /// Mutable bytes of a remotely accessible region (e.g. to clear it).
    ///
    /// # Safety
    /// As for [`Endpoint::remote_bytes`]: no peer accesses the region while the slice is alive.
    pub unsafe fn remote_bytes_mut(&mut self, h: MrHandle) -> Result<&mut [u8]> {
        let mr = self.mrs.get(h)?;
        if mr.inflight != 0 {
            return Err(FabricError::InvalidArgument(format!(
                "{} operations in flight on this MR",
                mr.inflight
            )));
        }
        // SAFETY: we own the buffer, `&mut self` excludes local borrows and in-flight local
        // operations; the caller guarantees there is no remote access.
        Ok(unsafe { std::slice::from_raw_parts_mut(mr.buf.ptr, mr.buf.len) })
    }
}
