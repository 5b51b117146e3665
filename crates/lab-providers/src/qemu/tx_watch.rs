//! Keeps each VM's data NIC taking frames: QEMU 7.2's virtio-net can stop
//! taking frames from the guest's transmit ring for good after its `stream`
//! netdev had to wait for the switch (under bandwidth load), and the link
//! then stays dead both ways. The guest has posted frames QEMU never reads,
//! no frame is in flight, and no notification will come. Pausing and
//! resuming the VM makes QEMU look at its queues again and the frames flow.
//!
//! The supervisor polls each VM's QMP socket four times a second, reads the data
//! NIC's transmit queue (`x-query-virtio-queue-status`, and the guest's
//! avail index through `x-query-virtio-queue-element`), and when frames
//! have waited untaken, with none in flight, for [`STALLED_POLLS`] polls in
//! a row, it stops and continues the VM (QMP `stop`, `cont`) and says so in
//! the supervisor log. It changes nothing else.

use std::path::{Path, PathBuf};
use std::time::Duration;

use backon::{ConstantBuilder, Retryable};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// The data NIC's `-device` id; QMP finds its virtio device at [`data_nic_path`].
pub const DATA_NIC_ID: &str = "datanic";

/// Where QMP finds the data NIC's virtio device (its QOM path).
fn data_nic_path() -> String {
    format!("/machine/peripheral/{DATA_NIC_ID}/virtio-backend")
}
/// virtio-net's first transmit queue (queue 0 receives).
const TX_QUEUE: u32 = 1;
/// How often a VM's transmit queue is read.
const POLL: Duration = Duration::from_millis(250);
/// Polls in a row that find frames waiting, none taken and none in flight
/// before the queue counts as stalled (half a second at least): a queue
/// that is merely slow (a busy host delays QEMU's main loop) takes some
/// between two polls. Soon enough that a run's QPs (half a second of
/// retries on a dead link) may still be alive: the guest's rxe frees a
/// destroyed QP's frames left in the ring unsafely when they finally go.
pub const STALLED_POLLS: u32 = 3;

/// The QMP socket of VM `name`, relative to the lab directory (QEMU's and
/// the supervisor's working directory).
pub fn qmp_socket(name: &str) -> PathBuf {
    PathBuf::from(format!("{name}.qmp"))
}

/// One reading of a transmit queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxReading {
    /// The guest's avail index: frames it has posted, modulo 2^16.
    pub avail: u16,
    /// QEMU's last avail index: frames it has taken.
    pub taken: u16,
    /// Frames taken and not yet returned to the guest (one waits in the
    /// netdev while its peer cannot accept it).
    pub in_flight: u32,
}

impl TxReading {
    /// Frames the guest posted that QEMU has not taken.
    pub fn waiting(&self) -> u16 {
        self.avail.wrapping_sub(self.taken)
    }
}

/// Counts polls that find the queue stalled.
#[derive(Debug, Default)]
pub struct StallCounter {
    last: Option<TxReading>,
    stalled_polls: u32,
}

impl StallCounter {
    /// Takes one reading; true when the queue has been stalled for
    /// [`STALLED_POLLS`] polls in a row (the count then starts again).
    pub fn observe(&mut self, now: TxReading) -> bool {
        let stuck = now.waiting() > 0 && now.in_flight == 0;
        let still = self.last.is_some_and(|last| last.taken == now.taken);
        self.stalled_polls = match (stuck, still) {
            (true, true) => self.stalled_polls + 1,
            (true, false) => 1,
            (false, _) => 0,
        };
        self.last = Some(now);
        if self.stalled_polls >= STALLED_POLLS {
            *self = StallCounter::default();
            return true;
        }
        false
    }
}

/// A QMP connection.
struct Qmp {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl Qmp {
    async fn connect(path: &Path) -> std::io::Result<Qmp> {
        let stream = UnixStream::connect(path).await?;
        let (reader, writer) = stream.into_split();
        let mut qmp = Qmp {
            reader: BufReader::new(reader),
            writer,
        };
        qmp.read_message().await?; // the greeting
        qmp.execute("qmp_capabilities", json!({})).await?;
        Ok(qmp)
    }

    async fn read_message(&mut self) -> std::io::Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line).await? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "QMP closed"));
        }
        serde_json::from_str(&line).map_err(std::io::Error::other)
    }

    /// Runs one command; its `return`, or its `error` as an error.
    async fn execute(&mut self, command: &str, arguments: Value) -> std::io::Result<Value> {
        let mut msg = serde_json::to_vec(&json!({ "execute": command, "arguments": arguments }))?;
        msg.push(b'\n');
        self.writer.write_all(&msg).await?;
        loop {
            let reply = self.read_message().await?;
            if let Some(ret) = reply.get("return") {
                return Ok(ret.clone());
            }
            if let Some(err) = reply.get("error") {
                return Err(std::io::Error::other(format!("{command}: {err}")));
            }
            // An asynchronous event (STOP, RESUME, NIC_RX_FILTER_CHANGED): skip it.
        }
    }

    async fn read_tx(&mut self) -> std::io::Result<TxReading> {
        let args = json!({ "path": data_nic_path(), "queue": TX_QUEUE });
        let status = self.execute("x-query-virtio-queue-status", args.clone()).await?;
        let element = self.execute("x-query-virtio-queue-element", args).await?;
        let field = |v: &Value, key: &str| {
            v.pointer(key)
                .and_then(Value::as_u64)
                .ok_or_else(|| std::io::Error::other(format!("no {key} in {v}")))
        };
        Ok(TxReading {
            avail: field(&element, "/avail/idx")? as u16,
            taken: field(&status, "/last-avail-idx")? as u16,
            in_flight: field(&status, "/inuse")? as u32,
        })
    }
}

/// Watches VM `name` through its QMP socket at `path` until the socket
/// closes (the VM exited).
pub async fn watch(name: String, path: PathBuf) {
    // QEMU creates the socket as it starts: 300 tries, 100 ms apart.
    let connect = || Qmp::connect(&path);
    let connected = connect
        .retry(
            ConstantBuilder::new()
                .with_delay(Duration::from_millis(100))
                .with_max_times(299),
        )
        .await;
    let Ok(mut qmp) = connected else {
        super::supervisor_log::line(format_args!("node {name}: no QMP socket; its data NIC is not watched"));
        return;
    };
    // Only the lab's owner may drive the VM (the lab directory is private
    // too; QEMU creates the socket with the umask's mode).
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
    }
    let mut counter = StallCounter::default();
    let mut announced = false;
    let mut interval = tokio::time::interval(POLL);
    // A poll that comes late (a busy host) is not made up for.
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let reading = match qmp.read_tx().await {
            Ok(r) => r,
            Err(e) if vm_gone(&e) => return,
            Err(e) => {
                // The guest's driver is not up yet (no ring), or this QEMU
                // lacks the queries: try again later, quietly.
                tracing::debug!(node = %name, "reading the data NIC's transmit queue: {e}");
                continue;
            }
        };
        if !announced {
            super::supervisor_log::line(format_args!("node {name}: watching its data NIC's transmit queue"));
            announced = true;
        }
        if counter.observe(reading) {
            super::supervisor_log::line(format_args!(
                "node {name}: {}: the guest posted {} frame(s) QEMU did not take for {} ms; \
                 pausing and resuming the VM to restart its transmit queue",
                super::supervisor_log::DATA_NIC_STALLED,
                reading.waiting(),
                (STALLED_POLLS - 1) as u128 * POLL.as_millis()
            ));
            let resumed = async {
                qmp.execute("stop", json!({})).await?;
                qmp.execute("cont", json!({})).await
            };
            if let Err(e) = resumed.await {
                super::supervisor_log::line(format_args!(
                    "node {name}: {}: {e}",
                    super::supervisor_log::RESTART_FAILED
                ));
                if vm_gone(&e) {
                    return;
                }
            }
        }
    }
}

/// Whether a QMP error means the VM's QEMU has gone (its socket closed).
fn vm_gone(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
    matches!(e.kind(), UnexpectedEof | BrokenPipe | ConnectionReset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(avail: u16, taken: u16, in_flight: u32) -> TxReading {
        TxReading {
            avail,
            taken,
            in_flight,
        }
    }

    #[test]
    fn test_a_queue_with_frames_left_untaken_for_three_polls_is_stalled() {
        // The readings of the stalled client of a default lab: 238 frames
        // posted, none taken, none in flight.
        let mut c = StallCounter::default();
        assert!(!c.observe(r(54869, 54631, 0)), "one reading is no trend");
        assert!(!c.observe(r(54869, 54631, 0)));
        assert!(c.observe(r(54869, 54631, 0)), "third poll: stalled");
        // The count starts again after the restart.
        assert!(!c.observe(r(54900, 54631, 0)));
    }

    /// A QMP server that greets, accepts capabilities, answers every
    /// queue query with the stalled client's readings (an event before
    /// some answers, as QEMU sends them), and records the commands.
    async fn fake_qemu(listener: tokio::net::UnixListener) -> Vec<String> {
        let (stream, _) = listener.accept().await.unwrap();
        let (reader, mut writer) = stream.into_split();
        let mut lines = BufReader::new(reader).lines();
        writer
            .write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n")
            .await
            .unwrap();
        let mut seen = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            let msg: Value = serde_json::from_str(&line).unwrap();
            let command = msg["execute"].as_str().unwrap().to_string();
            let reply = match command.as_str() {
                "x-query-virtio-queue-status" => {
                    assert_eq!(msg["arguments"]["path"], "/machine/peripheral/datanic/virtio-backend");
                    assert_eq!(msg["arguments"]["queue"], TX_QUEUE);
                    json!({"return": {"last-avail-idx": 54631, "shadow-avail-idx": 54631, "inuse": 0, "used-idx": 54631}})
                }
                "x-query-virtio-queue-element" => {
                    json!({"return": {"avail": {"idx": 54869, "flags": 0}, "used": {"idx": 54631}}})
                }
                _ => json!({"return": {}}),
            };
            let event = json!({"event": "NIC_RX_FILTER_CHANGED", "data": {}});
            writer
                .write_all(format!("{event}\n{reply}\n").as_bytes())
                .await
                .unwrap();
            seen.push(command.clone());
            if command == "cont" {
                break; // the VM "exits": the socket closes
            }
        }
        seen
    }

    #[tokio::test]
    async fn test_the_watch_stops_and_continues_a_vm_whose_queue_stalled_and_ends_with_it() {
        let dir = std::env::temp_dir().join(format!("labctl-tx-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("client.qmp");
        let _ = std::fs::remove_file(&path);
        let qemu = tokio::spawn(fake_qemu(tokio::net::UnixListener::bind(&path).unwrap()));
        tokio::time::timeout(Duration::from_secs(30), watch("client".into(), path.clone()))
            .await
            .expect("the watch ends when QEMU's socket closes");
        let seen = qemu.await.unwrap();
        let queries = ["x-query-virtio-queue-status", "x-query-virtio-queue-element"];
        let mut want = vec!["qmp_capabilities"];
        for _ in 0..STALLED_POLLS {
            want.extend(queries);
        }
        want.extend(["stop", "cont"]);
        assert_eq!(seen, want);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn test_a_busy_idle_or_waiting_queue_is_not_stalled() {
        let mut c = StallCounter::default();
        // Taking frames between polls, however few.
        for (i, taken) in [100u16, 101, 102, 103, 104].into_iter().enumerate() {
            assert!(!c.observe(r(200, taken, 0)), "poll {i}");
        }
        // Idle: nothing posted beyond what was taken.
        for _ in 0..5 {
            assert!(!c.observe(r(300, 300, 0)));
        }
        // A frame in flight: QEMU waits for the switch, which will call it back.
        for _ in 0..5 {
            assert!(!c.observe(r(310, 300, 1)));
        }
        // The index wraps at 2^16.
        assert_eq!(r(3, 65533, 0).waiting(), 6);
    }
}
