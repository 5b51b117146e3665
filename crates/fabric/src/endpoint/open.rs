//! Opening an endpoint (fabric, domain, CQ, AV, the enabled endpoint and
//! its posted control-message receives) and what it is once open: the
//! provider's limits, its fabric address, and the peers it may reach.

use std::collections::{HashMap, VecDeque};
use std::ptr;

use fabric_sys as sys;

use super::{mask_to, Endpoint, OpKind, PeerAddr, MSG_SLOT_SIZE};
use crate::error::{check, strerror, FabricError, Result};
use crate::info::{c_str, Info};
use crate::mr::{fid_of, Access, MrTable};
use crate::observe::{Event, Observer};

/// Control-message slots kept posted as receives.
const RECV_SLOTS: usize = 16;
/// Control-message slots for sends.
const SEND_SLOTS: usize = 16;

impl Endpoint {
    /// Opens fabric, domain, CQ, AV and an enabled RDM endpoint for `info`'s
    /// first entry, and posts the control-message receives.
    pub fn open(info: Info) -> Result<Endpoint> {
        Endpoint::open_observed(info, None)
    }

    /// As [`Endpoint::open`], with `observer` told of everything the endpoint
    /// does from its first registration on ([`crate::observe`]).
    pub fn open_observed(info: Info, observer: Option<Observer>) -> Result<Endpoint> {
        let provider = info.provider_name();
        let mr_mode = info.mr_mode();
        let mut e = Endpoint {
            mr_mode,
            cq_data_size: info.cq_data_size(),
            provider,
            info,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            mrs: MrTable::new(mr_mode),
            msg_mr: 0,
            free_send_slots: Vec::new(),
            next_op: 1,
            inflight: HashMap::new(),
            pending: VecDeque::new(),
            done: HashMap::new(),
            received: VecDeque::new(),
            remote_writes: VecDeque::new(),
            async_errors: VecDeque::new(),
            write_flags: sys::FI_DELIVERY_COMPLETE as u64,
            cancel: None,
            observer,
        };
        let raw = e.info.raw();
        // SAFETY: `raw` is a valid fi_info owned by e.info; each out-pointer is a field of
        // `e`, whose Drop closes whatever was opened (in reverse order) if a later step fails.
        unsafe {
            check(
                "fi_fabric",
                sys::fis_fabric((*raw).fabric_attr, &mut e.fabric, ptr::null_mut()).into(),
            )?;
            check(
                "fi_domain",
                sys::fis_domain(e.fabric, raw, &mut e.domain, ptr::null_mut()).into(),
            )?;
            let mut cq_attr = sys::fi_cq_attr {
                format: sys::fi_cq_format_FI_CQ_FORMAT_DATA,
                wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
                ..Default::default()
            };
            check(
                "fi_cq_open",
                sys::fis_cq_open(e.domain, &mut cq_attr, &mut e.cq, ptr::null_mut()).into(),
            )?;
            let mut av_type = (*(*raw).domain_attr).av_type;
            if av_type == sys::fi_av_type_FI_AV_UNSPEC {
                av_type = sys::fi_av_type_FI_AV_TABLE;
            }
            let mut av_attr = sys::fi_av_attr {
                type_: av_type,
                count: 16,
                ..Default::default()
            };
            check(
                "fi_av_open",
                sys::fis_av_open(e.domain, &mut av_attr, &mut e.av, ptr::null_mut()).into(),
            )?;
            check(
                "fi_endpoint",
                sys::fis_endpoint(e.domain, raw, &mut e.ep, ptr::null_mut()).into(),
            )?;
            let bind = (sys::FI_TRANSMIT | sys::FI_RECV) as u64;
            check("fi_ep_bind(cq)", sys::fis_ep_bind(e.ep, fid_of(e.cq), bind).into())?;
            check("fi_ep_bind(av)", sys::fis_ep_bind(e.ep, fid_of(e.av), 0).into())?;
            check("fi_enable", sys::fis_enable(e.ep).into())?;
        }
        let msg = e.register(MSG_SLOT_SIZE * (RECV_SLOTS + SEND_SLOTS), Access::Local)?;
        e.msg_mr = msg.0;
        e.free_send_slots = (RECV_SLOTS..RECV_SLOTS + SEND_SLOTS).rev().collect();
        for slot in 0..RECV_SLOTS {
            e.submit(OpKind::Recv { slot })?;
        }
        Ok(e)
    }

    /// The provider in use, e.g. `tcp;ofi_rxm`.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The provider's `fi_info` (mr_mode, cq_data_size, ...).
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The `mr_mode` in force (what the provider returned).
    pub fn mr_mode(&self) -> u32 {
        self.mr_mode
    }

    /// Bytes of immediate data the provider carries.
    pub fn cq_data_size(&self) -> usize {
        self.cq_data_size
    }

    /// Masks an immediate value to the provider's `cq_data_size`.
    pub fn mask_cq_data(&self, data: u64) -> u64 {
        mask_to(data, self.cq_data_size)
    }

    /// Largest control message [`Endpoint::send`] accepts.
    pub fn max_message(&self) -> usize {
        MSG_SLOT_SIZE.min(self.info.max_msg_size())
    }

    /// This endpoint's fabric address (`fi_getname`; variable length, 32 bytes on EFA).
    pub fn address(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 64];
        let mut len = buf.len();
        // SAFETY: `ep` is an open endpoint; buf has `len` writable bytes.
        let mut ret = unsafe { sys::fis_getname(fid_of(self.ep), buf.as_mut_ptr().cast(), &mut len) };
        if ret == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: as above with the size the provider asked for.
            ret = unsafe { sys::fis_getname(fid_of(self.ep), buf.as_mut_ptr().cast(), &mut len) };
        }
        check("fi_getname", ret.into())?;
        buf.truncate(len);
        Ok(buf)
    }

    /// A printable form of a fabric address (`fi_av_straddr`). Bytes shorter
    /// than this endpoint's own address (a stranger's message may claim
    /// anything) are shown in hex instead: `fi_av_straddr` reads an address
    /// of the provider's own length and is not told how long `addr` is.
    pub fn address_string(&self, addr: &[u8]) -> String {
        let own_len = self.address().map_or(usize::MAX, |own| own.len());
        if addr.len() < own_len {
            let hex: String = addr.iter().map(|b| format!("{b:02x}")).collect();
            return format!("fabric address {hex} ({} bytes)", addr.len());
        }
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: `av` is open; `addr` is readable (the provider reads its own address format
        // from it, and addresses come from fi_getname); buf has `len` writable bytes.
        let p = unsafe { sys::fis_av_straddr(self.av, addr.as_ptr().cast(), buf.as_mut_ptr().cast(), &mut len) };
        // SAFETY: fi_av_straddr returns `buf` (NUL-terminated, possibly truncated) or NULL.
        unsafe { c_str(p) }
    }

    /// Inserts a peer's fabric address into the address vector.
    pub fn insert_peer(&mut self, addr: &[u8]) -> Result<PeerAddr> {
        if addr.is_empty() {
            return Err(FabricError::InvalidArgument("empty fabric address".into()));
        }
        let mut out: sys::fi_addr_t = sys::FI_ADDR_UNSPEC;
        // SAFETY: `av` is open; the provider reads one address of its own format from `addr`,
        // whose length the caller got from a peer's fi_getname.
        let ret = unsafe { sys::fis_av_insert(self.av, addr.as_ptr().cast(), 1, &mut out, 0, ptr::null_mut()) };
        check("fi_av_insert", ret.into())?;
        if ret != 1 || out == sys::FI_ADDR_UNSPEC {
            return Err(FabricError::Call {
                call: "fi_av_insert",
                code: sys::FI_EINVAL as i32,
                message: strerror(22),
            });
        }
        if self.observer.is_some() {
            let address = self.address_string(addr);
            self.observe(&Event::PeerInserted {
                fi_addr: out,
                address: &address,
            });
        }
        Ok(PeerAddr(out))
    }
}
