//! fabric-bw and ping-pong over one provider, two endpoints in two threads of
//! this process (addresses exchanged over a channel). Prints figures; asserts
//! nothing about speed.
//!
//! `cargo run --release -p fabric --example fabric_perf -- [provider] [bw_iters] [pp_iters]`

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use fabric::{Access, Endpoint, Hints, OpId};

const TIMEOUT: Duration = Duration::from_secs(60);
const MSG: usize = 64 << 10;
const WINDOW: usize = 64;

fn open(provider: &str) -> Endpoint {
    Endpoint::open(
        Hints::new()
            .provider(provider)
            .node("127.0.0.1")
            .get()
            .expect("fi_getinfo"),
    )
    .expect("open")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let provider = args.get(1).cloned().unwrap_or_else(|| "tcp;ofi_rxm".into());
    let bw_iters: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let pp_iters: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(10_000);

    let (addr_tx, addr_rx) = mpsc::channel();
    let (mr_tx, mr_rx) = mpsc::channel();
    let p = provider.clone();
    // Target: exposes a 64 KiB × WINDOW region, drives progress, answers pings.
    let target = thread::spawn(move || {
        let mut ep = open(&p);
        addr_tx.send(ep.address().unwrap()).unwrap();
        let mr = ep.register(MSG * WINDOW, Access::Remote).unwrap();
        let peer_addr: Vec<u8> = mr_rx.recv().unwrap();
        let peer = ep.insert_peer(&peer_addr).unwrap();
        ep.send(peer, &ep.remote_mr(mr).unwrap().key.to_le_bytes()).unwrap();
        let remote = ep.remote_mr(mr).unwrap();
        ep.send(peer, &remote.addr.to_le_bytes()).unwrap();
        ep.wait_remote_write(1, TIMEOUT).unwrap(); // end of bw phase
        for _ in 0..pp_iters {
            let m = ep.recv_message(TIMEOUT).unwrap();
            let op = ep.send(peer, &m).unwrap();
            ep.wait_op(op, TIMEOUT).unwrap();
        }
    });

    let mut ep = open(&provider);
    println!(
        "provider {} mr_mode {:#x} cq_data_size {}",
        ep.provider(),
        ep.mr_mode(),
        ep.cq_data_size()
    );
    let target_addr = addr_rx.recv().unwrap();
    mr_tx.send(ep.address().unwrap()).unwrap();
    let peer = ep.insert_peer(&target_addr).unwrap();
    let key = u64::from_le_bytes(ep.recv_message(TIMEOUT).unwrap().try_into().unwrap());
    let addr = u64::from_le_bytes(ep.recv_message(TIMEOUT).unwrap().try_into().unwrap());
    let remote = fabric::RemoteMr {
        addr,
        size: (MSG * WINDOW) as u64,
        key,
    };
    let src = ep.register(MSG * WINDOW, Access::Local).unwrap();
    ep.local_bytes_mut(src).unwrap().fill(0x5a);

    for delivery_complete in [false, true] {
        ep.set_delivery_complete(delivery_complete);
        let mut window: std::collections::VecDeque<OpId> = Default::default();
        let start = Instant::now();
        for i in 0..bw_iters {
            if window.len() == WINDOW {
                ep.wait_op(window.pop_front().unwrap(), TIMEOUT).unwrap();
            }
            let slot = i % WINDOW;
            window.push_back(
                ep.write(peer, src, slot * MSG, MSG, &remote, (slot * MSG) as u64, None)
                    .unwrap(),
            );
        }
        for op in window {
            ep.wait_op(op, TIMEOUT).unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        let gbps = (bw_iters * MSG * 8) as f64 / secs / 1e9;
        println!(
            "fabric-bw: {bw_iters} x 64 KiB writes, window {WINDOW}, delivery_complete={delivery_complete}: \
             {gbps:.2} Gb/s ({secs:.3} s)"
        );
    }
    let op = ep.write(peer, src, 0, 8, &remote, 0, Some(1)).unwrap();
    ep.wait_op(op, TIMEOUT).unwrap();

    let ping = [7u8; 64];
    let mut samples = Vec::with_capacity(pp_iters);
    for _ in 0..pp_iters {
        let t = Instant::now();
        let op = ep.send(peer, &ping).unwrap();
        let back = ep.recv_message(TIMEOUT).unwrap();
        ep.wait_op(op, TIMEOUT).unwrap();
        samples.push(t.elapsed());
        assert_eq!(back.len(), ping.len());
    }
    target.join().unwrap();
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / pp_iters as u32;
    println!(
        "ping-pong 64 B send/recv, {pp_iters} round trips: median {:.1} us, mean {:.1} us (one-way = half)",
        samples[pp_iters / 2].as_secs_f64() * 1e6,
        mean.as_secs_f64() * 1e6
    );
}
