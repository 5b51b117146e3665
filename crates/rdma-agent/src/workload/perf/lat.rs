//! The latency clients and write-lat's server: send-lat's SEND ping-pong,
//! write-lat's WRITE ping-pong (both sides), and read-lat and atomic-lat's
//! one operation at a time. A sample is taken around the post and its
//! completion (or echo); every check is outside that span.

use std::time::Instant;

use agent_proto::v1::{SideResult, SizePoint};

use super::slots::Sentinels;
use super::spec::{planned_iterations, sizes, Perf, PerfOp};
use crate::metrics::latency;
use crate::session::{SessionError, Side};
use crate::verbs::LocalSlice;
use crate::workload::{note_skip, pattern, verdict, OpKind};
use crate::wr_id::WrId;

/// The counter carried in the last byte of write-lat's i-th message (never 0,
/// the value of untouched memory).
fn tag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// What the server writes back in write-lat.
pub(super) fn echo_pattern(side: &Side) -> crate::pattern::Pattern {
    pattern(&side.params).derive(0xEC40)
}

/// Checks a write-lat message: the pattern up to the last byte, the counter in it.
fn check_ping(buf: &[u8], size: usize, pat: &crate::pattern::Pattern, last_tag: u8, what: &str) -> Result<(), String> {
    if size > 1 {
        pat.verify(&buf[..size - 1], 0)
            .map_err(|m| format!("{what} at {size} B: {m}"))?;
    }
    if buf[size - 1] != last_tag {
        return Err(format!(
            "{what} at {size} B: last byte {:#04x}, expected the counter {last_tag:#04x}",
            buf[size - 1]
        ));
    }
    Ok(())
}

impl Perf {
    /// Client of write-lat: WRITE with the counter in the last byte, wait for
    /// its completion and for the server's echo in our buffer; RTT / 2.
    fn measure_write_ping_pong(
        &self,
        side: &mut Side,
        size: usize,
        problems: &mut Vec<String>,
    ) -> Result<SizePoint, SessionError> {
        side.set_yield_polls(true);
        let (src, rx) = (side.bufs[0], side.bufs[1]);
        let local = LocalSlice {
            buf: src,
            offset: 0,
            len: size,
        };
        let mut chain = side
            .link
            .send_chain(&[self.op_wr(side, local, self.kind().wr_id(0), true)])?;
        let planned = planned_iterations(side);
        let stop_at = Instant::now() + crate::validate::duration(&side.params);
        let mut samples = Vec::with_capacity(planned.unwrap_or(100_000).min(10_000_000) as usize);
        let mut i = 0u64;
        while planned.map_or(Instant::now() < stop_at || i == 0, |n| i < n) {
            let t = tag(i);
            side.link.buffer_mut(src)[size - 1] = t;
            chain.set_wr_id(0, self.kind().wr_id(i));
            let t0 = Instant::now();
            side.link.post_send(&mut chain)?;
            side.next_completion("the write-lat WRITE's completion")?;
            // Yields between looks (set_yield_polls above), as the CQ waits do.
            let mut pace = side.poll_pace();
            while side.link.read_byte_volatile(rx, size - 1) != t {
                side.after_empty_poll(&mut pace, "the server's write-lat echo")?;
            }
            if samples.len() < samples.capacity() {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
            i += 1;
        }
        if i > 0 {
            if let Err(m) = check_ping(side.link.buffer(rx), size, &echo_pattern(side), tag(i - 1), "echo") {
                problems.push(m);
            }
        }
        // The counter byte goes back to the pattern for the next (larger) size.
        let restore = pattern(&side.params).byte_at(size as u64 - 1);
        side.link.buffer_mut(src)[size - 1] = restore;
        Ok(SizePoint {
            size: size as u64,
            iterations: i,
            bw: None,
            lat: Some(latency(&mut samples)),
        })
    }

    /// Server of write-lat, one size: echo every ping until the client's done.
    /// Returns the pings echoed and the verdict: as many pings as the client
    /// counted (at least one), the last one holding the pattern and counter.
    fn echo_writes(&self, side: &mut Side, size: usize) -> Result<(u64, Result<(), String>), SessionError> {
        let exposed = side.exposed.expect("prepared");
        let (rx, src) = (side.bufs[0], side.bufs[1]);
        let mut client_count = None;
        let local = LocalSlice {
            buf: src,
            offset: 0,
            len: size,
        };
        let mut chain = side
            .link
            .send_chain(&[self.op_wr(side, local, self.kind().wr_id(0), true)])?;
        let mut echoed = 0u64;
        // Yields between looks (set_yield_polls in serve_write_ping_pong).
        let mut pace = side.poll_pace();
        let mut done = false;
        while !done {
            if side.link.read_byte_volatile(exposed, size - 1) == tag(echoed) {
                // A done message before the byte changed means the client
                // moved on to the next size: that byte is not a ping.
                if let Some(c) = side.try_completion()? {
                    if Side::is_done(&c) {
                        client_count = Side::done_count(&c, side.link.buffer(rx));
                        break;
                    }
                }
                side.link.buffer_mut(src)[size - 1] = tag(echoed);
                chain.set_wr_id(0, self.kind().wr_id(echoed));
                side.link.post_send(&mut chain)?;
                loop {
                    let c = side.next_completion("the write-lat echo's completion")?;
                    if Side::is_done(&c) {
                        // The client saw the echo and stopped before our ACK came back.
                        client_count = Side::done_count(&c, side.link.buffer(rx));
                        done = true;
                    } else {
                        break;
                    }
                }
                echoed += 1;
                continue;
            }
            if let Some(c) = side.try_completion()? {
                if Side::is_done(&c) {
                    client_count = Side::done_count(&c, side.link.buffer(rx));
                    break;
                }
                continue;
            }
            side.after_empty_poll(&mut pace, "the client's write-lat ping or done")?;
        }
        let restore = echo_pattern(side).byte_at(size as u64 - 1);
        side.link.buffer_mut(src)[size - 1] = restore;
        let verdict = match client_count {
            None => Err(format!("at {size} B: the client's done message carried no ping count")),
            Some(n) if n != echoed => Err(format!("at {size} B: echoed {echoed} pings, the client counted {n}")),
            Some(_) if echoed == 0 => Err(format!("at {size} B: no pings")),
            Some(_) => check_ping(
                side.link.buffer(exposed),
                size,
                &pattern(&side.params),
                tag(echoed - 1),
                "ping",
            ),
        };
        Ok((echoed, verdict))
    }

    pub(super) fn serve_write_ping_pong(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        side.set_yield_polls(true);
        let mut recvs = side.recvs.take().expect("prepared");
        let (mut pings, mut bytes) = (0u64, 0u64);
        let mut problems = Vec::new();
        for size in sizes(side, self.op) {
            let size = size as usize;
            let (echoed, verdict) = self.echo_writes(side, size)?;
            pings += echoed;
            bytes += echoed * size as u64;
            if let Err(m) = verdict {
                problems.push(m);
            }
            // The done receive is reposted for the next size's done.
            side.link.post_recv_one(&mut recvs, 0)?;
        }
        side.recvs = Some(recvs);
        let mut result = side.base_result();
        result.ops = pings;
        result.bytes = bytes;
        verdict(
            &mut result,
            if problems.is_empty() {
                Ok(format!(
                    "echoed {pings} pings, as many as the client counted; each size's last ping held the client's pattern and counter"
                ))
            } else {
                Err(problems.join("; "))
            },
        );
        Ok(result)
    }

    /// One size of a latency run. `skip`: read-lat's fault (the first READ
    /// reads elsewhere).
    pub(super) fn measure_latency(
        &self,
        side: &mut Side,
        size: usize,
        skip: bool,
        problems: &mut Vec<String>,
    ) -> Result<SizePoint, SessionError> {
        if self.write_ping_pong() {
            return self.measure_write_ping_pong(side, size, problems);
        }
        let buf = side.bufs[0];
        let local = LocalSlice {
            buf,
            offset: 0,
            len: size,
        };
        let mut chain = side
            .link
            .send_chain(&[self.op_wr(side, local, self.kind().wr_id(0), true)])?;
        // read-lat checks every READ: its slot's ends are cleared before the
        // post and checked after the sample ([`Sentinels`]). The fault skip
        // points the first READ at the spare bytes after the slot.
        let ends = (self.op == PerfOp::Read).then(|| Sentinels::of(&pattern(&side.params), size));
        let mut skipped = if skip && self.op == PerfOp::Read {
            let spare = LocalSlice {
                offset: self.slots_len(side),
                ..local
            };
            note_skip(
                side,
                format!("READ 1 at {size} B read into a spare buffer, not into its slot"),
            );
            Some(
                side.link
                    .send_chain(&[self.op_wr(side, spare, self.kind().wr_id(0), true)])?,
            )
        } else {
            None
        };
        let (mut misses, mut first_miss) = (0u64, None);
        let planned = planned_iterations(side);
        let stop_at = Instant::now() + crate::validate::duration(&side.params);
        let mut samples = Vec::with_capacity(planned.unwrap_or(100_000).min(10_000_000) as usize);
        let mut recvs = side.recvs.take();
        let mut i = 0u64;
        while planned.map_or(Instant::now() < stop_at || i == 0, |n| i < n) {
            if let Some(ends) = &ends {
                ends.clear(side.link.slice_mut(buf, 0, size));
            }
            let chain = match skipped.as_mut() {
                Some(c) if i == 0 => c,
                _ => &mut chain,
            };
            chain.set_wr_id(0, self.kind().wr_id(i));
            let t0 = Instant::now();
            side.link.post_send(chain)?;
            if self.op == PerfOp::Send {
                // Ping-pong: wait for our send and the echo.
                let (mut sent, mut echoed) = (false, false);
                while !(sent && echoed) {
                    let c = side.next_completion("the send-lat echo")?;
                    if WrId::from(c.wr_id).is(OpKind::Send) {
                        sent = true;
                    } else {
                        echoed = true;
                    }
                }
                let rtt = t0.elapsed();
                if samples.len() < samples.capacity() {
                    samples.push(rtt.as_secs_f64() * 1e6 / 2.0);
                }
                if let Some(r) = recvs.as_mut() {
                    side.link.post_recv_one(r, 0)?;
                }
            } else {
                side.next_completion("the latency operation's completion")?;
                if samples.len() < samples.capacity() {
                    samples.push(t0.elapsed().as_secs_f64() * 1e6);
                }
                if let Some(Err(miss)) = ends.as_ref().map(|e| e.check(side.link.slice(buf, 0, size))) {
                    misses += 1;
                    first_miss.get_or_insert_with(|| format!("READ {} {miss}", i + 1));
                }
            }
            i += 1;
        }
        side.recvs = recvs;
        if let Some(first) = first_miss {
            problems.push(format!(
                "read-lat at {size} B: {first}; {misses} of {i} READs failed their check"
            ));
        } else if self.op == PerfOp::Read {
            // The last READ in full.
            if let Err(m) = pattern(&side.params).verify(side.link.slice(buf, 0, size), 0) {
                problems.push(format!("read-lat at {size} B: READ {i}: {m}"));
            }
        }
        Ok(SizePoint {
            size: size as u64,
            iterations: i,
            bw: None,
            lat: Some(latency(&mut samples)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::Pattern;

    #[test]
    fn write_lat_counter_is_never_zero_and_wraps() {
        assert_eq!(tag(0), 1);
        assert_eq!(tag(254), 255);
        assert_eq!(tag(255), 1);
        assert!((0..10_000).all(|i| tag(i) != 0));
    }

    #[test]
    fn write_lat_check_wants_pattern_then_counter() {
        let pat = Pattern::new(7);
        let mut buf = vec![0u8; 16];
        pat.fill(&mut buf, 0);
        buf[7] = tag(41);
        assert_eq!(check_ping(&buf, 8, &pat, tag(41), "ping"), Ok(()));
        let err = check_ping(&buf, 8, &pat, tag(42), "ping").unwrap_err();
        assert!(err.contains("last byte") && err.contains("at 8 B"), "{err}");
        buf[3] ^= 0xFF;
        assert!(check_ping(&buf, 8, &pat, tag(41), "ping")
            .unwrap_err()
            .contains("offset 3"));
        // One byte: the counter alone.
        assert_eq!(check_ping(&[tag(0)], 1, &pat, tag(0), "ping"), Ok(()));
    }
}
