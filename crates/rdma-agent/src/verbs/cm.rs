//! Our rdma_cm wrapper over `rdma-mummy-sys`. sideway's rdma_cm cannot send
//! private data on connect/accept nor read it from events, and the product's
//! capability blob {addr, rkey, length} travels exactly there.
//!
//! We never let rdma_cm own the QP (no `rdma_create_qp`): the QP is created
//! with sideway and driven INIT→RTR→RTS with [`CmId::qp_attr`]. Hence the
//! active side sees CONNECT_RESPONSE (not ESTABLISHED) and must call
//! [`CmId::establish`] after moving its QP to RTS.

use std::ffi::CStr;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use rdma_mummy_sys as sys;
use sideway::ibverbs::queue_pair::{QueuePairAttribute, QueuePairState};

/// Transport retries before a send fails with IBV_WC_RETRY_EXC_ERR (both
/// connection modes). Not 7: rxe reads a retry count of 7 as "forever", as
/// the spec does only for RNR retries, and a cut link would hang the run.
pub const TRANSPORT_RETRY_COUNT: u8 = 6;

/// A failed rdma_cm call, with the call and what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// A librdmacm call returned an error.
    #[error("{call} failed{context}: {source}")]
    Call {
        /// The librdmacm function.
        call: &'static str,
        /// Extra context, e.g. " for 10.77.0.1:0".
        context: String,
        /// errno.
        source: std::io::Error,
    },
    /// No event within the timeout.
    #[error("timed out after {waited:?} waiting for rdma_cm event {expected}")]
    Timeout {
        /// What we were waiting for.
        expected: String,
        /// How long.
        waited: Duration,
    },
    /// Private data longer than rdma_cm allows.
    #[error("private data of {len} bytes exceeds the 196-byte rdma_cm limit")]
    PrivateDataTooLong {
        /// Its length.
        len: usize,
    },
    /// The cm_id has no device yet (not bound to an RDMA address).
    #[error("rdma_cm id is not bound to an RDMA device (is {0} an address on an RDMA-capable netdev?)")]
    NoDevice(String),
}

fn call_err(call: &'static str, context: impl Into<String>) -> CmError {
    CmError::Call {
        call,
        context: context.into(),
        source: std::io::Error::last_os_error(),
    }
}

/// An rdma_cm event channel; all ids of a session report here.
#[derive(Debug)]
pub struct EventChannel {
    raw: NonNull<sys::rdma_event_channel>,
}

// SAFETY: librdmacm event channels are plain fds with no thread affinity; we
// only read events through `&self` methods that librdmacm serialises itself.
unsafe impl Send for EventChannel {}
// SAFETY: see Send; rdma_get_cm_event on one channel is thread-safe in librdmacm.
unsafe impl Sync for EventChannel {}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: `raw` came from rdma_create_event_channel, and every CmId
        // holds an Arc of this channel, so no id outlives it.
        unsafe { sys::rdma_destroy_event_channel(self.raw.as_ptr()) };
    }
}

/// What happened on the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    /// RDMA_CM_EVENT_ADDR_RESOLVED
    AddrResolved,
    /// RDMA_CM_EVENT_ROUTE_RESOLVED
    RouteResolved,
    /// RDMA_CM_EVENT_CONNECT_REQUEST
    ConnectRequest,
    /// RDMA_CM_EVENT_CONNECT_RESPONSE
    ConnectResponse,
    /// RDMA_CM_EVENT_ESTABLISHED
    Established,
    /// RDMA_CM_EVENT_DISCONNECTED
    Disconnected,
    /// RDMA_CM_EVENT_TIMEWAIT_EXIT
    TimewaitExit,
    /// Any error or other event; the raw code is kept for the message.
    Other(u32),
}

impl CmEventKind {
    fn from_raw(raw: u32) -> CmEventKind {
        use sys::rdma_cm_event_type::*;
        match raw {
            RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            RDMA_CM_EVENT_CONNECT_RESPONSE => CmEventKind::ConnectResponse,
            RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEventKind::TimewaitExit,
            other => CmEventKind::Other(other),
        }
    }
}

/// One event, copied out of librdmacm and already acknowledged.
#[derive(Debug)]
pub struct CmEvent {
    /// The kind of event.
    pub kind: CmEventKind,
    /// librdmacm's name of the event ("RDMA_CM_EVENT_REJECTED", ...).
    pub name: String,
    /// The event status (negative errno or a CM reject reason).
    pub status: i32,
    /// Private data carried by CONNECT_REQUEST / CONNECT_RESPONSE / ESTABLISHED / REJECTED
    /// (may be padded by the transport beyond what the peer sent).
    pub private_data: Vec<u8>,
    /// The peer's requested initiator depth (CONNECT_REQUEST).
    pub initiator_depth: u8,
    /// The peer's offered responder resources (CONNECT_REQUEST).
    pub responder_resources: u8,
    /// CONNECT_REQUEST: the new id for this connection, owned by the caller.
    pub new_id: Option<CmId>,
    /// Which id the event is for, as [`CmId::key`] names it (a listener's
    /// channel carries the events of every connection it accepted).
    pub id_key: usize,
}

impl EventChannel {
    /// A new, non-blocking event channel.
    pub fn new() -> Result<Arc<EventChannel>, CmError> {
        // SAFETY: no arguments; returns NULL on failure which we check.
        let raw = unsafe { sys::rdma_create_event_channel() };
        let raw = NonNull::new(raw).ok_or_else(|| call_err("rdma_create_event_channel", ""))?;
        let channel = Arc::new(EventChannel { raw });
        let fd = channel.fd();
        // SAFETY: fcntl on the channel's own, open fd.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above; only adds O_NONBLOCK so reads never block past our poll timeout.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(call_err("fcntl(O_NONBLOCK)", " on the rdma_cm channel"));
        }
        Ok(channel)
    }

    fn fd(&self) -> RawFd {
        // SAFETY: `raw` is a live channel; `fd` is a plain int field.
        unsafe { (*self.raw.as_ptr()).fd }
    }

    /// A new id in the TCP port space (reliable connected QPs).
    pub fn create_id(self: &Arc<Self>) -> Result<CmId, CmError> {
        let mut id: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: `raw` is a live channel and `id` a valid out pointer; no context pointer.
        let rc = unsafe {
            sys::rdma_create_id(
                self.raw.as_ptr(),
                &mut id,
                std::ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(call_err("rdma_create_id", ""));
        }
        let raw = NonNull::new(id).ok_or_else(|| call_err("rdma_create_id", " (returned NULL)"))?;
        Ok(CmId {
            raw,
            _channel: Arc::clone(self),
        })
    }

    /// The next event, waiting at most `timeout`; `expected` names what the
    /// caller waits for in the timeout message.
    pub fn next_event(self: &Arc<Self>, timeout: Duration, expected: &str) -> Result<CmEvent, CmError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let mut event: *mut sys::rdma_cm_event = std::ptr::null_mut();
            // SAFETY: `raw` is live and `event` a valid out pointer; the fd is
            // non-blocking, so this returns EAGAIN instead of blocking.
            let rc = unsafe { sys::rdma_get_cm_event(self.raw.as_ptr(), &mut event) };
            if rc == 0 && !event.is_null() {
                return Ok(self.take_event(event));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::WouldBlock {
                return Err(CmError::Call {
                    call: "rdma_get_cm_event",
                    context: String::new(),
                    source: err,
                });
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(CmError::Timeout {
                    expected: expected.to_string(),
                    waited: timeout,
                });
            }
            // Short slices so a cancelled session notices within ~100 ms.
            super::os::wait_readable(self.fd(), left.min(Duration::from_millis(100))).map_err(|source| {
                CmError::Call {
                    call: "poll",
                    context: " on the rdma_cm channel".into(),
                    source,
                }
            })?;
        }
    }

    /// Copies what we need out of `event` and acknowledges it.
    fn take_event(self: &Arc<Self>, event: *mut sys::rdma_cm_event) -> CmEvent {
        // SAFETY: `event` is a live event returned by rdma_get_cm_event and not yet acked.
        let ev = unsafe { &*event };
        let kind = CmEventKind::from_raw(ev.event);
        // SAFETY: rdma_event_str returns a static NUL-terminated string for any value.
        let name = unsafe { CStr::from_ptr(sys::rdma_event_str(ev.event)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: for connection events the `conn` member of the union is the
        // active one; for others its fields are zero, which we treat as "none".
        let conn = unsafe { ev.param.conn };
        let carries_conn_param = matches!(
            kind,
            CmEventKind::ConnectRequest | CmEventKind::ConnectResponse | CmEventKind::Established
        ) || ev.event == sys::rdma_cm_event_type::RDMA_CM_EVENT_REJECTED;
        let private_data = if carries_conn_param && !conn.private_data.is_null() && conn.private_data_len > 0 {
            // SAFETY: librdmacm guarantees private_data points at private_data_len
            // bytes valid until the event is acked, which happens below.
            unsafe { std::slice::from_raw_parts(conn.private_data as *const u8, conn.private_data_len as usize) }
                .to_vec()
        } else {
            Vec::new()
        };
        let new_id = if kind == CmEventKind::ConnectRequest {
            NonNull::new(ev.id).map(|raw| CmId {
                raw,
                _channel: Arc::clone(self),
            })
        } else {
            None
        };
        let out = CmEvent {
            kind,
            name,
            status: ev.status,
            private_data,
            initiator_depth: if carries_conn_param { conn.initiator_depth } else { 0 },
            responder_resources: if carries_conn_param {
                conn.responder_resources
            } else {
                0
            },
            new_id,
            id_key: ev.id as usize,
        };
        // SAFETY: `event` came from rdma_get_cm_event and is acked exactly once;
        // nothing borrowed from it survives (private data was copied).
        unsafe { sys::rdma_ack_cm_event(event) };
        out
    }
}

/// An rdma_cm identifier (like a socket). Destroyed on drop.
#[derive(Debug)]
pub struct CmId {
    raw: NonNull<sys::rdma_cm_id>,
    _channel: Arc<EventChannel>,
}

// SAFETY: an rdma_cm_id may be used from any thread; CmId is not Sync, so
// calls on one id never race.
unsafe impl Send for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: `raw` came from rdma_create_id or a CONNECT_REQUEST event, all
        // its events were acked in `take_event`, and rdma_cm owns no QP of ours.
        unsafe { sys::rdma_destroy_id(self.raw.as_ptr()) };
    }
}

/// A socket address in the C layout librdmacm expects.
enum RawSockAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl RawSockAddr {
    fn new(addr: SocketAddr) -> RawSockAddr {
        match addr {
            SocketAddr::V4(a) => RawSockAddr::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => RawSockAddr::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }

    fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        match self {
            RawSockAddr::V4(a) => a as *mut libc::sockaddr_in as *mut libc::sockaddr,
            RawSockAddr::V6(a) => a as *mut libc::sockaddr_in6 as *mut libc::sockaddr,
        }
    }
}

/// Connection parameters we send on connect/accept.
#[derive(Debug, Clone)]
pub struct ConnectParams<'a> {
    /// Our QP number (the QP is ours, not rdma_cm's).
    pub qp_num: u32,
    /// Up to 196 bytes for the peer (the capability blob on accept).
    pub private_data: &'a [u8],
    /// Outstanding RDMA READ/atomic requests we issue.
    pub initiator_depth: u8,
    /// Outstanding RDMA READ/atomic requests we serve.
    pub responder_resources: u8,
}

impl ConnectParams<'_> {
    fn to_raw(&self) -> Result<sys::rdma_conn_param, CmError> {
        if self.private_data.len() > 196 {
            return Err(CmError::PrivateDataTooLong {
                len: self.private_data.len(),
            });
        }
        Ok(sys::rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                std::ptr::null()
            } else {
                self.private_data.as_ptr() as *const libc::c_void
            },
            private_data_len: self.private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 0,
            retry_count: TRANSPORT_RETRY_COUNT,
            // 7 = retry forever on RNR NAK (the receiver is only slow).
            rnr_retry_count: 7,
            srq: 0,
            qp_num: self.qp_num,
        })
    }
}

impl CmId {
    /// A key that names this id among the ids of its channel, to match
    /// events to it ([`CmEvent::id_key`]); valid while the id lives.
    pub fn key(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    /// Binds to a local address (port 0 picks a free port).
    pub fn bind(&self, addr: SocketAddr) -> Result<(), CmError> {
        let mut sa = RawSockAddr::new(addr);
        // SAFETY: `raw` is live; `sa` is a valid sockaddr of the right family for the call's duration.
        let rc = unsafe { sys::rdma_bind_addr(self.raw.as_ptr(), sa.as_mut_ptr() as *mut _) };
        if rc != 0 {
            return Err(call_err("rdma_bind_addr", format!(" for {addr}")));
        }
        Ok(())
    }

    /// Starts listening for connection requests.
    pub fn listen(&self, backlog: i32) -> Result<(), CmError> {
        // SAFETY: `raw` is a live, bound id.
        if unsafe { sys::rdma_listen(self.raw.as_ptr(), backlog) } != 0 {
            return Err(call_err("rdma_listen", ""));
        }
        Ok(())
    }

    /// The local port (after bind).
    pub fn local_port(&self) -> u16 {
        // rdma_get_src_port is not in the mummy shim; read the bound address
        // the way librdmacm does.
        // SAFETY: `raw` is live; after bind, `src_addr_union` holds a sockaddr
        // whose family field tells which member is valid; both put the port
        // at the same offset, so reading `sin_port` via `src_sin` is valid.
        let port = unsafe { (*self.raw.as_ptr()).route.addr.src_addr_union.src_sin.sin_port };
        u16::from_be(port)
    }

    /// The peer's address: on a CONNECT_REQUEST's new id, where the request
    /// came from. None when the family is neither IPv4 nor IPv6.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: `raw` is live; librdmacm fills `dst_addr_union` of a
        // request's new id before the event is delivered. The family field
        // sits at the same offset in every member, and only the member it
        // names is read.
        unsafe {
            let dst = &(*self.raw.as_ptr()).route.addr.dst_addr_union;
            match i32::from(dst.dst_addr.sa_family) {
                libc::AF_INET => {
                    let sin = dst.dst_sin;
                    let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                    Some(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)))
                }
                libc::AF_INET6 => {
                    let sin6 = dst.dst_sin6;
                    let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                    Some(SocketAddr::new(ip.into(), u16::from_be(sin6.sin6_port)))
                }
                _ => None,
            }
        }
    }

    /// Starts resolving `dst` (from `src` if given); ADDR_RESOLVED follows.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr, timeout: Duration) -> Result<(), CmError> {
        let mut src_sa = src.map(RawSockAddr::new);
        let mut dst_sa = RawSockAddr::new(dst);
        let src_ptr = src_sa.as_mut().map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
        // SAFETY: `raw` is live; the sockaddrs live until the call returns (librdmacm copies them).
        let rc = unsafe {
            sys::rdma_resolve_addr(
                self.raw.as_ptr(),
                src_ptr as *mut _,
                dst_sa.as_mut_ptr() as *mut _,
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        };
        if rc != 0 {
            return Err(call_err("rdma_resolve_addr", format!(" for {dst}")));
        }
        Ok(())
    }

    /// Starts resolving the route; ROUTE_RESOLVED follows.
    pub fn resolve_route(&self, timeout: Duration) -> Result<(), CmError> {
        // SAFETY: `raw` is live and address-resolved.
        let rc =
            unsafe { sys::rdma_resolve_route(self.raw.as_ptr(), timeout.as_millis().min(i32::MAX as u128) as i32) };
        if rc != 0 {
            return Err(call_err("rdma_resolve_route", ""));
        }
        Ok(())
    }

    /// The name of the RDMA device this id is bound to ("rxe0").
    pub fn device_name(&self) -> Result<String, CmError> {
        // SAFETY: `raw` is live; `verbs` is either NULL or a context librdmacm keeps open.
        let verbs = unsafe { (*self.raw.as_ptr()).verbs };
        if verbs.is_null() {
            return Err(CmError::NoDevice("the bound address".into()));
        }
        // SAFETY: `verbs` is a live ibv_context and its `device` is valid for the context's life;
        // ibv_get_device_name returns a NUL-terminated string owned by the device.
        let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name((*verbs).device)) };
        Ok(name.to_string_lossy().into_owned())
    }

    /// The device port this id resolved to.
    pub fn port_num(&self) -> u8 {
        // SAFETY: `raw` is live; `port_num` is a plain field.
        unsafe { (*self.raw.as_ptr()).port_num }
    }

    /// The QP attributes for moving our QP to `state` (rdma_init_qp_attr).
    pub fn qp_attr(&self, state: QueuePairState) -> Result<QueuePairAttribute, CmError> {
        // SAFETY: an all-zero ibv_qp_attr is a valid value of this plain C struct.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state as u32;
        let mut mask: libc::c_int = 0;
        // SAFETY: `raw` is live; `attr` and `mask` are valid out parameters.
        let rc = unsafe { sys::rdma_init_qp_attr(self.raw.as_ptr(), &mut attr, &mut mask) };
        if rc != 0 {
            return Err(call_err("rdma_init_qp_attr", format!(" for {state:?}")));
        }
        Ok(QueuePairAttribute::from(&attr, mask))
    }

    /// Sends a connection request (active side).
    pub fn connect(&self, params: &ConnectParams<'_>) -> Result<(), CmError> {
        let mut raw = params.to_raw()?;
        // SAFETY: `raw` conn param and its private data (borrowed from `params`)
        // live until the call returns; librdmacm copies the private data.
        if unsafe { sys::rdma_connect(self.raw.as_ptr(), &mut raw) } != 0 {
            return Err(call_err("rdma_connect", ""));
        }
        Ok(())
    }

    /// Accepts a connection request (passive side), with private data.
    pub fn accept(&self, params: &ConnectParams<'_>) -> Result<(), CmError> {
        let mut raw = params.to_raw()?;
        // SAFETY: as in `connect`.
        if unsafe { sys::rdma_accept(self.raw.as_ptr(), &mut raw) } != 0 {
            return Err(call_err("rdma_accept", ""));
        }
        Ok(())
    }

    /// Rejects a connection request.
    pub fn reject(&self) {
        // SAFETY: `raw` is a live id from a CONNECT_REQUEST; no private data.
        unsafe { sys::rdma_reject(self.raw.as_ptr(), std::ptr::null(), 0) };
    }

    /// Completes the handshake on the active side after CONNECT_RESPONSE.
    pub fn establish(&self) -> Result<(), CmError> {
        // SAFETY: `raw` is live and has received CONNECT_RESPONSE.
        if unsafe { sys::rdma_establish(self.raw.as_ptr()) } != 0 {
            return Err(call_err("rdma_establish", ""));
        }
        Ok(())
    }

    /// Starts tearing the connection down (DISCONNECTED follows on both sides).
    pub fn disconnect(&self) {
        // SAFETY: `raw` is live; disconnecting an unconnected id only returns an error we ignore.
        unsafe { sys::rdma_disconnect(self.raw.as_ptr()) };
    }
}
