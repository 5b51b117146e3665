//! A rank's links to the other ranks over its [`Transport`]: writes with an
//! immediate into their exposed regions, the immediates that arrived kept
//! per peer in arrival order, the writes in flight per peer, and the
//! barrier.
//!
//! An immediate is `kind (2 bits) | sender (4) | operation (14) | step (12)`:
//! it fits the 4 bytes of CQ data every libfabric provider with remote CQ
//! data carries (EFA's size), and names its sender for an RDM endpoint,
//! whose completions do not. On an in-order transport (RC) a message of
//! another operation or step than the one awaited is a protocol error,
//! never silently taken for the right one; on RDM, where one peer's writes
//! may complete out of order, the awaited one is looked for among those
//! that arrived.

use std::collections::VecDeque;
use std::time::Instant;

use workload_catalogue::limits::MAX_RANKS;

use super::transport::{Event, Region, Slice, Transport};
use crate::session::SessionError;

/// Receives kept posted on each verbs QP; an operation's arrivals on one QP
/// (2 (n-1) ring steps and the barrier's message) stay well below it.
pub const RECVS_PER_QP: u32 = 64;
/// Writes in flight to one peer at most.
pub const SENDS_PER_QP: u32 = 16;

/// What an immediate announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A step's data has landed.
    Data = 0,
    /// A rank reached the barrier (to rank 0).
    Arrive = 1,
    /// Rank 0 releases the barrier: run the operation.
    Go = 2,
    /// Rank 0 releases the barrier: the run is over.
    Stop = 3,
}

/// An immediate without its sender and operation number (the [`Net`] adds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imm {
    kind: Kind,
    step: u16,
}

const SENDER_BITS: u32 = 4;
const OP_BITS: u32 = 14;
const STEP_BITS: u32 = 12;
// Every rank fits the sender field, every ring step the step field.
const _: () = assert!(MAX_RANKS as u64 <= 1 << SENDER_BITS);
const _: () = assert!(2 * (MAX_RANKS as u64) <= 1 << STEP_BITS);

impl Imm {
    /// Data of step `step` of the current operation.
    pub fn data(step: usize) -> Imm {
        Imm {
            kind: Kind::Data,
            step: step as u16,
        }
    }

    fn control(kind: Kind) -> Imm {
        Imm { kind, step: 0 }
    }

    fn encode(self, sender: usize, op: u32) -> u32 {
        let op = op & ((1 << OP_BITS) - 1);
        ((self.kind as u32) << 30)
            | ((sender as u32) << (OP_BITS + STEP_BITS))
            | (op << STEP_BITS)
            | u32::from(self.step)
    }
}

/// The rank that sent immediate `imm`.
pub fn sender_of(imm: u32) -> usize {
    ((imm >> (OP_BITS + STEP_BITS)) & ((1 << SENDER_BITS) - 1)) as usize
}

/// Says what an immediate is, for errors.
fn describe(imm: u32) -> String {
    let kind = match imm >> 30 {
        0 => "data",
        1 => "barrier arrival",
        2 => "barrier release",
        _ => "stop",
    };
    format!(
        "{kind} of operation {} step {} from rank {}",
        (imm >> STEP_BITS) & ((1 << OP_BITS) - 1),
        imm & ((1 << STEP_BITS) - 1),
        sender_of(imm)
    )
}

/// This rank's links to the others and what arrived on them.
pub struct Net {
    rank: usize,
    world: usize,
    in_order: bool,
    /// Immediates that arrived, per peer index, oldest first.
    arrived: Vec<VecDeque<u32>>,
    /// Writes not yet completed, per peer index.
    in_flight: Vec<u32>,
    /// The operation number the immediates carry.
    op: u32,
    /// The next data write carries no bytes (a skip fault).
    skip_next: bool,
    sent_bytes: u64,
}

/// The index of `peer` among `rank`'s others: the other ranks in rank order.
pub fn index_of(rank: usize, peer: usize) -> usize {
    if peer < rank {
        peer
    } else {
        peer - 1
    }
}

/// The rank at index `i` among `rank`'s others.
pub fn peer_at(rank: usize, i: usize) -> usize {
    if i < rank {
        i
    } else {
        i + 1
    }
}

impl Net {
    /// The links of `rank` among `world` ranks.
    pub fn new(t: &dyn Transport, rank: usize, world: usize) -> Net {
        Net {
            rank,
            world,
            in_order: t.in_order(),
            arrived: vec![VecDeque::new(); world - 1],
            in_flight: vec![0; world - 1],
            op: 0,
            skip_next: false,
            sent_bytes: 0,
        }
    }

    /// Makes the next data write carry no bytes: its immediate arrives, its
    /// data does not (the skip fault).
    pub fn skip_next_write(&mut self) {
        self.skip_next = true;
    }

    /// Bytes this rank's writes carried since the last call.
    pub fn take_sent_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.sent_bytes)
    }

    /// Writes `src` into `peer`'s exposed region at `offset`, with `imm`.
    pub fn write(
        &mut self,
        t: &mut dyn Transport,
        peer: usize,
        mut src: Slice,
        offset: u64,
        imm: Imm,
    ) -> Result<(), SessionError> {
        let i = index_of(self.rank, peer);
        while self.in_flight[i] + 1 >= SENDS_PER_QP {
            self.pump(t, || format!("room in the send queue to rank {peer}"))?;
        }
        if imm.kind == Kind::Data && self.skip_next && src.len > 0 {
            self.skip_next = false;
            t.note(
                "fault",
                format!(
                    "skip: rank {}'s write of {} B to rank {peer} (operation {}) carried no data",
                    self.rank,
                    src.len,
                    self.op + 1
                ),
            );
            src.len = 0;
        }
        t.post_write(i, src, offset, imm.encode(self.rank, self.op))?;
        self.in_flight[i] += 1;
        self.sent_bytes += src.len as u64;
        Ok(())
    }

    /// Takes one event: an arrival (kept) or a write's completion. A
    /// timeout or abort says what this rank was waiting for (`what`,
    /// formatted only then) and for how long.
    pub fn pump(&mut self, t: &mut dyn Transport, what: impl FnOnce() -> String) -> Result<(), SessionError> {
        self.pump_since(t, what, Instant::now())
    }

    /// As [`Net::pump`], for a wait that began at `since`.
    fn pump_since(
        &mut self,
        t: &mut dyn Transport,
        what: impl FnOnce() -> String,
        since: Instant,
    ) -> Result<(), SessionError> {
        let event = t.next_event().map_err(|e| {
            let waited = format!("{} (for {:.1} s)", what(), since.elapsed().as_secs_f64());
            match e {
                SessionError::Timeout { after, .. } => SessionError::Timeout { what: waited, after },
                SessionError::Aborted(_) => SessionError::Aborted(format!("while waiting for {waited}")),
                other => other,
            }
        })?;
        match event {
            Event::Arrived { from, imm } => {
                let sender = sender_of(imm);
                let i = match from {
                    Some(i) => i,
                    None if sender != self.rank && sender < self.world => index_of(self.rank, sender),
                    None => {
                        return Err(SessionError::Protocol(format!(
                            "rank {} received {}, which names no peer",
                            self.rank,
                            describe(imm)
                        )))
                    }
                };
                if i >= self.world - 1 {
                    return Err(SessionError::Protocol(format!("an arrival from unknown peer {i}")));
                }
                self.arrived[i].push_back(imm);
            }
            Event::Sent { to } => {
                if let Some(n) = self.in_flight.get_mut(to) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        Ok(())
    }

    /// Takes the first arrival from peer index `i` that `accept` takes:
    /// on an in-order transport only the oldest is looked at (anything else
    /// there is an error); otherwise every one that arrived.
    fn take(&mut self, i: usize, accept: impl Fn(u32) -> bool) -> Result<Option<u32>, u32> {
        let queue = &mut self.arrived[i];
        if self.in_order {
            return match queue.front() {
                None => Ok(None),
                Some(&got) if accept(got) => Ok(queue.pop_front()),
                Some(&got) => Err(got),
            };
        }
        Ok(queue
            .iter()
            .position(|got| accept(*got))
            .and_then(|at| queue.remove(at)))
    }

    /// Whether `imm` of the current operation has arrived from `peer`
    /// (taking it); another message first is a protocol error, reported by
    /// the next [`Net::wait`]. Does not wait.
    pub fn arrived(&mut self, peer: usize, imm: Imm) -> bool {
        let want = imm.encode(peer, self.op);
        matches!(self.take(index_of(self.rank, peer), |got| got == want), Ok(Some(_)))
    }

    /// Waits for `imm` of the current operation from `peer`; `what` says,
    /// for a timeout, what this rank is waiting for.
    pub fn wait(
        &mut self,
        t: &mut dyn Transport,
        peer: usize,
        imm: Imm,
        what: impl Fn() -> String,
    ) -> Result<(), SessionError> {
        let want = imm.encode(peer, self.op);
        let i = index_of(self.rank, peer);
        let since = Instant::now();
        loop {
            match self.take(i, |got| got == want) {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => {}
                Err(got) => {
                    return Err(SessionError::Protocol(format!(
                        "rank {} expected {}, got {}",
                        self.rank,
                        describe(want),
                        describe(got)
                    )))
                }
            }
            // The time told is the whole wait's, not the last event's.
            self.pump_since(t, &what, since)?;
        }
    }

    /// Waits until every write of this rank has completed (its data delivered).
    pub fn drain(&mut self, t: &mut dyn Transport, what: &str) -> Result<(), SessionError> {
        while let Some(i) = self.in_flight.iter().position(|n| *n > 0) {
            let peer = peer_at(self.rank, i);
            self.pump(t, || format!("{what}: its write to rank {peer} to complete"))?;
        }
        Ok(())
    }

    /// A message without data to `peer`.
    fn signal(&mut self, t: &mut dyn Transport, peer: usize, kind: Kind) -> Result<(), SessionError> {
        let empty = Slice {
            region: Region::Input,
            offset: 0,
            len: 0,
        };
        self.write(t, peer, empty, 0, Imm::control(kind))
    }

    /// The barrier before an operation: every rank tells rank 0 it is
    /// there, and rank 0, once all are, tells every rank to go (`go`) or
    /// that the run is over. Returns whether to run the operation; the
    /// operation number moves on either way.
    pub fn barrier(&mut self, t: &mut dyn Transport, go: bool, what: &str) -> Result<bool, SessionError> {
        let decided = if self.rank == 0 {
            for peer in 1..self.world {
                self.wait(t, peer, Imm::control(Kind::Arrive), || {
                    format!("{what}: rank {peer} to reach the barrier")
                })?;
            }
            let kind = if go { Kind::Go } else { Kind::Stop };
            for peer in 1..self.world {
                self.signal(t, peer, kind)?;
            }
            go
        } else {
            self.signal(t, 0, Kind::Arrive)?;
            let (go, stop) = (
                Imm::control(Kind::Go).encode(0, self.op),
                Imm::control(Kind::Stop).encode(0, self.op),
            );
            loop {
                match self.take(0, |got| got == go || got == stop) {
                    Ok(Some(got)) => break got == go,
                    Ok(None) => self.pump(t, || format!("{what}: rank 0 to release the barrier"))?,
                    Err(got) => {
                        return Err(SessionError::Protocol(format!(
                            "rank {} expected the barrier's release from rank 0, got {}",
                            self.rank,
                            describe(got)
                        )))
                    }
                }
            }
        };
        // The releases' and arrival's completions are taken during the
        // operation: rank 0 starts it as soon as its releases are posted.
        self.op = self.op.wrapping_add(1);
        Ok(decided)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_each_rank_numbers_its_peers_in_rank_order() {
        assert_eq!(
            (0..4).filter(|p| *p != 2).map(|p| index_of(2, p)).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(index_of(0, 3), 2);
        for i in 0..3 {
            assert_eq!(index_of(2, peer_at(2, i)), i);
        }
    }

    #[test]
    fn test_immediates_tell_kind_sender_operation_and_step_apart() {
        let a = Imm::data(3).encode(5, 7);
        assert_ne!(a, Imm::data(3).encode(5, 8));
        assert_ne!(a, Imm::data(4).encode(5, 7));
        assert_ne!(a, Imm::data(3).encode(6, 7));
        assert_ne!(
            Imm::control(Kind::Go).encode(0, 7),
            Imm::control(Kind::Stop).encode(0, 7)
        );
        assert_eq!(describe(a), "data of operation 7 step 3 from rank 5");
        assert_eq!(sender_of(a), 5);
        assert_eq!(sender_of(Imm::data(30).encode(15, 0x3FFF)), 15);
        // The operation number wraps within its bits, never into the sender or kind.
        let wrapped = Imm::data(0).encode(1, 0x4000);
        assert_eq!((wrapped >> 30, sender_of(wrapped)), (0, 1));
    }

    /// A transport that only records; arrivals are fed by the test.
    struct Loop {
        in_order: bool,
        events: VecDeque<Event>,
        posted: Vec<(usize, u32)>,
    }

    impl Transport for Loop {
        fn post_write(&mut self, to: usize, _: Slice, _: u64, imm: u32) -> Result<(), SessionError> {
            self.posted.push((to, imm));
            self.events.push_back(Event::Sent { to });
            Ok(())
        }
        fn next_event(&mut self) -> Result<Event, SessionError> {
            self.events.pop_front().ok_or(SessionError::Timeout {
                what: String::new(),
                after: std::time::Duration::ZERO,
            })
        }
        fn in_order(&self) -> bool {
            self.in_order
        }
        fn regions_mut(&mut self) -> (&mut [u8], &mut [u8]) {
            unreachable!()
        }
        fn note(&mut self, _: &str, _: String) {}
        fn progress(&mut self, _: u64, _: u64, _: String) {}
    }

    #[test]
    fn test_out_of_order_arrivals_are_found_only_where_order_is_not_promised() {
        for in_order in [true, false] {
            // Rank 1 of 3 awaits step 0 from rank 0; step 1 landed first.
            let mut t = Loop {
                in_order,
                events: [1, 0]
                    .map(|step| Event::Arrived {
                        from: None,
                        imm: Imm::data(step).encode(0, 0),
                    })
                    .into(),
                posted: Vec::new(),
            };
            let mut net = Net::new(&t, 1, 3);
            let got = net.wait(&mut t, 0, Imm::data(0), String::new);
            if in_order {
                let err = got.unwrap_err().to_string();
                assert!(
                    err.contains("expected data of operation 0 step 0 from rank 0, got data of operation 0 step 1"),
                    "{err}"
                );
            } else {
                got.unwrap();
                net.wait(&mut t, 0, Imm::data(1), String::new).unwrap();
            }
        }
    }

    #[test]
    fn test_an_arrival_naming_no_peer_is_refused() {
        let mut t = Loop {
            in_order: false,
            events: [Event::Arrived {
                from: None,
                imm: Imm::data(0).encode(1, 0),
            }]
            .into(),
            posted: Vec::new(),
        };
        let mut net = Net::new(&t, 1, 3);
        let err = net.wait(&mut t, 0, Imm::data(0), String::new).unwrap_err().to_string();
        assert!(err.contains("names no peer"), "{err}");
    }
}
