//! Measures the libfabric data path on this host: two endpoints in one
//! process (one thread each) over a provider on 127.0.0.1, running the real
//! `fabric-bw`, `fabric-write` and `fabric-lat` protocols (the agent's, minus
//! gRPC) with their byte checks, and printing Gb/s and µs. Asserts nothing
//! about speed. No VMs and no RDMA device needed.
//!
//! ```text
//! cargo run --release -p fabric --example fabric_perf -- [PROVIDER] [SIZE] [WRITES]
//! ```
//! PROVIDER defaults to `tcp;ofi_rxm`, SIZE to 65536 (the issue's 10 Gb/s
//! target is at 64 KiB), WRITES to 20000.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use fabric::perf::{BwClient, BwServer, LatClient, LatServer, Stop};
use fabric::write::{scatter_pages, Client, Gate, RandomFill, Server, MR_COUNT, MR_SIZE};
use fabric::{Endpoint, Hints};

const TIMEOUT: Duration = Duration::from_secs(120);
const DEPTH: usize = 128;

fn open(provider: &str) -> Endpoint {
    let info = Hints::new()
        .provider(provider)
        .node("127.0.0.1")
        .get()
        .unwrap_or_else(|e| panic!("{provider} on 127.0.0.1: {e}"));
    Endpoint::open(info).unwrap_or_else(|e| panic!("opening {provider}: {e}"))
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 * 8.0 / 1e9 / d.as_secs_f64()
}

/// Runs `server` on its own thread with the client's endpoint address handed over a channel.
fn pair<S, C, R>(provider: &str, server: S, client: C) -> R
where
    S: FnOnce(&mut Endpoint) + Send + 'static,
    C: FnOnce(&mut Endpoint, &[u8]) -> R,
{
    let (tx, rx) = mpsc::channel();
    let p = provider.to_string();
    let handle = thread::spawn(move || {
        let mut ep = open(&p);
        tx.send(ep.address().expect("fi_getname")).expect("client waits");
        server(&mut ep);
    });
    let mut ep = open(provider);
    let addr = rx.recv().expect("server address");
    let r = client(&mut ep, &addr);
    handle.join().expect("server thread");
    r
}

fn main() {
    let mut args = std::env::args().skip(1);
    let provider = args.next().unwrap_or_else(|| "tcp;ofi_rxm".into());
    let size: usize = args.next().map_or(65536, |s| s.parse().expect("SIZE is a byte count"));
    let writes: u64 = args.next().map_or(20_000, |s| s.parse().expect("WRITES is a count"));
    let seed = 0x5eed;

    // fabric-bw: DEPTH writes in flight, the target checks every slot.
    let point = pair(
        &provider,
        move |ep| {
            let mut s = BwServer::accept(ep, size, DEPTH, seed, &mut Gate::open(), TIMEOUT).expect("bw accept");
            let served = s.serve_size(ep, 0, size, TIMEOUT).expect("bw serve");
            served.verdict.expect("target slots hold the stream");
        },
        |ep, addr| {
            let mut c = BwClient::connect(ep, addr, size, seed, &[], TIMEOUT).expect("bw connect");
            c.run_size(ep, 0, size, DEPTH, Stop::Count(writes), TIMEOUT, &mut |_| {})
                .expect("bw run")
        },
    );
    let bytes = point.writes * size as u64;
    println!(
        "fabric-bw    {provider} {size} B x {} (depth {DEPTH}): {:.2} Gb/s, {:.1} MiB/s (verified)",
        point.writes,
        gbps(bytes, point.elapsed),
        bytes as f64 / (1 << 20) as f64 / point.elapsed.as_secs_f64()
    );

    // fabric-write: RandomFill rounds of every page of both MRs, each verified.
    let pages = MR_COUNT * MR_SIZE / size;
    let rounds = (writes as usize).div_ceil(pages).max(1);
    let (bytes, elapsed) = pair(
        &provider,
        move |ep| {
            let mut s = Server::new(ep, (4 << 20).max(size)).expect("staging");
            s.accept(ep, &mut Gate::open(), TIMEOUT).expect("CONNECT");
            for _ in 0..rounds {
                s.serve(ep, TIMEOUT).expect("serve");
            }
        },
        |ep, addr| {
            let mut c = Client::connect(ep, addr, MR_SIZE, &[], TIMEOUT).expect("connect");
            let (mut bytes, mut elapsed) = (0u64, Duration::ZERO);
            for r in 0..rounds {
                let req = RandomFill {
                    context: r as u64 + 1,
                    seed: seed + r as u64,
                    page_size: size as u64,
                    pages: scatter_pages(r as u64, pages, size, MR_COUNT, MR_SIZE),
                };
                let report = c.random_fill(ep, &req, TIMEOUT).expect("RandomFill verified");
                bytes += report.bytes;
                elapsed += report.transfer;
            }
            (bytes, elapsed)
        },
    );
    println!(
        "fabric-write {provider} {size} B pages x {} ({rounds} RandomFill of {pages}): {:.2} Gb/s (verified; request to final immediate)",
        bytes / size as u64,
        gbps(bytes, elapsed)
    );

    // fabric-lat at 64 B (what fi_pingpong -S 64 measures).
    let lat = pair(
        &provider,
        move |ep| {
            let mut s = LatServer::accept(ep, 64, seed, &mut Gate::open(), TIMEOUT).expect("lat accept");
            s.serve_size(ep, 0, 64, TIMEOUT).expect("lat serve");
        },
        |ep, addr| {
            let mut c = LatClient::connect(ep, addr, 64, seed, &[], TIMEOUT).expect("lat connect");
            c.run_size(ep, 0, 64, Stop::Count(5000), TIMEOUT).expect("lat run")
        },
    );
    lat.verdict.expect("echoes match");
    let mut s = lat.samples_us;
    s.sort_by(f64::total_cmp);
    println!(
        "fabric-lat   {provider} 64 B x {}: median {:.2} us, avg {:.2} us (half round trip)",
        lat.pings,
        s[s.len() / 2],
        s.iter().sum::<f64>() / s.len() as f64
    );
}
