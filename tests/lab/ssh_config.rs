//! A node's `host:` naming a `Host` entry of the user's `~/.ssh/config`:
//! labctl runs with HOME set to a scratch directory whose config has an
//! alias for each VM. The server's entry gives HostName, Port, User,
//! IdentityFile and UserKnownHostsFile; the client's also a ProxyJump
//! through the server (the jump host's key found in the same known-hosts
//! file). labs.yaml names only the aliases and the data addresses: `up`,
//! a verified write-read, `down`.

use libtest_mimic::Failed;
use serde_json::Value;

use crate::util::{bin_dir, check, e2e_server_and_client, Labctl};

pub(crate) fn test_ssh_lab_hosts_from_ssh_config_aliases(qemu: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join("lab-tests-ssh-config");
    let _ = std::fs::remove_dir_all(&dir);
    let dotssh = dir.join("home/.ssh");
    std::fs::create_dir_all(&dotssh)?;
    let e2e_dir = qemu.state_dir("e2e");
    let (server, client) = e2e_server_and_client(qemu)?;
    let text = |v: &Value, k: &str| v[k].as_str().map(str::to_string).ok_or_else(|| format!("no {k}: {v}"));
    let (server_port, client_addr) = (server["ssh_port"].to_string(), text(&client, "data_addr")?);
    let key = e2e_dir.join("id_ed25519").display().to_string();
    std::fs::write(
        dotssh.join("config"),
        format!(
            "# written by the e2e test\n\
             Host vm-server\n    HostName 127.0.0.1\n    Port {server_port}\n    User root\n    IdentityFile {key}\n\n\
             Host vm-client\n    HostName {client_addr}\n    ProxyJump root@127.0.0.1:{server_port}\n\n\
             Host vm-*\n    User root\n    IdentityFile {key}\n    UserKnownHostsFile ~/.ssh/lab_known_hosts\n"
        ),
    )?;
    std::fs::write(
        dotssh.join("lab_known_hosts"),
        format!(
            "[127.0.0.1]:{server_port} {}\n{client_addr} {}\n",
            text(&server, "host_key")?,
            text(&client, "host_key")?
        ),
    )?;
    let prefix = server["data_prefix"].as_u64().ok_or("no data_prefix")?;
    let network = {
        let first: std::net::Ipv4Addr = text(&server, "data_addr")?.parse()?;
        std::net::Ipv4Addr::from(u32::from(first) & (u32::MAX << (32 - prefix)))
    };
    let file = dir.join("sshc.yaml");
    std::fs::write(
        &file,
        format!(
            "labs:\n  - name: sshc\n    provider: ssh\n    fabric: existing\n    data_network: {network}/{prefix}\n    nodes:\n\
             \x20     - {{name: server, host: vm-server, data_addr: {}}}\n\
             \x20     - {{name: client, host: vm-client, data_addr: {client_addr}}}\n",
            text(&server, "data_addr")?
        ),
    )?;
    let lab = Labctl {
        file,
        state_base: dir.join("state"),
    };
    let home = dir.join("home");
    let run = |args: &[&str]| {
        let out = lab
            .command()
            .env("HOME", &home)
            .args(args)
            .output()
            .expect("run labctl");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let result = (|| -> Result<(), Failed> {
        let (code, _, err) = run(&["up"]);
        check(code == 0, || format!("up with ssh config aliases failed:\n{err}"))?;
        let state: Value = serde_json::from_str(&std::fs::read_to_string(lab.state_dir("sshc").join("state.json"))?)?;
        let recorded = |name: &str| {
            state["nodes"]
                .as_array()
                .and_then(|n| n.iter().find(|n| n["name"] == name))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let (s, c) = (recorded("server"), recorded("client"));
        check(
            s["ssh_host"] == "127.0.0.1" && s["ssh_port"] == server["ssh_port"] && s["ssh_user"] == "root",
            || format!("server: HostName/Port/User not taken from the config: {s}"),
        )?;
        check(
            c["ssh_host"] == client_addr.as_str()
                && c["ssh_port"] == 22
                && c["ssh_jump"]["port"] == server["ssh_port"]
                && c["ssh_identity"] == key.as_str(),
            || format!("client: HostName/ProxyJump/IdentityFile not taken from the config: {c}"),
        )?;
        let (code, out, err) = run(&["run", "write-read", "--json"]);
        check(code == 0 && out.contains("\"verified\": true"), || {
            format!("write-read on the aliased lab: {out}{err}")
        })
    })();
    let (down, _, down_err) = run(&["down"]);
    result?;
    check(down == 0, || format!("down: {down_err}"))?;
    check(!lab.state_dir("sshc").exists(), || "state stayed after down".into())?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
