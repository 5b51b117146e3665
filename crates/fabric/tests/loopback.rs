//! Two endpoints over `tcp;ofi_rxm` on 127.0.0.1, one per thread, with the
//! fabric addresses exchanged over a channel (the controller relays them in the
//! product). No VMs and no RDMA hardware needed.

use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use fabric::observe::{completion_name, Call, Event, Observer};
use fabric::write::{scatter_pages, Client, Gate, RandomFill, Server, WriteError, MR_SIZE};
use fabric::{Access, Endpoint, FabricError, Hints, RemoteMr};

const PROVIDER: &str = "tcp;ofi_rxm";
const TIMEOUT: Duration = Duration::from_secs(30);

fn open() -> Endpoint {
    let info = Hints::new()
        .provider(PROVIDER)
        .node("127.0.0.1")
        .get()
        .expect("fi_getinfo tcp;ofi_rxm");
    Endpoint::open(info).expect("open endpoint")
}

#[test]
fn test_fabric_write_verifies_scattered_pages() {
    let (addr_tx, addr_rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let mut ep = open();
        addr_tx.send(ep.address().unwrap()).unwrap();
        let mut server = Server::new(&mut ep, 4 << 20).unwrap();
        let connect = server.accept(&mut ep, &mut Gate::open(), TIMEOUT).unwrap();
        assert_eq!(connect.mrs.len(), 2);
        let mut reports = Vec::new();
        for _ in 0..2 {
            reports.push(server.serve(&mut ep, TIMEOUT).unwrap());
        }
        reports
    });
    let mut ep = open();
    let server_addr = addr_rx.recv().unwrap();
    let mut client = Client::connect(&mut ep, &server_addr, MR_SIZE, &[], TIMEOUT).unwrap();
    // 8 × 1 MiB pages across both MRs (the demo's default), then 2 KiB pages
    // with a page count that needs several staging batches on the server.
    let requests = [
        RandomFill {
            context: 0x123,
            seed: 0xb584_2d1c_55aa,
            page_size: 1 << 20,
            pages: scatter_pages(1, 8, 1 << 20, 2, MR_SIZE),
        },
        RandomFill {
            context: u64::MAX,
            seed: 7,
            page_size: 2048,
            pages: scatter_pages(2, 900, 2048, 2, MR_SIZE),
        },
    ];
    for req in &requests {
        let report = client.random_fill(&mut ep, req, TIMEOUT).unwrap();
        assert_eq!(report.bytes, req.page_size * req.pages.len() as u64);
    }
    let served = server.join().unwrap();
    assert_eq!(served[0].immediate, ep.mask_cq_data(0x123));
    assert_eq!(served[1].pages, 900);
}

#[test]
fn test_fabric_write_reports_mismatch_location() {
    // A server that writes the wrong seed: the client must name MR, page and offset.
    let (addr_tx, addr_rx) = mpsc::channel();
    let (mr_tx, mr_rx) = mpsc::channel::<(Vec<RemoteMr>, Vec<u8>)>();
    let server = thread::spawn(move || {
        let mut ep = open();
        addr_tx.send(ep.address().unwrap()).unwrap();
        let (mrs, client_addr) = mr_rx.recv().unwrap();
        let peer = ep.insert_peer(&client_addr).unwrap();
        let src = ep.register(4096, Access::Local).unwrap();
        ep.local_bytes_mut(src).unwrap().fill(0xab);
        let op = ep.write(peer, src, 0, 4096, &mrs[1], 3 * 4096, Some(9)).unwrap();
        ep.wait_op(op, TIMEOUT).unwrap();
    });
    let mut ep = open();
    let server_addr = addr_rx.recv().unwrap();
    let server_peer = ep.insert_peer(&server_addr).unwrap();
    let _ = server_peer;
    let a = ep.register(MR_SIZE, Access::Remote).unwrap();
    let b = ep.register(MR_SIZE, Access::Remote).unwrap();
    mr_tx
        .send((
            vec![ep.remote_mr(a).unwrap(), ep.remote_mr(b).unwrap()],
            ep.address().unwrap(),
        ))
        .unwrap();
    ep.wait_remote_write(9, TIMEOUT).unwrap();
    server.join().unwrap();
    // SAFETY: the only writer finished (its write completed and its thread exited).
    let bytes = unsafe { ep.remote_bytes(b).unwrap() };
    assert!(bytes[3 * 4096..4 * 4096].iter().all(|&x| x == 0xab));
    assert!(bytes[..3 * 4096].iter().all(|&x| x == 0));
    let mismatch = WriteError::Mismatch {
        mr: 1,
        page: 3,
        offset: 0,
        expected: 1,
        actual: 0xab,
    };
    assert!(mismatch.to_string().contains("MR 1, page 3, offset 0"));
}

#[test]
fn test_wrong_mr_key_fails_with_provider_error() {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (mr_tx, mr_rx) = mpsc::channel::<(RemoteMr, Vec<u8>)>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    // The target keeps driving progress until the initiator has its answer.
    let target = thread::spawn(move || {
        let mut ep = open();
        addr_tx.send(ep.address().unwrap()).unwrap();
        let mr = ep.register(1 << 20, Access::Remote).unwrap();
        mr_tx.send((ep.remote_mr(mr).unwrap(), ep.address().unwrap())).unwrap();
        while done_rx.try_recv().is_err() {
            ep.progress().unwrap();
            thread::yield_now();
        }
    });
    let mut ep = open();
    let _ = addr_rx.recv().unwrap();
    let (mut remote, target_addr) = mr_rx.recv().unwrap();
    remote.key ^= 0x5a5a;
    let peer = ep.insert_peer(&target_addr).unwrap();
    let src = ep.register(4096, Access::Local).unwrap();
    let result = ep
        .write(peer, src, 0, 4096, &remote, 0, None)
        .and_then(|op| ep.wait_op(op, TIMEOUT));
    done_tx.send(()).unwrap();
    target.join().unwrap();
    let err = result.expect_err("a write with a wrong key must fail");
    match &err {
        FabricError::Completion { provider, op, .. } => {
            assert_eq!(provider, PROVIDER);
            assert!(op.contains("RMA write"), "{err}");
        }
        other => panic!("expected a completion error, got {other}"),
    }
    eprintln!("wrong key: {err}");
}

#[test]
fn test_missing_provider_lists_available() {
    let err = Hints::new()
        .provider("no-such-provider")
        .get()
        .expect_err("must not exist");
    let msg = err.to_string();
    assert!(matches!(err, FabricError::NoProvider { .. }), "{msg}");
    assert!(msg.contains("no-such-provider") && msg.contains("tcp"), "{msg}");
    eprintln!("{msg}");
}

#[test]
fn test_info_reports_mr_mode_and_cq_data_size() {
    let info = Hints::new().provider(PROVIDER).node("127.0.0.1").get().unwrap();
    assert_eq!(info.provider_name(), PROVIDER);
    assert!(info.cq_data_size() >= 4, "cq_data_size {}", info.cq_data_size());
    eprintln!(
        "mr_mode {:#x} cq_data_size {} key size {}",
        info.mr_mode(),
        info.cq_data_size(),
        info.mr_key_size()
    );
}

#[test]
fn test_immediate_must_fit_cq_data_size() {
    let mut ep = open();
    let mr = ep.register(4096, Access::Remote).unwrap();
    let remote = ep.remote_mr(mr).unwrap();
    let me = ep.address().unwrap();
    let peer = ep.insert_peer(&me).unwrap();
    if ep.cq_data_size() < 8 {
        let err = ep.write(peer, mr, 0, 8, &remote, 0, Some(u64::MAX)).unwrap_err();
        assert!(matches!(err, FabricError::InvalidArgument(_)));
    }
    let err = ep.write(peer, mr, 0, 8192, &remote, 0, None).unwrap_err();
    assert!(matches!(err, FabricError::InvalidArgument(_)), "{err}");
}

/// fabric-bw over loopback, `sizes` in turn with `depth` slots and `writes`
/// writes each; `lose_one` makes the client count one write it never posted.
/// Returns the server's verdict per size.
fn fabric_bw(sizes: &[usize], depth: usize, writes: u64, lose_one: bool) -> Vec<(u64, Result<(), String>)> {
    use fabric::perf::{BwClient, BwServer, Stop};
    let max = *sizes.iter().max().unwrap();
    let (addr_tx, addr_rx) = mpsc::channel();
    let server_sizes = sizes.to_vec();
    let server = thread::spawn(move || {
        let mut ep = open();
        addr_tx.send(ep.address().unwrap()).unwrap();
        let mut server = BwServer::accept(&mut ep, max, depth, 42, &mut Gate::open(), TIMEOUT).unwrap();
        server_sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                let served = server.serve_size(&mut ep, i as u32, size, TIMEOUT).unwrap();
                (served.writes, served.verdict)
            })
            .collect::<Vec<_>>()
    });
    let mut ep = open();
    let server_addr = addr_rx.recv().unwrap();
    let mut client = BwClient::connect(&mut ep, &server_addr, max, 42, &[], TIMEOUT).unwrap();
    if lose_one {
        client.claim_a_lost_write();
    }
    for (i, &size) in sizes.iter().enumerate() {
        let point = client
            .run_size(
                &mut ep,
                i as u32,
                size,
                depth,
                Stop::Count(writes),
                TIMEOUT,
                &mut |_| {},
            )
            .unwrap();
        let lost = u64::from(lose_one && i == 0);
        assert_eq!(point.writes, writes + lost);
    }
    server.join().unwrap()
}

#[test]
fn test_fabric_bw_server_checks_every_slot_holds_its_last_write() {
    // More writes than slots (each slot rewritten), fewer, and a size below the 8-byte stamp.
    for (sizes, depth, writes) in [(vec![4096, 64], 8, 37), (vec![1024], 16, 5), (vec![4], 4, 11)] {
        for (i, (count, verdict)) in fabric_bw(&sizes, depth, writes, false).into_iter().enumerate() {
            assert_eq!(count, writes, "size #{i} of {sizes:?}");
            assert_eq!(
                verdict,
                Ok(()),
                "size #{i} of {sizes:?}, depth {depth}, {writes} writes"
            );
        }
    }
}

#[test]
fn test_fabric_bw_server_catches_a_count_the_writes_do_not_back() {
    // The client counts one write more than it posted: the slot of that
    // write holds an older one's stamp (or nothing), and the server says so.
    for (depth, writes) in [(8, 37), (16, 5)] {
        let served = fabric_bw(&[4096, 1024], depth, writes, true);
        let (count, verdict) = &served[0];
        assert_eq!(*count, writes + 1);
        let err = verdict
            .clone()
            .expect_err("a write that never happened was not noticed");
        assert!(err.contains("4096 B writes: slot") && err.contains("offset"), "{err}");
        // The next size is honest again and verifies.
        assert_eq!(served[1], (writes, Ok(())));
    }
}

#[test]
fn test_fabric_lat_server_catches_a_corrupted_ping() {
    use fabric::perf::{LatClient, LatServer, Stop};
    let (addr_tx, addr_rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let mut ep = open();
        addr_tx.send(ep.address().unwrap()).unwrap();
        let mut server = LatServer::accept(&mut ep, 64, 5, &mut Gate::open(), TIMEOUT).unwrap();
        (0..2)
            .map(|i| server.serve_size(&mut ep, i, 64, TIMEOUT).unwrap())
            .collect::<Vec<_>>()
    });
    let mut ep = open();
    let server_addr = addr_rx.recv().unwrap();
    let mut client = LatClient::connect(&mut ep, &server_addr, 64, 5, &[], TIMEOUT).unwrap();
    client.corrupt_a_ping();
    for i in 0..2 {
        let point = client.run_size(&mut ep, i, 64, Stop::Count(10), TIMEOUT).unwrap();
        // The echo is what was sent: the client's own check passes either way.
        assert_eq!((point.pings, point.verdict), (10, Ok(())));
    }
    let served = server.join().unwrap();
    let err = served[0].verdict.clone().expect_err("a corrupted ping passed");
    assert!(err.contains("64 B"), "{err}");
    // Only the first ping of the first size was corrupted.
    assert_eq!((served[1].pings, served[1].verdict.clone()), (10, Ok(())));
}

/// What an observer saw, owned.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Registered {
        addr: u64,
        len: u64,
        key: u64,
        remote: bool,
    },
    Peer,
    Posted {
        call: Call,
        op: u64,
        len: u64,
        remote_addr: u64,
        key: u64,
        data: Option<u64>,
    },
    Completed {
        op: Option<u64>,
        name: &'static str,
        data: Option<u64>,
    },
    Failed,
}

fn open_observed() -> (Endpoint, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let observer: Observer = Box::new(move |e: &Event<'_>| {
        let s = match *e {
            Event::Registered { addr, len, key, remote } => Seen::Registered { addr, len, key, remote },
            Event::PeerInserted { .. } => Seen::Peer,
            Event::Posted {
                call,
                op,
                len,
                remote_addr,
                key,
                data,
                ..
            } => Seen::Posted {
                call,
                op,
                len,
                remote_addr,
                key,
                data,
            },
            Event::Completed { op, flags, data, .. } => Seen::Completed {
                op,
                name: completion_name(flags),
                data,
            },
            Event::Failed { .. } => Seen::Failed,
        };
        log.lock().unwrap().push(s);
    });
    let info = Hints::new().provider(PROVIDER).node("127.0.0.1").get().unwrap();
    (Endpoint::open_observed(info, Some(observer)).unwrap(), seen)
}

#[test]
fn test_a_gated_server_waits_past_strangers_for_the_connect_it_admits() {
    const PROOF: &[u8] = b"the run's proof.";
    let (addr_tx, addr_rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let mut ep = open();
        addr_tx.send(ep.address().unwrap()).unwrap();
        let mut server = Server::new(&mut ep, 1 << 20).unwrap();
        let mut refused = Vec::new();
        let connect = {
            let mut gate = Gate::new(|proof| proof == PROOF, |claimed, why| refused.push((claimed, why)));
            server.accept(&mut ep, &mut gate, TIMEOUT).unwrap()
        };
        let report = server.serve(&mut ep, TIMEOUT).unwrap();
        (connect, refused, report)
    });
    let server_addr = addr_rx.recv().unwrap();
    // Strangers first, each from an endpoint of its own: a request before
    // any CONNECT, a CONNECT without a proof, one with another proof.
    let stranger_sends = |msg: Vec<u8>| {
        let mut ep = open();
        let server = ep.insert_peer(&server_addr).unwrap();
        let op = ep.send(server, &msg).unwrap();
        ep.wait_op(op, TIMEOUT).unwrap();
        ep
    };
    let fill = RandomFill {
        context: 1,
        seed: 2,
        page_size: 4096,
        pages: scatter_pages(1, 1, 4096, 2, MR_SIZE),
    };
    let mut kept = vec![stranger_sends(fabric::write::Message::RandomFill(fill).encode())];
    for proof in [Vec::new(), b"someone else's!".to_vec()] {
        let ep = open();
        let hello = fabric::write::Message::Connect(fabric::write::Connect {
            address: ep.address().unwrap(),
            mrs: Vec::new(),
            proof,
        });
        kept.push(stranger_sends(hello.encode()));
    }
    // The run's client then gets in, and its pages are written and verified.
    let mut ep = open();
    let mut client = Client::connect(&mut ep, &server_addr, MR_SIZE, PROOF, TIMEOUT).unwrap();
    let req = RandomFill {
        context: 7,
        seed: 99,
        page_size: 4096,
        pages: scatter_pages(3, 16, 4096, 2, MR_SIZE),
    };
    let filled = client.random_fill(&mut ep, &req, TIMEOUT).unwrap();
    assert_eq!(filled.bytes, 16 * 4096);
    let (connect, refused, report) = server.join().unwrap();
    assert_eq!(
        connect.address,
        ep.address().unwrap(),
        "the server took the run's client"
    );
    assert_eq!(report.pages, 16);
    let whys: Vec<&str> = refused.iter().map(|(_, why)| why.as_str()).collect();
    assert_eq!(
        whys,
        [
            "RandomFill before any CONNECT",
            "its CONNECT carries no proof",
            "its CONNECT's proof is not the one this server waits for"
        ]
    );
    // A CONNECT's claimed address as the provider prints it; none for the rest.
    assert!(refused[0].0.is_none(), "{refused:?}");
    for (claimed, _) in &refused[1..] {
        let claimed = claimed.as_deref().unwrap_or_default();
        assert!(claimed.starts_with("fi_sockaddr_in://127.0.0.1:"), "{claimed}");
    }
    // Bytes too short to be an address of the provider are shown in hex.
    assert_eq!(ep.address_string(&[1, 2, 3]), "fabric address 010203 (3 bytes)");
    drop(kept);
}

#[test]
fn test_observer_sees_each_write_its_completion_and_the_immediate() {
    const PAGES: usize = 6;
    const PAGE: u64 = 4096;
    let (addr_tx, addr_rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let (mut ep, seen) = open_observed();
        addr_tx.send(ep.address().unwrap()).unwrap();
        let mut server = Server::new(&mut ep, 2 * PAGE as usize).unwrap();
        server.accept(&mut ep, &mut Gate::open(), TIMEOUT).unwrap();
        let report = server.serve(&mut ep, TIMEOUT).unwrap();
        drop(ep);
        (report, Arc::try_unwrap(seen).unwrap().into_inner().unwrap())
    });
    let (mut ep, client_seen) = open_observed();
    let server_addr = addr_rx.recv().unwrap();
    let mut client = Client::connect(&mut ep, &server_addr, MR_SIZE, &[], TIMEOUT).unwrap();
    let regions: Vec<RemoteMr> = client.mrs().iter().map(|m| ep.remote_mr(*m).unwrap()).collect();
    let req = RandomFill {
        context: 0x5eed,
        seed: 11,
        page_size: PAGE,
        pages: scatter_pages(5, PAGES, PAGE as usize, 2, MR_SIZE),
    };
    client.random_fill(&mut ep, &req, TIMEOUT).unwrap();
    let (report, server_seen) = server.join().unwrap();
    let client_seen = client_seen.lock().unwrap().clone();

    // The server: one fi_writemsg per page, into the pages the request named
    // (region address + page offset, the region's key), the immediate on the
    // last one only, and a completion for each of its writes.
    let writes: Vec<&Seen> = server_seen
        .iter()
        .filter(|s| {
            matches!(
                s,
                Seen::Posted {
                    call: Call::WriteMsg,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(writes.len(), PAGES, "{server_seen:#?}");
    for (w, page) in writes.iter().zip(&req.pages) {
        let Seen::Posted {
            op,
            len,
            remote_addr,
            key,
            data,
            ..
        } = w
        else {
            unreachable!()
        };
        let region = regions[page.mr as usize];
        assert_eq!((*len, *key), (PAGE, region.key));
        assert_eq!(*remote_addr, region.addr + u64::from(page.page) * PAGE);
        let last = std::ptr::eq(*w, *writes.last().unwrap());
        assert_eq!(*data, last.then_some(report.immediate));
        assert!(
            server_seen.contains(&Seen::Completed {
                op: Some(*op),
                name: "FI_WRITE",
                data: None
            }),
            "write {op} has its completion"
        );
    }
    // Both sides inserted the peer; the server received CONNECT and RandomFill.
    assert!(server_seen.contains(&Seen::Peer) && client_seen.contains(&Seen::Peer));
    let received = |seen: &[Seen]| {
        seen.iter()
            .filter(|s| matches!(s, Seen::Completed { name: "FI_RECV", .. }))
            .count()
    };
    assert_eq!(received(&server_seen), 2);
    // The client: its two remote regions registered as it sent them, two
    // sends (CONNECT, RandomFill), and the target-side entry with the immediate.
    // (A region's `addr` is its local buffer; a peer names it by that only
    // under FI_MR_VIRT_ADDR, and tcp;ofi_rxm uses offsets.)
    for r in &regions {
        assert!(client_seen.iter().any(|s| matches!(s,
            Seen::Registered { len, key, remote: true, .. } if *len == r.size && *key == r.key)));
    }
    let sends = client_seen
        .iter()
        .filter(|s| matches!(s, Seen::Posted { call: Call::Send, .. }))
        .count();
    assert_eq!(sends, 2);
    assert!(client_seen.contains(&Seen::Completed {
        op: None,
        name: "FI_REMOTE_WRITE",
        data: Some(report.immediate)
    }));
    assert!(!client_seen.contains(&Seen::Failed) && !server_seen.contains(&Seen::Failed));
}
