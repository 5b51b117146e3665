//! A libfabric peer that is not a run's client, for the end-to-end suite:
//! it opens an RDM endpoint with PROVIDER on SRC_IP, sends the fabric
//! workloads' CONNECT to the server at SERVER_IP:PORT without a connect
//! proof, and waits TIMEOUT_S seconds for the server's answer. The suite
//! copies it to a node (`labctl cp`) and checks that a run's fabric server
//! never answers it, logs it and still serves its own client.
//!
//! ```text
//! fabric-stranger PROVIDER SRC_IP SERVER_IP:PORT [TIMEOUT_S]
//! ```
//! Prints `answered: ...` and exits 0 if the server answered, else prints
//! `no answer: ...` and exits 1; 2 for bad arguments or a failed open.

use std::net::SocketAddrV4;
use std::process::ExitCode;
use std::time::Duration;

use fabric::{Endpoint, Hints};

/// `addr` as the tcp provider names an endpoint: a `struct sockaddr_in`
/// (family in host order, then port and address in network order, then
/// eight bytes of padding).
fn sockaddr_in(addr: SocketAddrV4) -> Vec<u8> {
    let mut raw = Vec::with_capacity(16);
    raw.extend_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    raw.extend_from_slice(&addr.port().to_be_bytes());
    raw.extend_from_slice(&addr.ip().octets());
    raw.extend_from_slice(&[0; 8]);
    raw
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(provider), Some(src), Some(server)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("usage: fabric-stranger PROVIDER SRC_IP SERVER_IP:PORT [TIMEOUT_S]");
        return ExitCode::from(2);
    };
    let Ok(server) = server.parse::<SocketAddrV4>() else {
        eprintln!("fabric-stranger: `{server}` is not IPv4:PORT");
        return ExitCode::from(2);
    };
    let timeout = Duration::from_secs(args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3));
    let endpoint = Hints::new()
        .provider(provider)
        .node(src)
        .get()
        .map_err(|e| e.to_string())
        .and_then(|info| Endpoint::open(info).map_err(|e| e.to_string()));
    let mut endpoint = match endpoint {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("fabric-stranger: opening {provider} on {src}: {e}");
            return ExitCode::from(2);
        }
    };
    match fabric::perf::connect(&mut endpoint, &sockaddr_in(server), &[], timeout) {
        Ok((_, answer)) => {
            println!("answered: {} MRs offered", answer.mrs.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("no answer: {e}");
            ExitCode::from(1)
        }
    }
}
