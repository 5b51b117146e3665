//! The `fabric-bw` and `fabric-lat` protocols: libfabric counterparts of the
//! verbs `write-bw` and `send-lat`, over the same RDM endpoint as `fabric-write`.
//!
//! Both start with the same handshake: the client sends CONNECT {its fabric
//! address, no MRs, its proof}; the server waits for one its [`Gate`]
//! admits, inserts it and answers CONNECT {its address, its target MR (bw)
//! or none (lat)}. The answer is also the server's "ready".
//!
//! `fabric-bw` (per size of the run): the client keeps up to `slots`
//! `fi_writemsg` of `size` bytes outstanding (`slots = min(depth, target MR /
//! size)`), write `i` into slot `i mod slots` of the server's target from the
//! same slot of its source: the MT19937-64 stream of the run's seed with the
//! write's sequence number `i` in its first (up to 8) bytes. (A slot is
//! restamped only after the write that last used it completed, hence the
//! window of `slots`.) When the count (or time) is reached it drains the
//! window and posts one final write carrying the size's write count as remote
//! CQ data: the server knows the end and the count from that completion, and
//! since the final write is posted only after every earlier one completed
//! (`FI_DELIVERY_COMPLETE`), all data is in place when it sees it. The server
//! checks every used slot: it must hold the stream stamped with the last
//! write the count puts there (so a count the writes do not back, or a lost
//! write among the last `slots`, shows; an earlier one is overwritten by its
//! successor in the same slot, which a target that sees only its memory cannot
//! tell). A mismatch names slot, byte of the MR and offset. It zeroes the
//! slots and answers SIZE-END, which lets the client start the next size. The
//! client's clock runs from the first post to the final write's completion.
//!
//! `fabric-lat` (per size): a ping-pong of untagged messages as `fi_pingpong`
//! does it (`fi_send`/`fi_recv` on an RDM endpoint): the client sends `size`
//! bytes (the stream of the seed, the first up-to-8 bytes replaced by the
//! ping's counter), the server checks and echoes them, and a sample is the
//! client's send-to-echo time / 2 (`fi_pingpong`'s usec/xfer is the same half
//! round trip, averaged). The client checks every echo against what it sent.
//! A size ends with the client's SIZE-END {index, pings} (a message whose
//! length differs from `size`), which the server answers with its own.
//!
//! Wire format (little-endian), besides [`crate::write::Message`]'s CONNECT:
//! SIZE-END = `3u8, index u32, count u64` (padded with one zero byte when the
//! ping size is 13, so that it never has a ping's length).

use std::time::{Duration, Instant};

use rand_mt::Mt64;

use crate::endpoint::{Access, Endpoint, MrHandle, OpId, PeerAddr, RemoteMr};
use crate::write::{fill_page, wait_connect, Connect, Gate, Message, WriteError};

/// Largest target region a `fabric-bw` server registers (its slots).
pub const TARGET_MAX: usize = 16 << 20;

const TAG_SIZE_END: u8 = 3;
const SIZE_END_LEN: usize = 13;

/// How long one size runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// This many operations (writes, or pings).
    Count(u64),
    /// Until this much time has passed (at least one operation).
    After(Duration),
}

impl Stop {
    fn more(&self, done: u64, started: Instant) -> bool {
        match *self {
            Stop::Count(n) => done < n,
            Stop::After(d) => done == 0 || started.elapsed() < d,
        }
    }
}

/// The bytes every run's source (bw) and pings (lat) are made of: the
/// MT19937-64 stream of `seed`, as [`fill_page`] lays it out.
pub fn stream(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    fill_page(&mut Mt64::new(seed), &mut out);
    out
}

/// SIZE-END: the end of one size of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeEnd {
    /// Index of the size in the run.
    pub index: u32,
    /// Operations of that size (writes seen by the server, pings sent by the client).
    pub count: u64,
}

impl SizeEnd {
    /// Encodes, never with the length `ping_size` (see the module doc).
    pub fn encode(&self, ping_size: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(SIZE_END_LEN + 1);
        out.push(TAG_SIZE_END);
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        if ping_size == SIZE_END_LEN {
            out.push(0);
        }
        out
    }

    /// Decodes a SIZE-END.
    pub fn decode(buf: &[u8]) -> Result<SizeEnd, WriteError> {
        if buf.len() < SIZE_END_LEN || buf[0] != TAG_SIZE_END {
            return Err(WriteError::Protocol(format!(
                "expected SIZE-END ({SIZE_END_LEN} bytes, tag {TAG_SIZE_END}), got {} bytes starting {:?}",
                buf.len(),
                &buf[..buf.len().min(4)]
            )));
        }
        Ok(SizeEnd {
            index: u32::from_le_bytes(buf[1..5].try_into().expect("4 bytes")),
            count: u64::from_le_bytes(buf[5..13].try_into().expect("8 bytes")),
        })
    }
}

fn expect_size_end(ep: &mut Endpoint, index: u32, timeout: Duration) -> Result<SizeEnd, WriteError> {
    let end = SizeEnd::decode(&ep.recv_message(timeout)?)?;
    if end.index != index {
        return Err(WriteError::Protocol(format!(
            "SIZE-END for size #{} while size #{index} was running",
            end.index
        )));
    }
    Ok(end)
}

fn send_and_wait(ep: &mut Endpoint, peer: PeerAddr, msg: &[u8], timeout: Duration) -> Result<(), WriteError> {
    let op = ep.send(peer, msg)?;
    ep.wait_op(op, timeout)?;
    Ok(())
}

/// Client side of the handshake: inserts the server, sends CONNECT with
/// `proof`, returns the server's answer (its MRs).
pub fn connect(
    ep: &mut Endpoint,
    server_address: &[u8],
    proof: &[u8],
    timeout: Duration,
) -> Result<(PeerAddr, Connect), WriteError> {
    let start = Instant::now();
    let server = ep.insert_peer(server_address)?;
    let hello = Message::Connect(Connect {
        address: ep.address()?,
        mrs: Vec::new(),
        proof: proof.to_vec(),
    });
    send_and_wait(ep, server, &hello.encode(), timeout)?;
    match Message::decode(&ep.recv_message(timeout.saturating_sub(start.elapsed()))?)? {
        Message::Connect(c) => Ok((server, c)),
        other => Err(WriteError::Protocol(format!(
            "expected the server's CONNECT, got {other:?}"
        ))),
    }
}

/// Server side of the handshake: waits for the CONNECT `gate` admits,
/// inserts the client and answers with `mrs`.
pub fn accept(
    ep: &mut Endpoint,
    mrs: Vec<RemoteMr>,
    gate: &mut Gate<'_>,
    timeout: Duration,
) -> Result<(PeerAddr, Connect), WriteError> {
    let start = Instant::now();
    let c = wait_connect(ep, gate, timeout)?;
    let client = ep.insert_peer(&c.address)?;
    let answer = Message::Connect(Connect {
        address: ep.address()?,
        mrs,
        proof: Vec::new(),
    });
    send_and_wait(ep, client, &answer.encode(), timeout.saturating_sub(start.elapsed()))?;
    Ok((client, c))
}

/// One measured size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwPoint {
    /// Bytes per write.
    pub size: usize,
    /// Writes, the final one included.
    pub writes: u64,
    /// First post → final write's completion.
    pub elapsed: Duration,
}

/// The client of `fabric-bw`: the writer.
#[derive(Debug)]
pub struct BwClient {
    server: PeerAddr,
    target: RemoteMr,
    source: MrHandle,
    base: Vec<u8>,
    claim_lost_write: bool,
}

impl BwClient {
    /// Shakes hands, then registers the source: as many slots as the
    /// server's target (at most [`TARGET_MAX`] bytes), filled per size.
    pub fn connect(
        ep: &mut Endpoint,
        server_address: &[u8],
        max_size: usize,
        seed: u64,
        proof: &[u8],
        timeout: Duration,
    ) -> Result<BwClient, WriteError> {
        let (server, answer) = connect(ep, server_address, proof, timeout)?;
        let target = *answer
            .mrs
            .first()
            .ok_or_else(|| WriteError::Protocol("the fabric-bw server offered no target MR".into()))?;
        if target.size < max_size as u64 {
            return Err(WriteError::Protocol(format!(
                "the server's target MR has {} bytes, less than one write of {max_size}",
                target.size
            )));
        }
        let source = ep.register((target.size as usize).min(TARGET_MAX), Access::Local)?;
        Ok(BwClient {
            server,
            target,
            source,
            base: stream(seed, max_size),
            claim_lost_write: false,
        })
    }

    /// Negative test: the next size's final count claims one write more than
    /// was posted, as if one had been lost; the server's check must fail.
    pub fn claim_a_lost_write(&mut self) {
        self.claim_lost_write = true;
    }

    /// Slots of the target (and of the source) a size uses.
    fn slots(&self, size: usize, depth: usize) -> usize {
        (self.target.size as usize / size).clamp(1, depth.max(1))
    }

    /// Stamps write `seq` into its source slot.
    fn stamp(&self, ep: &mut Endpoint, size: usize, slot: usize, seq: u64) -> Result<(), WriteError> {
        let bytes = ep.local_range_mut(self.source, slot * size, size)?;
        ping(&self.base[..size], seq, bytes);
        Ok(())
    }

    /// The server's target region.
    pub fn target(&self) -> RemoteMr {
        self.target
    }

    /// Runs size `index` of the run: up to `min(depth, slots)` writes outstanding until `stop`,
    /// then the final write with the count. `on_complete(bytes)` is called as
    /// writes complete (for peak tracking). Waits for the server's SIZE-END.
    #[allow(clippy::too_many_arguments)]
    pub fn run_size(
        &mut self,
        ep: &mut Endpoint,
        index: u32,
        size: usize,
        depth: usize,
        stop: Stop,
        timeout: Duration,
        on_complete: &mut dyn FnMut(u64),
    ) -> Result<BwPoint, WriteError> {
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let slots = self.slots(size, depth);
        let start = Instant::now();
        // All but the final write. A count of n means n - 1 windowed writes.
        let windowed = match stop {
            Stop::Count(n) => Stop::Count(n.saturating_sub(1)),
            s @ Stop::After(_) => s,
        };
        // Windowed writes need only transmit completion when the provider orders
        // writes: the final, delivery-complete write then lands after all of them.
        let delivery = ep.delivery_complete();
        if ep.orders_writes() {
            ep.set_delivery_complete(false);
        }
        let outcome = self.post_window(ep, size, slots, windowed, start, deadline, on_complete);
        ep.set_delivery_complete(delivery);
        let posted = outcome?;
        let writes = posted + 1;
        let slot = (posted as usize) % slots;
        self.stamp(ep, size, slot, posted)?;
        let claimed = writes + u64::from(std::mem::take(&mut self.claim_lost_write));
        let count = ep.mask_cq_data(claimed);
        let op = ep.write(
            self.server,
            self.source,
            slot * size,
            size,
            &self.target,
            (slot * size) as u64,
            Some(count),
        )?;
        ep.wait_op(op, left())?;
        on_complete(size as u64);
        let elapsed = start.elapsed();
        let end = expect_size_end(ep, index, left())?;
        if end.count != count {
            return Err(WriteError::Protocol(format!(
                "the server counted {} writes of size #{index}, the client posted {writes}",
                end.count
            )));
        }
        Ok(BwPoint {
            size,
            writes: claimed,
            elapsed,
        })
    }

    /// Posts the windowed writes (all but the final one) and waits for them all;
    /// returns how many were posted. At most `slots` are outstanding: write
    /// `i` restamps the source slot of write `i - slots`, which must be done.
    #[allow(clippy::too_many_arguments)]
    fn post_window(
        &self,
        ep: &mut Endpoint,
        size: usize,
        slots: usize,
        stop: Stop,
        start: Instant,
        deadline: Instant,
        on_complete: &mut dyn FnMut(u64),
    ) -> Result<u64, WriteError> {
        let left = || deadline.saturating_duration_since(Instant::now());
        let mut window: std::collections::VecDeque<OpId> = std::collections::VecDeque::with_capacity(slots);
        let mut posted = 0u64;
        while stop.more(posted, start) {
            if window.len() >= slots {
                let op = window.pop_front().expect("window is full");
                ep.wait_op(op, left())?;
                on_complete(size as u64);
            }
            let slot = (posted as usize) % slots;
            self.stamp(ep, size, slot, posted)?;
            let op = ep.write(
                self.server,
                self.source,
                slot * size,
                size,
                &self.target,
                (slot * size) as u64,
                None,
            )?;
            window.push_back(op);
            posted += 1;
        }
        for op in window.drain(..) {
            ep.wait_op(op, left())?;
            on_complete(size as u64);
        }
        Ok(posted)
    }
}

/// The server of `fabric-bw`: the target.
#[derive(Debug)]
pub struct BwServer {
    client: PeerAddr,
    target: MrHandle,
    expected: Vec<u8>,
    depth: usize,
}

/// What the server saw of one size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwServed {
    /// Writes of this size (the final write's immediate).
    pub writes: u64,
    /// Ok, or where the first slot differed from the stream.
    pub verdict: Result<(), String>,
}

impl BwServer {
    /// Registers the target (`min(depth, 16 MiB / max_size)` slots of
    /// `max_size`, at least one) and waits for the client's CONNECT.
    pub fn accept(
        ep: &mut Endpoint,
        max_size: usize,
        depth: usize,
        seed: u64,
        gate: &mut Gate<'_>,
        timeout: Duration,
    ) -> Result<BwServer, WriteError> {
        let slots = (TARGET_MAX / max_size.max(1)).clamp(1, depth.max(1));
        let target = ep.register(max_size * slots, Access::Remote)?;
        let (client, _) = accept(ep, vec![ep.remote_mr(target)?], gate, timeout)?;
        Ok(BwServer {
            client,
            target,
            expected: stream(seed, max_size),
            depth,
        })
    }

    /// Waits for the final write of size `index`, checks and clears the slots
    /// it used and answers SIZE-END.
    pub fn serve_size(
        &mut self,
        ep: &mut Endpoint,
        index: u32,
        size: usize,
        timeout: Duration,
    ) -> Result<BwServed, WriteError> {
        let start = Instant::now();
        let count = ep.wait_any_remote_write(timeout)?;
        let len = ep.mr_len(self.target)?;
        let slots = (len / size).clamp(1, self.depth.max(1));
        let used = (count.min(slots as u64)) as usize;
        // SAFETY: the final write of this size arrived, and the client posts it only after
        // every earlier write completed (delivery complete); it writes nothing more until
        // our SIZE-END, which is sent after the slice is gone.
        let bytes = unsafe { ep.remote_bytes_mut(self.target)? };
        let mut want = vec![0u8; size];
        let mut verdict = Ok(());
        for slot in 0..used {
            // The last write the count puts in this slot.
            let seq = last_write_into(slot as u64, slots as u64, count);
            ping(&self.expected[..size], seq, &mut want);
            let got = &bytes[slot * size..(slot + 1) * size];
            if let Some(off) = got.iter().zip(&want).position(|(a, e)| a != e) {
                verdict = Err(format!(
                    "{size} B writes: slot {slot} (byte {} of the target MR), offset {off}: expected {:#04x}, found {:#04x}{}",
                    slot * size + off,
                    want[off],
                    got[off],
                    if off < 8 {
                        format!(" (the sequence number of write {seq}, the last of the {count} the client counted into this slot)")
                    } else {
                        String::new()
                    }
                ));
                break;
            }
        }
        bytes[..used * size].fill(0);
        let end = SizeEnd { index, count }.encode(0);
        send_and_wait(ep, self.client, &end, timeout.saturating_sub(start.elapsed()))?;
        Ok(BwServed { writes: count, verdict })
    }
}

/// The last of `count` writes (`i` into slot `i mod slots`) that lands in `slot` (`slot < count`).
fn last_write_into(slot: u64, slots: u64, count: u64) -> u64 {
    slot + slots * ((count - 1 - slot) / slots)
}

/// The pings of one size: the stream with the counter in the first bytes.
fn ping(base: &[u8], i: u64, out: &mut [u8]) {
    out.copy_from_slice(base);
    let n = out.len().min(8);
    out[..n].copy_from_slice(&i.to_le_bytes()[..n]);
}

/// One measured size of `fabric-lat`.
#[derive(Debug, Clone, PartialEq)]
pub struct LatPoint {
    /// Bytes per message.
    pub size: usize,
    /// Round trips done.
    pub pings: u64,
    /// Half round trips, µs.
    pub samples_us: Vec<f64>,
    /// Ok, or the first echo that differed from its ping.
    pub verdict: Result<(), String>,
}

/// The client of `fabric-lat`.
#[derive(Debug)]
pub struct LatClient {
    server: PeerAddr,
    base: Vec<u8>,
    corrupt_ping: bool,
}

impl LatClient {
    /// Shakes hands; pings are made from the stream of `seed`.
    pub fn connect(
        ep: &mut Endpoint,
        server_address: &[u8],
        max_size: usize,
        seed: u64,
        proof: &[u8],
        timeout: Duration,
    ) -> Result<LatClient, WriteError> {
        check_ping_size(ep, max_size)?;
        let (server, _) = connect(ep, server_address, proof, timeout)?;
        Ok(LatClient {
            server,
            base: stream(seed, max_size),
            corrupt_ping: false,
        })
    }

    /// Negative test: the next size's first ping goes out with its last byte
    /// flipped; the server's check must fail.
    pub fn corrupt_a_ping(&mut self) {
        self.corrupt_ping = true;
    }

    /// Ping-pongs size `index` until `stop`; then SIZE-END both ways.
    pub fn run_size(
        &mut self,
        ep: &mut Endpoint,
        index: u32,
        size: usize,
        stop: Stop,
        timeout: Duration,
    ) -> Result<LatPoint, WriteError> {
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let cap = match stop {
            Stop::Count(n) => n.min(10_000_000) as usize,
            Stop::After(_) => 1 << 20,
        };
        let mut samples = Vec::with_capacity(cap);
        let mut msg = vec![0u8; size];
        let mut verdict = Ok(());
        let start = Instant::now();
        let mut i = 0u64;
        while stop.more(i, start) {
            ping(&self.base[..size], i, &mut msg);
            if i == 0 && std::mem::take(&mut self.corrupt_ping) {
                msg[size - 1] ^= 0xFF;
            }
            let t0 = Instant::now();
            let op = ep.send(self.server, &msg)?;
            let echo = ep.recv_message(left())?;
            ep.wait_op(op, left())?;
            let rtt = t0.elapsed();
            if samples.len() < samples.capacity() {
                samples.push(rtt.as_secs_f64() * 1e6 / 2.0);
            }
            if verdict.is_ok() && echo != msg {
                let off = echo
                    .iter()
                    .zip(&msg)
                    .position(|(a, e)| a != e)
                    .unwrap_or(msg.len().min(echo.len()));
                verdict = Err(format!(
                    "{size} B pings: echo {i} differs at offset {off} ({} bytes came back)",
                    echo.len()
                ));
            }
            i += 1;
        }
        send_and_wait(ep, self.server, &SizeEnd { index, count: i }.encode(size), left())?;
        let end = expect_size_end(ep, index, left())?;
        if end.count != i {
            return Err(WriteError::Protocol(format!(
                "the server echoed {} pings of size #{index}, the client sent {i}",
                end.count
            )));
        }
        Ok(LatPoint {
            size,
            pings: i,
            samples_us: samples,
            verdict,
        })
    }
}

/// What the server saw of one size of `fabric-lat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatServed {
    /// Pings echoed.
    pub pings: u64,
    /// Ok, or the first ping that differed from the stream and its counter.
    pub verdict: Result<(), String>,
}

/// The server of `fabric-lat`: echoes every ping.
#[derive(Debug)]
pub struct LatServer {
    client: PeerAddr,
    base: Vec<u8>,
}

fn check_ping_size(ep: &Endpoint, size: usize) -> Result<(), WriteError> {
    if size > ep.max_message() {
        return Err(WriteError::Protocol(format!(
            "fabric-lat pings of {size} B exceed the largest message of {} B",
            ep.max_message()
        )));
    }
    Ok(())
}

impl LatServer {
    /// Waits for the CONNECT `gate` admits and answers it.
    pub fn accept(
        ep: &mut Endpoint,
        max_size: usize,
        seed: u64,
        gate: &mut Gate<'_>,
        timeout: Duration,
    ) -> Result<LatServer, WriteError> {
        check_ping_size(ep, max_size)?;
        let (client, _) = accept(ep, Vec::new(), gate, timeout)?;
        Ok(LatServer {
            client,
            base: stream(seed, max_size),
        })
    }

    /// Echoes pings of `size` until the client's SIZE-END, then answers it.
    pub fn serve_size(
        &mut self,
        ep: &mut Endpoint,
        index: u32,
        size: usize,
        timeout: Duration,
    ) -> Result<LatServed, WriteError> {
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let mut expected = vec![0u8; size];
        let mut verdict = Ok(());
        let mut pings = 0u64;
        let mut sends: std::collections::VecDeque<OpId> = std::collections::VecDeque::new();
        loop {
            let msg = ep.recv_message(left())?;
            if msg.len() != size {
                let end = SizeEnd::decode(&msg)?;
                if end.index != index || end.count != pings {
                    return Err(WriteError::Protocol(format!(
                        "SIZE-END #{} with {} pings, while size #{index} echoed {pings}",
                        end.index, end.count
                    )));
                }
                break;
            }
            sends.push_back(ep.send(self.client, &msg)?);
            if verdict.is_ok() {
                ping(&self.base[..size], pings, &mut expected);
                if let Some(off) = msg.iter().zip(&expected).position(|(a, e)| a != e) {
                    verdict = Err(format!(
                        "{size} B pings: ping {pings}, offset {off}: expected {:#04x}, found {:#04x}",
                        expected[off], msg[off]
                    ));
                }
            }
            // Collect finished echoes without waiting (the next ping implies the last echo arrived).
            while sends.front().is_some_and(|&op| ep.is_done(op)) {
                ep.wait_op(sends.pop_front().expect("front exists"), left())?;
            }
            pings += 1;
        }
        for op in sends {
            ep.wait_op(op, left())?;
        }
        send_and_wait(ep, self.client, &SizeEnd { index, count: pings }.encode(size), left())?;
        Ok(LatServed { pings, verdict })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_size_end_never_has_a_pings_length() {
        let end = SizeEnd {
            index: 3,
            count: 1 << 40,
        };
        for size in [1usize, 2, 12, 13, 14, 8192] {
            let buf = end.encode(size);
            assert_ne!(buf.len(), size);
            assert_eq!(SizeEnd::decode(&buf).unwrap(), end);
        }
        assert!(SizeEnd::decode(&[3, 0, 0]).is_err());
        assert!(SizeEnd::decode(&[1; 13]).is_err());
    }

    #[test]
    fn test_ping_carries_counter_over_the_stream() {
        let base = stream(9, 16);
        let mut out = vec![0u8; 16];
        ping(&base, 0x0102, &mut out);
        assert_eq!(out[..8], 0x0102u64.to_le_bytes());
        assert_eq!(out[8..], base[8..]);
        let mut two = [0u8; 2];
        ping(&base[..2], 0x0304, &mut two);
        assert_eq!(two, [0x04, 0x03]);
    }

    #[test]
    fn test_last_write_into_each_slot() {
        // 10 writes over 4 slots: slot 0 got 0, 4, 8; slot 1 got 1, 5, 9; slot 3 got 3, 7.
        assert_eq!(last_write_into(0, 4, 10), 8);
        assert_eq!(last_write_into(1, 4, 10), 9);
        assert_eq!(last_write_into(3, 4, 10), 7);
        // Fewer writes than slots: each used slot got exactly one.
        assert_eq!(last_write_into(2, 8, 3), 2);
        assert_eq!(last_write_into(0, 1, 1), 0);
    }

    #[test]
    fn test_stop_runs_at_least_once() {
        let t = Instant::now();
        assert!(Stop::After(Duration::ZERO).more(0, t));
        assert!(!Stop::After(Duration::ZERO).more(1, t));
        assert!(Stop::Count(2).more(1, t) && !Stop::Count(2).more(2, t));
    }
}
