//! Tests of the SSH client: timeouts and the lab's key.

use std::time::Duration;

use russh::keys::{Algorithm, PrivateKey};

use super::*;

/// A port on 127.0.0.1 that accepts connections and never says a word, like
/// a host whose sshd hangs; abort the handle to close it.
async fn silent_host() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (port, silent)
}

/// A port on 127.0.0.1 whose SYNs get no answer, like a host behind a
/// firewall that drops packets: a listener with a backlog of 0 holding one
/// connection it never accepts. Its accept queue is full, and Linux drops
/// every further SYN rather than refusing it (tcp_conn_request: "goto
/// drop" on sk_acceptq_is_full), so the connecting side retransmits and
/// waits. Keep the three values alive for as long as the port must drop.
async fn syn_dropping_host() -> (u16, tokio::net::TcpListener, tokio::net::TcpStream) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let port = listener.local_addr().unwrap().port();
    let queued = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    (port, listener, queued)
}

/// Node `node` at 127.0.0.1:`port` as root, and a fresh key to log in with.
fn local_target(node: &str, port: u16) -> (SshTarget, Arc<PrivateKey>) {
    let target = SshTarget {
        node: node.into(),
        host: "127.0.0.1".into(),
        port,
        user: "root".into(),
        identity: None,
        agent: false,
        jump: None,
    };
    let key = Arc::new(PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519).unwrap());
    (target, key)
}

/// A host key no host has: what a test pins when the host never gets that far.
fn some_host_key() -> PublicKey {
    PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519)
        .unwrap()
        .public_key()
        .clone()
}

#[tokio::test]
async fn test_ssh_that_never_answers_times_out_naming_the_node() {
    // A port that accepts connections but never says a word, like a VM
    // whose sshd hangs.
    let (port, silent) = silent_host().await;
    let (target, key) = local_target("n1", port);
    let started = std::time::Instant::now();
    let pinned = some_host_key();
    let result = SshSession::connect_with_retry(&target, key, pinned, Duration::from_secs(2), || async {
        Ok::<(), ()>(())
    })
    .await;
    match result {
        Err(ConnectFailure::Ssh(e @ SshError::Timeout { .. })) => {
            let text = e.to_string();
            assert!(text.contains("node `n1`") && text.contains(&port.to_string()), "{text}");
        }
        Err(ConnectFailure::Ssh(e)) => panic!("expected a timeout, got {e}"),
        Err(ConnectFailure::NodeDied(())) => panic!("node reported dead"),
        Ok(_) => panic!("connected to a silent port"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    silent.abort();
}

#[tokio::test]
async fn test_one_attempt_at_a_silent_host_says_it_timed_out_waiting_for_the_banner() {
    // Accepts the TCP connection and never writes: no SSH banner comes.
    let (port, silent) = silent_host().await;
    let (target, key) = local_target("client", port);
    let pinned = some_host_key();
    let started = std::time::Instant::now();
    let result = SshSession::connect_checked(&target, key, HostKeyCheck::Pinned(pinned), Duration::from_secs(2)).await;
    let elapsed = started.elapsed();
    match result {
        Err(e @ SshError::AttemptTimedOut { .. }) => {
            assert!(!e.is_final(), "a timeout may pass: retried where the caller waits");
            let text = e.to_string();
            assert_eq!(
                text,
                format!(
                    "node `client`: SSH to 127.0.0.1:{port} timed out after 2 s: {}",
                    ConnectStage::Handshake.waiting_for()
                )
            );
            assert!(text.contains("no SSH banner"), "{text}");
        }
        Err(e) => panic!("expected a timeout, got {e}"),
        Ok(_) => panic!("connected to a silent port"),
    }
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    silent.abort();
}

#[tokio::test]
async fn test_one_attempt_at_a_host_that_drops_syns_says_the_tcp_connection_got_no_answer() {
    let (port, listener, queued) = syn_dropping_host().await;
    // The port really drops: a bare TCP connect gets neither an answer nor
    // a refusal within a second.
    let probe = tokio::time::timeout(
        Duration::from_secs(1),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await;
    assert!(probe.is_err(), "the port answered or refused: {probe:?}");
    let (target, key) = local_target("server", port);
    let started = std::time::Instant::now();
    let result = SshSession::connect_checked(
        &target,
        key,
        HostKeyCheck::Pinned(some_host_key()),
        Duration::from_secs(2),
    )
    .await;
    let elapsed = started.elapsed();
    match result {
        Err(e @ SshError::AttemptTimedOut { .. }) => {
            assert!(!e.is_final(), "a timeout may pass: retried where the caller waits");
            assert_eq!(
                e.to_string(),
                format!(
                    "node `server`: SSH to 127.0.0.1:{port} timed out after 2 s: {}",
                    ConnectStage::Tcp.waiting_for()
                )
            );
        }
        Err(e) => panic!("expected a timeout, got {e}"),
        Ok(_) => panic!("connected to a port that drops SYNs"),
    }
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    drop((listener, queued));
}

#[test]
fn test_key_is_created_private_and_reloaded() {
    let dir = std::env::temp_dir().join(format!("labctl-ssh-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("id_ed25519");
    let key = load_or_create_key(&path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = load_or_create_key(&path).unwrap();
    assert_eq!(key.public_key(), again.public_key());
    let line = public_line(key.public_key());
    assert!(line.starts_with("ssh-ed25519 "), "{line}");
    assert_eq!(parse_public(&line).unwrap(), *key.public_key());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn test_a_passphrase_protected_identity_goes_to_the_agent_or_is_refused_saying_what_to_do() {
    // A real encrypted key, made by ssh-keygen (openssh-client).
    let dir = std::env::temp_dir().join(format!("labctl-ssh-enc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("enc_ed25519");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "secret phrase", "-f"])
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    // No ssh-agent runs: the key cannot be used, and the error says how.
    let key = Arc::new(PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519).unwrap());
    let err = match crate::ssh_login::choose(Some(&path), false, &key, None) {
        Err(crate::ssh_login::LoginProblem::Key { message, .. }) => message,
        other => panic!("an encrypted key without an agent: {other:?}"),
    };
    assert!(err.contains(path.to_str().unwrap()), "{err}");
    assert!(
        err.contains("protected by a passphrase") && err.contains("ssh-add") && err.contains("without a passphrase"),
        "{err}"
    );
    // With an agent, its public half (read from the encrypted file) picks the agent's key.
    let made_pub = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    match crate::ssh_login::choose(Some(&path), false, &key, Some("/agent.sock".into())) {
        Ok(crate::ssh_login::Login::Agent {
            wanted: Some((_, public)),
            ..
        }) => {
            assert_eq!(public.key_data(), parse_public(&made_pub).unwrap().key_data())
        }
        other => panic!("an encrypted key with an agent: {other:?}"),
    }
    std::fs::remove_dir_all(dir).unwrap();
}
