//! The lab's data segment: a learning Ethernet switch for QEMU `stream`
//! netdevs, listening on a unix socket in the lab's directory.
//!
//! Each VM's data NIC connects with `-netdev stream,addr.type=unix,...`;
//! QEMU frames every Ethernet frame with a 4-byte big-endian length. Frames
//! carry RoCE traffic in the clear (addresses, rkeys), so who may attach is
//! decided by the socket's place: see [`super::supervisor::bind_segment`]. Frames go
//! to the port that last sent from their destination MAC, or to every other
//! port when the destination is unknown, broadcast or multicast. The switch is
//! lossless: a slow port back-pressures its senders through the socket, the way a
//! PFC-enabled RoCE fabric does, so rxe retransmissions come only from
//! impairments a user adds on purpose.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// Largest frame accepted (jumbo frames plus headroom).
const MAX_FRAME: usize = 65_536;
/// Frames queued per port before senders wait.
const PORT_QUEUE: usize = 512;
/// Bytes of queued frames a port writes in one go at most.
const EGRESS_BATCH: usize = 256 * 1024;

type Mac = [u8; 6];

#[derive(Default)]
struct Fabric {
    next_port: u64,
    ports: HashMap<u64, mpsc::Sender<Bytes>>,
    macs: HashMap<Mac, u64>,
}

/// Runs the switch until the listener fails; each accepted connection is a port.
pub async fn run(listener: UnixListener) -> std::io::Result<()> {
    let fabric = Arc::new(Mutex::new(Fabric::default()));
    loop {
        let (stream, _) = listener.accept().await?;
        let peer = stream.peer_cred().map(|c| c.pid()).ok().flatten();
        let (tx, rx) = mpsc::channel(PORT_QUEUE);
        let port = {
            let mut f = fabric.lock().expect("switch table");
            f.next_port += 1;
            let port = f.next_port;
            f.ports.insert(port, tx);
            port
        };
        tracing::debug!(port, ?peer, "switch port up");
        tokio::spawn(serve_port(fabric.clone(), port, stream, rx));
    }
}

async fn serve_port(fabric: Arc<Mutex<Fabric>>, port: u64, stream: UnixStream, mut rx: mpsc::Receiver<Bytes>) {
    let (reader, mut writer) = stream.into_split();
    // Frames already in the socket are read with one syscall, not two each.
    let mut reader = BufReader::with_capacity(4 + MAX_FRAME, reader);
    let egress = tokio::spawn(async move {
        // Each frame goes out in one write with its length (and with the
        // frames queued behind it): written apart, the length alone could
        // wake the receiving QEMU, which reads whatever has arrived, to
        // wake it again for the frame, two wake-ups per frame on a loaded
        // host where each costs a preemption.
        let mut out = Vec::with_capacity(4 + MAX_FRAME);
        while let Some(frame) = rx.recv().await {
            out.clear();
            frame_into(&mut out, &frame);
            while out.len() < EGRESS_BATCH {
                match rx.try_recv() {
                    Ok(more) => frame_into(&mut out, &more),
                    Err(_) => break,
                }
            }
            if writer.write_all(&out).await.is_err() {
                break;
            }
        }
    });
    let mut len_buf = [0u8; 4];
    loop {
        if reader.read_exact(&mut len_buf).await.is_err() {
            break;
        }
        let len = u32::from_be_bytes(len_buf) as usize;
        if len > MAX_FRAME {
            tracing::warn!(port, len, "oversized frame; dropping the port");
            break;
        }
        let mut frame = vec![0u8; len];
        if reader.read_exact(&mut frame).await.is_err() {
            break;
        }
        if len < 14 {
            continue;
        }
        let frame = Bytes::from(frame);
        for out in destinations(&fabric, port, &frame) {
            // A closed port just drops the frame; its reader cleans up.
            let _ = out.send(frame.clone()).await;
        }
    }
    egress.abort();
    let mut f = fabric.lock().expect("switch table");
    f.ports.remove(&port);
    f.macs.retain(|_, p| *p != port);
    tracing::debug!(port, "switch port down");
}

/// Appends `frame` as the `stream` netdev frames it: a 4-byte big-endian
/// length, then the frame.
fn frame_into(out: &mut Vec<u8>, frame: &[u8]) {
    out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    out.extend_from_slice(frame);
}

/// Learns the source MAC and returns the queues the frame must go to.
fn destinations(fabric: &Mutex<Fabric>, ingress: u64, frame: &[u8]) -> Vec<mpsc::Sender<Bytes>> {
    let dst: Mac = frame[0..6].try_into().expect("6 bytes");
    let src: Mac = frame[6..12].try_into().expect("6 bytes");
    let mut f = fabric.lock().expect("switch table");
    if src[0] & 1 == 0 {
        f.macs.insert(src, ingress);
    }
    let known = if dst[0] & 1 == 0 {
        f.macs.get(&dst).copied()
    } else {
        None
    };
    match known {
        Some(port) if port == ingress => Vec::new(),
        Some(port) => f.ports.get(&port).cloned().into_iter().collect(),
        None => f
            .ports
            .iter()
            .filter(|(p, _)| **p != ingress)
            .map(|(_, tx)| tx.clone())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn frame(dst: [u8; 6], src: [u8; 6], payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(payload);
        f
    }

    async fn send(s: &mut UnixStream, f: &[u8]) {
        s.write_all(&(f.len() as u32).to_be_bytes()).await.unwrap();
        s.write_all(f).await.unwrap();
    }

    async fn recv(s: &mut UnixStream) -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        match tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return None,
        }
        let mut f = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut f).await.unwrap();
        Some(f)
    }

    /// A switch on a socket in its own temp directory (removed by the
    /// test): the directory and the socket's path.
    fn start_switch(label: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("labctl-switch-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let addr = dir.join("segment.sock");
        let _ = std::fs::remove_file(&addr);
        tokio::spawn(run(UnixListener::bind(&addr).unwrap()));
        (dir, addr)
    }

    #[tokio::test]
    async fn test_switch_floods_unknown_then_forwards_learned() {
        let (dir, addr) = start_switch("test");
        let mut a = UnixStream::connect(&addr).await.unwrap();
        let mut b = UnixStream::connect(&addr).await.unwrap();
        let mut c = UnixStream::connect(&addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (ma, mb) = ([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]);

        // Broadcast from A reaches B and C, not A.
        let bcast = frame([0xff; 6], ma, b"who-has");
        send(&mut a, &bcast).await;
        assert_eq!(recv(&mut b).await.unwrap(), bcast);
        assert_eq!(recv(&mut c).await.unwrap(), bcast);
        assert!(recv(&mut a).await.is_none());

        // B answers A: A's MAC was learned, so only A gets it.
        let reply = frame(ma, mb, b"is-at");
        send(&mut b, &reply).await;
        assert_eq!(recv(&mut a).await.unwrap(), reply);
        assert!(recv(&mut c).await.is_none());

        // Now A -> B is unicast too, payload intact.
        let data = frame(mb, ma, &[7u8; 1500]);
        send(&mut a, &data).await;
        assert_eq!(recv(&mut b).await.unwrap(), data);
        assert!(recv(&mut c).await.is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A burst arrives whole and in order: frames that share one read on
    /// the way in and one write on the way out keep their boundaries.
    #[tokio::test]
    async fn test_a_burst_of_frames_arrives_whole_and_in_order() {
        let (dir, addr) = start_switch("burst");
        let mut a = UnixStream::connect(&addr).await.unwrap();
        let mut b = UnixStream::connect(&addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (ma, mb) = ([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]);
        // B makes itself known, so A's frames are unicast to it.
        send(&mut b, &frame(ma, mb, b"hello")).await;
        assert!(recv(&mut a).await.is_some());

        // 300 frames of 60 B to 9 000 B in one write: more than one
        // read's worth on the way in, and more than one batch on the way out.
        let frames: Vec<Vec<u8>> = (0..300u32)
            .map(|i| {
                let payload: Vec<u8> = (0..(46 + (i * 977) % 8_954)).map(|j| (i + j) as u8).collect();
                frame(mb, ma, &payload)
            })
            .collect();
        let mut burst = Vec::new();
        for f in &frames {
            frame_into(&mut burst, f);
        }
        a.write_all(&burst).await.unwrap();
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(recv(&mut b).await.as_ref(), Some(f), "frame {i}");
        }
        assert!(recv(&mut b).await.is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
