//! Completions: reading the CQ (which is also what drives the provider's
//! progress), turning entries and error entries into operation outcomes,
//! received messages and remote-write immediates, and waiting for them
//! with a timeout and a cancel flag.

use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric_sys as sys;

use super::{mask_to, Completed, Endpoint, OpId, OpKind, MSG_SLOT_SIZE};
use crate::error::{check, strerror, FabricError, Result};
use crate::info::c_str;
use crate::observe::Event;

/// CQ entries read per `fi_cq_read`.
const CQ_BATCH: usize = 16;

impl Endpoint {
    /// Drives progress: reads the CQ (which is what progresses tcp/rxm and EFA),
    /// records completions, reposts receives, then retries operations parked on
    /// `-FI_EAGAIN`. Returns how many completions were read.
    pub fn progress(&mut self) -> Result<usize> {
        let mut total = 0;
        loop {
            let mut entries = [sys::fi_cq_data_entry::default(); CQ_BATCH];
            // SAFETY: `cq` is open with FI_CQ_FORMAT_DATA, so each entry is an fi_cq_data_entry
            // and the buffer holds CQ_BATCH of them.
            let n = unsafe { sys::fis_cq_read(self.cq, entries.as_mut_ptr().cast(), CQ_BATCH) };
            if n == -(sys::FI_EAGAIN as isize) {
                break;
            }
            if n == -(sys::FI_EAVAIL as isize) {
                self.read_error()?;
                total += 1;
                continue;
            }
            let n = check("fi_cq_read", n as i64)? as usize;
            for entry in &entries[..n] {
                self.complete(entry)?;
            }
            total += n;
            if n < CQ_BATCH {
                break;
            }
        }
        self.retry_pending()?;
        Ok(total)
    }

    fn complete(&mut self, entry: &sys::fi_cq_data_entry) -> Result<()> {
        if self.observer.is_some() {
            let op = self.inflight.get(&(entry.op_context as usize)).map(|s| s.id);
            let data = (entry.flags & sys::FI_REMOTE_CQ_DATA as u64 != 0).then_some(entry.data);
            self.observe(&Event::Completed {
                op,
                flags: entry.flags,
                len: entry.len as u64,
                data,
            });
        }
        let remote_write = sys::FI_REMOTE_WRITE as u64;
        if entry.flags & remote_write != 0 {
            // Target side of an RMA write. Its `len` is not reliable (0 on tcp): only
            // the immediate is used.
            if entry.flags & sys::FI_REMOTE_CQ_DATA as u64 != 0 {
                self.remote_writes.push_back(mask_to(entry.data, self.cq_data_size));
            }
            return Ok(());
        }
        let Some(slot) = self.inflight.remove(&(entry.op_context as usize)) else {
            return Ok(());
        };
        self.release(&slot.kind);
        match slot.kind {
            OpKind::Recv { slot: s } => {
                let len = entry.len.min(MSG_SLOT_SIZE);
                let mut data = vec![0u8; len];
                let base = self.mrs.slots[self.msg_mr].buf.ptr;
                // SAFETY: the receive into this slot completed, so the provider no longer
                // writes it; len <= MSG_SLOT_SIZE keeps the copy inside the slot.
                unsafe { ptr::copy_nonoverlapping(base.add(s * MSG_SLOT_SIZE), data.as_mut_ptr(), len) };
                self.received.push_back(data);
                self.submit(OpKind::Recv { slot: s })?;
            }
            OpKind::Send { .. } | OpKind::Write { .. } => {
                self.done.insert(slot.id, Ok(()));
            }
        }
        Ok(())
    }

    fn read_error(&mut self) -> Result<()> {
        let mut err = sys::fi_cq_err_entry::default();
        // SAFETY: `cq` is open; `err` is a zeroed fi_cq_err_entry (err_data_size 0 lets the
        // provider point err_data at its own buffer).
        let ret = unsafe { sys::fis_cq_readerr(self.cq, &mut err, 0) };
        if ret == -(sys::FI_EAGAIN as isize) {
            return Ok(());
        }
        check("fi_cq_readerr", ret as i64)?;
        let mut buf = vec![0u8; 256];
        // SAFETY: `cq` is open; err_data comes from the entry just read; buf has 256 bytes.
        let p = unsafe { sys::fis_cq_strerror(self.cq, err.prov_errno, err.err_data, buf.as_mut_ptr().cast(), 256) };
        // SAFETY: fi_cq_strerror returns a NUL-terminated string (ours or the provider's) or NULL.
        let prov_message = unsafe { c_str(p) };
        let slot = self.inflight.remove(&(err.op_context as usize));
        self.observe(&Event::Failed {
            op: slot.as_ref().map(|s| s.id),
            err: err.err,
            prov_errno: err.prov_errno,
        });
        let op = slot
            .as_ref()
            .map_or_else(|| "operation".to_string(), |s| s.kind.to_string());
        let error = FabricError::Completion {
            provider: self.provider.clone(),
            op,
            err: err.err,
            message: strerror(err.err),
            prov_errno: err.prov_errno,
            prov_message,
        };
        match slot {
            Some(slot) => {
                self.release(&slot.kind);
                match slot.kind {
                    // A failed receive (e.g. cancelled or truncated): report it and keep a
                    // receive posted in its slot.
                    OpKind::Recv { slot: s } => {
                        self.async_errors.push_back(error);
                        self.submit(OpKind::Recv { slot: s })?;
                    }
                    _ => {
                        self.done.insert(slot.id, Err(error));
                    }
                }
            }
            None => self.async_errors.push_back(error),
        }
        Ok(())
    }

    fn wait<T>(
        &mut self,
        timeout: Duration,
        what: impl Fn() -> String,
        mut ready: impl FnMut(&mut Self) -> Option<T>,
    ) -> Result<T> {
        let start = Instant::now();
        loop {
            if let Some(e) = self.async_errors.pop_front() {
                return Err(e);
            }
            if let Some(v) = ready(self) {
                return Ok(v);
            }
            if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(FabricError::Cancelled { what: what() });
            }
            if start.elapsed() > timeout {
                return Err(FabricError::Timeout {
                    waited: timeout,
                    what: what(),
                });
            }
            if self.progress()? == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Waits for an operation's completion and returns its outcome.
    pub fn wait_op(&mut self, op: OpId, timeout: Duration) -> Result<()> {
        self.wait(
            timeout,
            || format!("completion of operation {}", op.0),
            |e| e.done.remove(&op.0),
        )?
    }

    /// Whether an operation has completed (its outcome is then collected with [`Endpoint::wait_op`]).
    pub fn is_done(&self, op: OpId) -> bool {
        self.done.contains_key(&op.0)
    }

    /// Waits for the next control message.
    pub fn recv_message(&mut self, timeout: Duration) -> Result<Vec<u8>> {
        self.wait(timeout, || "a control message".into(), |e| e.received.pop_front())
    }

    /// Waits for a remote write carrying immediate `data` (masked to `cq_data_size`);
    /// other immediates that arrive meanwhile are kept.
    pub fn wait_remote_write(&mut self, data: u64, timeout: Duration) -> Result<()> {
        let want = self.mask_cq_data(data);
        self.wait(
            timeout,
            || format!("a remote write with immediate {want:#x}"),
            |e| {
                e.remote_writes
                    .iter()
                    .position(|&d| d == want)
                    .map(|i| e.remote_writes.remove(i))
            },
        )
        .map(|_| ())
    }

    /// Waits for the next remote write that carries immediate data and returns
    /// the immediate (masked to `cq_data_size`).
    pub fn wait_any_remote_write(&mut self, timeout: Duration) -> Result<u64> {
        self.wait(
            timeout,
            || "a remote write with immediate data".into(),
            |e| e.remote_writes.pop_front(),
        )
    }

    /// Waits for the next event of either kind: a remote write carrying
    /// immediate data (its data visible), or the completion of one of this
    /// endpoint's operations with its outcome.
    pub fn wait_event(&mut self, timeout: Duration) -> Result<Completed> {
        self.wait(
            timeout,
            || "a remote write or a completion".into(),
            |e| {
                if let Some(data) = e.remote_writes.pop_front() {
                    return Some(Completed::RemoteWrite(data));
                }
                let id = *e.done.keys().next()?;
                e.done.remove(&id).map(|outcome| Completed::Op(OpId(id), outcome))
            },
        )
    }

    /// A flag every wait checks: once it is set, waits end with
    /// [`FabricError::Cancelled`] (so another thread can abort a run within one
    /// CQ poll; dropping the endpoint then frees everything).
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    /// Operations posted or parked and not yet completed (receives included).
    pub fn outstanding(&self) -> usize {
        self.inflight.len() + self.pending.len()
    }
}
