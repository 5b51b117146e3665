//! The `fabric-write` workload, after the EFA CPU-memory write demo: the client
//! registers two 16 MiB regions and sends CONNECT {its fabric address, per MR:
//! addr, size, key}; then RandomFill {context, seed, page size, pages scattered
//! across both MRs}. The server generates each page from one MT19937-64 stream
//! seeded by the request (pages in request order, each page the little-endian
//! bytes of successive 64-bit outputs, the last one truncated), RDMA-writes it
//! to the client's page, and puts the request's context (masked to the
//! provider's `cq_data_size`) as immediate data on the final write, which it
//! posts only after every earlier write has completed. The client waits for
//! that immediate, regenerates the stream and verifies; a mismatch names MR,
//! page and offset. Fabric addresses travel out of band (the controller in the
//! product, a channel or socket in tests).
//!
//! Before anything else the server waits for a CONNECT its [`Gate`] admits
//! (in labctl, one carrying the run's connect proof); every other message
//! that comes first is refused and reported to the gate, and the wait goes on.
//!
//! Wire format (little-endian): CONNECT = `1u8, addr_len u16, addr, mr_count u8,
//! mr_count × (addr u64, size u64, key u64), proof_len u8, proof`; RandomFill = `2u8, context u64,
//! seed u64, page_size u64, count u32, count × (mr u32, page u32)`.

use std::time::{Duration, Instant};

use rand_mt::Mt64;

use crate::endpoint::{Access, Endpoint, MrHandle, OpId, PeerAddr, RemoteMr};
use crate::error::FabricError;

/// Size of each of the client's two target regions.
pub const MR_SIZE: usize = 16 << 20;
/// Number of target regions the client registers.
pub const MR_COUNT: usize = 2;

/// Errors of the fabric-write protocol.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The fabric failed.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A peer sent something this side cannot use.
    #[error("fabric-write protocol: {0}")]
    Protocol(String),
    /// The written data differs from the expected MT19937-64 stream.
    #[error("data mismatch in MR {mr}, page {page}, offset {offset}: expected {expected:#04x}, found {actual:#04x}")]
    Mismatch {
        /// Index of the client MR.
        mr: u32,
        /// Page index within the MR.
        page: u32,
        /// Byte offset within the page.
        offset: usize,
        /// Expected byte.
        expected: u8,
        /// Byte found.
        actual: u8,
    },
}

/// CONNECT: the client's fabric address and its target regions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// The client's fabric address (`fi_getname`; 32 bytes on EFA).
    pub address: Vec<u8>,
    /// The regions the server may write.
    pub mrs: Vec<RemoteMr>,
    /// The client's proof that it is the peer the server waits for (opaque
    /// here; empty in the server's answer).
    pub proof: Vec<u8>,
}

/// Which CONNECT a server takes: the first whose proof `admits` accepts.
/// Every message before it that is not such a CONNECT goes to `refused`,
/// with the fabric address it claims (if it is a CONNECT; printed by
/// [`Endpoint::address_string`]) and what was wrong, and the server waits on.
pub struct Gate<'a> {
    admits: Admits<'a>,
    refused: OnRefused<'a>,
}

/// Whether a CONNECT's proof is the awaited one.
type Admits<'a> = Box<dyn Fn(&[u8]) -> bool + 'a>;
/// Told of each message refused: the address a CONNECT claims, and why.
type OnRefused<'a> = Box<dyn FnMut(Option<String>, String) + 'a>;

impl<'a> Gate<'a> {
    /// A gate of `admits` that tells `refused` of everything it turned away.
    pub fn new(admits: impl Fn(&[u8]) -> bool + 'a, refused: impl FnMut(Option<String>, String) + 'a) -> Gate<'a> {
        Gate {
            admits: Box::new(admits),
            refused: Box::new(refused),
        }
    }

    /// A gate that takes the first CONNECT whatever its proof (a peer whose
    /// only clients are its own, as in tests).
    pub fn open() -> Gate<'static> {
        Gate::new(|_| true, |_, _| {})
    }
}

/// Waits for the CONNECT `gate` admits (see [`Gate`]).
pub fn wait_connect(ep: &mut Endpoint, gate: &mut Gate<'_>, timeout: Duration) -> Result<Connect, WriteError> {
    let deadline = Instant::now() + timeout;
    loop {
        let msg = ep.recv_message(deadline.saturating_duration_since(Instant::now()))?;
        match Message::decode(&msg) {
            Ok(Message::Connect(c)) if (gate.admits)(&c.proof) => return Ok(c),
            Ok(Message::Connect(c)) => {
                let why = if c.proof.is_empty() {
                    "its CONNECT carries no proof"
                } else {
                    "its CONNECT's proof is not the one this server waits for"
                };
                (gate.refused)(Some(ep.address_string(&c.address)), why.into())
            }
            Ok(other) => (gate.refused)(None, format!("{} before any CONNECT", other.name())),
            Err(e) => (gate.refused)(None, format!("a message that is not of this protocol ({e})")),
        }
    }
}

/// One target page: region index and page index within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRef {
    /// Index into the client's MRs.
    pub mr: u32,
    /// Page index within the MR (byte offset = page × page size).
    pub page: u32,
}

/// RandomFill: what to generate and where to write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RandomFill {
    /// Immediate data of the final write (masked to `cq_data_size`).
    pub context: u64,
    /// MT19937-64 seed.
    pub seed: u64,
    /// Bytes per page.
    pub page_size: u64,
    /// Pages in generation order.
    pub pages: Vec<PageRef>,
}

/// A decoded control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Client → server handshake.
    Connect(Connect),
    /// Client → server request.
    RandomFill(RandomFill),
}

impl Message {
    /// The message's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Connect(_) => "CONNECT",
            Message::RandomFill(_) => "RandomFill",
        }
    }
}

const TAG_CONNECT: u8 = 1;
const TAG_RANDOM_FILL: u8 = 2;
/// Bytes of a RandomFill before its pages: tag, context, seed, page size, count.
const RANDOM_FILL_HEADER: usize = 1 + 3 * 8 + 4;
/// Bytes per page of a RandomFill: its MR index and page number.
const PAGE_REF_BYTES: usize = 4 + 4;
/// Most pages one RandomFill can name: the message must fit one message slot.
pub const MAX_FILL_PAGES: usize = (crate::endpoint::MSG_SLOT_SIZE - RANDOM_FILL_HEADER) / PAGE_REF_BYTES;

impl Message {
    /// Encodes to the wire format.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Message::Connect(c) => {
                out.push(TAG_CONNECT);
                out.extend_from_slice(&(c.address.len() as u16).to_le_bytes());
                out.extend_from_slice(&c.address);
                out.push(c.mrs.len() as u8);
                for mr in &c.mrs {
                    for v in [mr.addr, mr.size, mr.key] {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                }
                out.push(c.proof.len() as u8);
                out.extend_from_slice(&c.proof);
            }
            Message::RandomFill(r) => {
                out.push(TAG_RANDOM_FILL);
                for v in [r.context, r.seed, r.page_size] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                out.extend_from_slice(&(r.pages.len() as u32).to_le_bytes());
                for p in &r.pages {
                    out.extend_from_slice(&p.mr.to_le_bytes());
                    out.extend_from_slice(&p.page.to_le_bytes());
                }
            }
        }
        out
    }

    /// Decodes the wire format.
    pub fn decode(buf: &[u8]) -> Result<Message, WriteError> {
        let mut r = Reader { buf, pos: 0 };
        match r.u8()? {
            TAG_CONNECT => {
                let n = r.u16()? as usize;
                let address = r.bytes(n)?.to_vec();
                let count = r.u8()?;
                let mrs = (0..count)
                    .map(|_| {
                        Ok(RemoteMr {
                            addr: r.u64()?,
                            size: r.u64()?,
                            key: r.u64()?,
                        })
                    })
                    .collect::<Result<_, WriteError>>()?;
                let proof_len = r.u8()? as usize;
                let proof = r.bytes(proof_len)?.to_vec();
                Ok(Message::Connect(Connect { address, mrs, proof }))
            }
            TAG_RANDOM_FILL => {
                let (context, seed, page_size) = (r.u64()?, r.u64()?, r.u64()?);
                let count = r.u32()?;
                let pages = (0..count)
                    .map(|_| {
                        Ok(PageRef {
                            mr: r.u32()?,
                            page: r.u32()?,
                        })
                    })
                    .collect::<Result<_, WriteError>>()?;
                Ok(Message::RandomFill(RandomFill {
                    context,
                    seed,
                    page_size,
                    pages,
                }))
            }
            t => Err(WriteError::Protocol(format!("unknown message tag {t}"))),
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], WriteError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                WriteError::Protocol(format!("message truncated at byte {} of {}", self.pos, self.buf.len()))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WriteError> {
        Ok(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WriteError> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, WriteError> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, WriteError> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8 bytes")))
    }
}

/// Fills `out` with the next bytes of the stream: little-endian 64-bit outputs,
/// the last one truncated to what fits (so each page consumes ⌈len/8⌉ outputs).
pub fn fill_page(mt: &mut Mt64, out: &mut [u8]) {
    // rand_mt's own fill has exactly these semantics and runs about 2.5x faster
    // than a next_u64 per word here (it batches the tempering), which matters:
    // generation is inside fabric-write's timed window.
    mt.fill_bytes(out);
}

/// `count` distinct pages scattered over `mr_count` regions of `mr_size` bytes,
/// chosen by an MT19937-64 shuffle of `seed` (deterministic).
pub fn scatter_pages(seed: u64, count: usize, page_size: usize, mr_count: usize, mr_size: usize) -> Vec<PageRef> {
    let per_mr = mr_size / page_size.max(1);
    let total = per_mr * mr_count;
    let mut all: Vec<PageRef> = (0..total)
        .map(|i| PageRef {
            mr: (i / per_mr) as u32,
            page: (i % per_mr) as u32,
        })
        .collect();
    let mut mt = Mt64::new(seed ^ 0x9e37_79b9_7f4a_7c15);
    let count = count.min(total);
    for i in 0..count {
        let j = i + (mt.next_u64() % (total - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(count);
    all
}

fn check_pages(req: &RandomFill, mrs: &[u64]) -> Result<(), WriteError> {
    if req.page_size == 0 || req.pages.is_empty() {
        return Err(WriteError::Protocol(
            "RandomFill needs a page size and at least one page".into(),
        ));
    }
    for p in &req.pages {
        let size = mrs
            .get(p.mr as usize)
            .ok_or_else(|| WriteError::Protocol(format!("page refers to MR {} of {}", p.mr, mrs.len())))?;
        let end = (u64::from(p.page) + 1).checked_mul(req.page_size);
        if end.is_none_or(|e| e > *size) {
            return Err(WriteError::Protocol(format!(
                "page {} of {} bytes is outside MR {} ({} bytes)",
                p.page, req.page_size, p.mr, size
            )));
        }
    }
    Ok(())
}

/// The client side: owns two target regions in its endpoint.
#[derive(Debug)]
pub struct Client {
    server: PeerAddr,
    mrs: Vec<MrHandle>,
}

/// What a completed RandomFill moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FillReport {
    /// Bytes written and verified.
    pub bytes: u64,
    /// Request sent → final immediate seen.
    pub transfer: Duration,
}

impl Client {
    /// Registers [`MR_COUNT`] regions of `mr_size` bytes, inserts the server's
    /// address and sends CONNECT with `proof`.
    pub fn connect(
        ep: &mut Endpoint,
        server_address: &[u8],
        mr_size: usize,
        proof: &[u8],
        timeout: Duration,
    ) -> Result<Client, WriteError> {
        let client = Client::register(ep, server_address, mr_size)?;
        client.send_connect(ep, proof, timeout)?;
        Ok(client)
    }

    /// The first half of [`Client::connect`]: inserts the server's address and
    /// registers the regions, sending nothing yet (a caller that records what
    /// CONNECT will carry does so between the halves).
    pub fn register(ep: &mut Endpoint, server_address: &[u8], mr_size: usize) -> Result<Client, WriteError> {
        let server = ep.insert_peer(server_address)?;
        let mut mrs = Vec::new();
        for _ in 0..MR_COUNT {
            mrs.push(ep.register(mr_size, Access::Remote)?);
        }
        Ok(Client { server, mrs })
    }

    /// The second half of [`Client::connect`]: sends CONNECT (this side's
    /// address, its regions and `proof`) and waits for the send to complete.
    pub fn send_connect(&self, ep: &mut Endpoint, proof: &[u8], timeout: Duration) -> Result<(), WriteError> {
        let remote = self
            .mrs
            .iter()
            .map(|&mr| ep.remote_mr(mr))
            .collect::<Result<Vec<_>, _>>()?;
        let msg = Message::Connect(Connect {
            address: ep.address()?,
            mrs: remote,
            proof: proof.to_vec(),
        })
        .encode();
        let op = ep.send(self.server, &msg)?;
        ep.wait_op(op, timeout)?;
        Ok(())
    }

    /// The client's target regions.
    pub fn mrs(&self) -> &[MrHandle] {
        &self.mrs
    }

    /// Sends `req`, waits for the final immediate and verifies every page.
    pub fn random_fill(
        &mut self,
        ep: &mut Endpoint,
        req: &RandomFill,
        timeout: Duration,
    ) -> Result<FillReport, WriteError> {
        let sizes = self
            .mrs
            .iter()
            .map(|&m| ep.mr_len(m).map(|l| l as u64))
            .collect::<Result<Vec<_>, _>>()?;
        check_pages(req, &sizes)?;
        let page_size = req.page_size as usize;
        for p in &req.pages {
            // SAFETY: no RandomFill is outstanding, so the server is not writing our regions
            // (it writes only in response to a request, and the previous one completed).
            let bytes = unsafe { ep.remote_bytes_mut(self.mrs[p.mr as usize])? };
            let off = p.page as usize * page_size;
            bytes[off..off + page_size].fill(0);
        }
        let start = Instant::now();
        let op = ep.send(self.server, &Message::RandomFill(req.clone()).encode())?;
        ep.wait_op(op, timeout)?;
        ep.wait_remote_write(req.context, timeout.saturating_sub(start.elapsed()))?;
        let transfer = start.elapsed();
        let mut mt = Mt64::new(req.seed);
        let mut expected = vec![0u8; page_size];
        for p in &req.pages {
            fill_page(&mut mt, &mut expected);
            // SAFETY: the final write's immediate arrived and the server posts it only after all
            // earlier writes completed, so no write into our regions is in flight.
            let bytes = unsafe { ep.remote_bytes(self.mrs[p.mr as usize])? };
            let off = p.page as usize * page_size;
            let actual = &bytes[off..off + page_size];
            if let Some(i) = actual.iter().zip(&expected).position(|(a, e)| a != e) {
                return Err(WriteError::Mismatch {
                    mr: p.mr,
                    page: p.page,
                    offset: i,
                    expected: expected[i],
                    actual: actual[i],
                });
            }
        }
        Ok(FillReport {
            bytes: req.page_size * req.pages.len() as u64,
            transfer,
        })
    }
}

/// The server side: generates pages into two local staging regions in turn
/// (one is generated while the other's writes are in flight) and writes them.
#[derive(Debug)]
pub struct Server {
    staging: [MrHandle; 2],
    client: Option<(PeerAddr, Vec<RemoteMr>)>,
    corrupt_page: bool,
}

/// What one served request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeReport {
    /// Pages written.
    pub pages: usize,
    /// Bytes written.
    pub bytes: u64,
    /// The immediate put on the final write.
    pub immediate: u64,
}

impl Server {
    /// Registers two local staging regions of `staging_size` bytes each (at least one page).
    pub fn new(ep: &mut Endpoint, staging_size: usize) -> Result<Server, WriteError> {
        Ok(Server {
            staging: [
                ep.register(staging_size, Access::Local)?,
                ep.register(staging_size, Access::Local)?,
            ],
            client: None,
            corrupt_page: false,
        })
    }

    /// Negative test: the next request's last page goes out with its middle
    /// byte flipped; the client's check must fail.
    pub fn corrupt_a_page(&mut self) {
        self.corrupt_page = true;
    }

    /// Waits for the CONNECT `gate` admits and inserts the client's address.
    pub fn accept(&mut self, ep: &mut Endpoint, gate: &mut Gate<'_>, timeout: Duration) -> Result<Connect, WriteError> {
        let c = wait_connect(ep, gate, timeout)?;
        self.accept_connect(ep, c)
    }

    /// Takes a CONNECT received by the caller: inserts the client's address.
    pub fn accept_connect(&mut self, ep: &mut Endpoint, c: Connect) -> Result<Connect, WriteError> {
        let peer = ep.insert_peer(&c.address)?;
        self.client = Some((peer, c.mrs.clone()));
        Ok(c)
    }

    /// Waits for one RandomFill and writes its pages.
    pub fn serve(&mut self, ep: &mut Endpoint, timeout: Duration) -> Result<ServeReport, WriteError> {
        if self.client.is_none() {
            return Err(WriteError::Protocol("RandomFill before CONNECT".into()));
        }
        match Message::decode(&ep.recv_message(timeout)?)? {
            Message::RandomFill(r) => self.serve_request(ep, &r, timeout),
            other => Err(WriteError::Protocol(format!("expected RandomFill, got {other:?}"))),
        }
    }

    /// Writes the pages of a RandomFill received by the caller.
    pub fn serve_request(
        &mut self,
        ep: &mut Endpoint,
        req: &RandomFill,
        timeout: Duration,
    ) -> Result<ServeReport, WriteError> {
        let (peer, mrs) = self
            .client
            .clone()
            .ok_or_else(|| WriteError::Protocol("RandomFill before CONNECT".into()))?;
        check_pages(req, &mrs.iter().map(|m| m.size).collect::<Vec<_>>())?;
        let page_size = req.page_size as usize;
        let per_batch = ep.mr_len(self.staging[0])? / page_size;
        if per_batch == 0 {
            return Err(WriteError::Protocol(format!(
                "page size {page_size} exceeds the staging region"
            )));
        }
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let mut mt = Mt64::new(req.seed);
        let (last, rest) = req.pages.split_last().expect("check_pages rejects empty requests");
        // Pages before the last, in batches that fit one staging region: batch k is
        // generated into region k mod 2 once that region's previous writes (batch k-2)
        // completed, so generation overlaps the other region's writes.
        let mut in_flight: [Vec<OpId>; 2] = [Vec::new(), Vec::new()];
        for (k, batch) in rest.chunks(per_batch).enumerate() {
            let staging = self.staging[k % 2];
            for op in in_flight[k % 2].drain(..) {
                ep.wait_op(op, left())?;
            }
            for i in 0..batch.len() {
                fill_page(
                    &mut mt,
                    &mut ep.local_bytes_mut(staging)?[i * page_size..(i + 1) * page_size],
                );
                // With manual-progress providers (tcp, EFA) the other region's bytes move only
                // inside libfabric calls; without this the wire idles while pages are generated.
                ep.progress()?;
            }
            for (i, p) in batch.iter().enumerate() {
                let remote = &mrs[p.mr as usize];
                let op = ep.write(
                    peer,
                    staging,
                    i * page_size,
                    page_size,
                    remote,
                    p.page as u64 * req.page_size,
                    None,
                )?;
                in_flight[k % 2].push(op);
            }
        }
        // The final write goes out only after every earlier one completed.
        for op in in_flight.into_iter().flatten() {
            ep.wait_op(op, left())?;
        }
        let immediate = ep.mask_cq_data(req.context);
        fill_page(&mut mt, &mut ep.local_bytes_mut(self.staging[0])?[..page_size]);
        if std::mem::take(&mut self.corrupt_page) {
            ep.local_bytes_mut(self.staging[0])?[page_size / 2] ^= 0xFF;
        }
        let remote = &mrs[last.mr as usize];
        let op = ep.write(
            peer,
            self.staging[0],
            0,
            page_size,
            remote,
            last.page as u64 * req.page_size,
            Some(immediate),
        )?;
        ep.wait_op(op, timeout)?;
        Ok(ServeReport {
            pages: req.pages.len(),
            bytes: req.page_size * req.pages.len() as u64,
            immediate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_mt19937_64_reference_vector() {
        // The C++ standard fixes the 10000th output of a default-seeded (5489) mt19937_64.
        let mut mt = Mt64::new(5489);
        let v = (0..10_000).map(|_| mt.next_u64()).last();
        assert_eq!(v, Some(9_981_545_732_273_789_042));
    }

    #[test]
    fn test_fill_page_truncates_last_word() {
        let mut a = Mt64::new(7);
        let mut page = [0u8; 12];
        fill_page(&mut a, &mut page);
        let mut b = Mt64::new(7);
        assert_eq!(page[..8], b.next_u64().to_le_bytes());
        assert_eq!(page[8..], b.next_u64().to_le_bytes()[..4]);
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn test_messages_round_trip() {
        let c = Message::Connect(Connect {
            address: (0..32).collect(),
            mrs: vec![
                RemoteMr {
                    addr: 0x7f00_0000_1000,
                    size: MR_SIZE as u64,
                    key: 0xdead
                };
                2
            ],
            proof: vec![0x5A; 16],
        });
        assert_eq!(Message::decode(&c.encode()).unwrap(), c);
        let r = Message::RandomFill(RandomFill {
            context: 0x123,
            seed: 0xb584_0000_1111,
            page_size: 1 << 20,
            pages: scatter_pages(1, 8, 1 << 20, 2, MR_SIZE),
        });
        assert_eq!(Message::decode(&r.encode()).unwrap(), r);
        assert!(matches!(Message::decode(&[2, 0, 0]), Err(WriteError::Protocol(_))));
    }

    #[test]
    fn test_the_largest_randomfill_fits_one_message_slot() {
        let fill = |pages: usize| {
            Message::RandomFill(RandomFill {
                context: 1,
                seed: 2,
                page_size: 4096,
                pages: scatter_pages(3, pages, 4096, MR_COUNT, MR_SIZE),
            })
            .encode()
            .len()
        };
        assert!(fill(MAX_FILL_PAGES) <= crate::endpoint::MSG_SLOT_SIZE);
        assert!(fill(MAX_FILL_PAGES + 1) > crate::endpoint::MSG_SLOT_SIZE);
    }

    #[test]
    fn test_scatter_pages_distinct_and_in_range() {
        let pages = scatter_pages(42, 20, 1 << 20, 2, MR_SIZE);
        assert_eq!(pages.len(), 20);
        for (i, p) in pages.iter().enumerate() {
            assert!(p.mr < 2 && p.page < 16);
            assert!(!pages[..i].contains(p));
        }
        assert!(pages.iter().any(|p| p.mr == 0) && pages.iter().any(|p| p.mr == 1));
    }
}
