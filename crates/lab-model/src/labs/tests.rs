//! Tests of the labs.yaml model, by topic: `malformed` files and their
//! errors, how good files `resolve`, the optional `sections`, `values` and
//! their round trips, and the files the repository `shipped` beside the
//! model. The lab files more than one topic reads are here.

use super::*;

mod malformed;
mod resolve;
mod sections;
mod shipped;
mod values;

/// `n` nodes named n1, n2, ... in lab `a`; node k's name is on line 3 + k.
fn lab_of(n: usize) -> String {
    let mut s = String::from("labs:\n  - name: a\n    nodes:\n");
    for k in 1..=n {
        s.push_str(&format!("      - name: n{k}\n"));
    }
    s
}

const TWO_LABS: &str = "\
labs:
  - name: local
    defaults:
      cpus: 2
      memory: 2GiB
    nodes:
      - name: server
      - name: client
        cpus: 4
        memory: 1536M
  - name: quad
    provider: qemu
    fabric: none
    accel: tcg
    data_network: 192.168.7.0/29
    nodes:
      - name: n1
        data_addr: 192.168.7.2
      - name: n2
      - name: n3
        data_addr: 192.168.7.1
        ssh_port: 2300
      - name: n4
        memory: 512
";
