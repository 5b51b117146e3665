//! Two endpoints over `tcp;ofi_rxm` on 127.0.0.1, one per thread, with the
//! fabric addresses exchanged over a channel (the controller relays them in the
//! product). No VMs and no RDMA hardware needed.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use fabric::write::{scatter_pages, Client, RandomFill, Server, WriteError, MR_SIZE};
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
        let connect = server.accept(&mut ep, TIMEOUT).unwrap();
        assert_eq!(connect.mrs.len(), 2);
        let mut reports = Vec::new();
        for _ in 0..2 {
            reports.push(server.serve(&mut ep, TIMEOUT).unwrap());
        }
        reports
    });
    let mut ep = open();
    let server_addr = addr_rx.recv().unwrap();
    let mut client = Client::connect(&mut ep, &server_addr, MR_SIZE, TIMEOUT).unwrap();
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
