//! A moto EC2 emulator for the AWS provider's tests: one `moto_server` per
//! test on a free 127.0.0.1 port, killed when the test ends (pass or fail).
//! moto comes from tests/install-test-deps.sh; a missing moto fails
//! the test rather than skipping it.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_ec2::types::Filter;
use aws_sdk_ec2::Client;

/// A running moto_server.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    log: PathBuf,
}

/// Where tests/install-test-deps.sh puts moto, else PATH.
fn moto_server() -> PathBuf {
    let venv = dirs::cache_dir()
        .unwrap_or_else(|| PathBuf::from("/root/.cache"))
        .join("labctl/venv/bin/moto_server");
    if venv.exists() {
        return venv;
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("moto_server"))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "moto_server is not installed (looked in {} and PATH); the AWS provider's tests need it: run `bash provisioning/host/install-deps.sh`",
                venv.display()
            )
        })
}

impl Moto {
    /// Starts moto_server and waits until it answers.
    pub fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::env::temp_dir().join(format!("labctl-moto-{}-{port}.log", std::process::id()));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(moto_server())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // Refuse unknown AMIs and key pairs as EC2 does.
            .env("MOTO_ENABLE_AMI_VALIDATION", "true")
            .env("MOTO_ENABLE_KEYPAIR_VALIDATION", "true")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start moto_server");
        let mut moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            log,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto_server exited ({status}) before listening:\n{}", moto.log_text());
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "moto_server did not listen on port {port} within 60 s:\n{}",
                moto.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// What moto logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An EC2 client for this moto in `region`, with fake credentials.
    pub fn client(&self, region: &str) -> Client {
        let config = aws_sdk_ec2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .endpoint_url(&self.endpoint)
            .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
            .http_client(lab_providers::aws::https_client())
            .build();
        Client::from_conf(config)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A Linux AMI moto knows in the client's region.
pub async fn some_linux_ami(client: &Client) -> String {
    let images = client.describe_images().owners("amazon").send().await.unwrap();
    images
        .images()
        .iter()
        .filter(|i| i.platform_details().is_none_or(|p| p.contains("Linux")))
        .filter(|i| !i.name().unwrap_or_default().contains("Windows"))
        .find_map(|i| i.image_id())
        .expect("moto has a Linux AMI")
        .to_string()
}

fn lab_filter(lab: &str) -> Filter {
    Filter::builder().name("tag:labctl:lab").values(lab).build()
}

/// Every resource EC2 holds for `lab`, by tag: (kind, id), sorted.
/// Terminated instances do not count.
pub async fn tagged(client: &Client, lab: &str) -> Vec<(&'static str, String)> {
    matching(client, lab_filter(lab)).await
}

/// Every resource EC2 holds that `filter` matches: (kind, id), sorted.
/// Terminated instances do not count.
pub async fn matching(client: &Client, filter: Filter) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let instances = client
        .describe_instances()
        .filters(filter.clone())
        .send()
        .await
        .unwrap();
    for i in instances.reservations().iter().flat_map(|r| r.instances()) {
        let state = i.state().and_then(|s| s.name()).map(|s| s.as_str().to_string());
        if state.as_deref() != Some("terminated") {
            out.push(("instance", i.instance_id().unwrap().to_string()));
        }
    }
    let groups = client
        .describe_security_groups()
        .filters(filter.clone())
        .send()
        .await
        .unwrap();
    out.extend(
        groups
            .security_groups()
            .iter()
            .map(|g| ("security-group", g.group_id().unwrap().to_string())),
    );
    let keys = client
        .describe_key_pairs()
        .filters(filter.clone())
        .send()
        .await
        .unwrap();
    out.extend(
        keys.key_pairs()
            .iter()
            .map(|k| ("key-pair", k.key_name().unwrap().to_string())),
    );
    let vpcs = client.describe_vpcs().filters(filter.clone()).send().await.unwrap();
    out.extend(vpcs.vpcs().iter().map(|v| ("vpc", v.vpc_id().unwrap().to_string())));
    let subnets = client.describe_subnets().filters(filter.clone()).send().await.unwrap();
    out.extend(
        subnets
            .subnets()
            .iter()
            .map(|s| ("subnet", s.subnet_id().unwrap().to_string())),
    );
    let gateways = client
        .describe_internet_gateways()
        .filters(filter.clone())
        .send()
        .await
        .unwrap();
    out.extend(
        gateways
            .internet_gateways()
            .iter()
            .map(|g| ("internet-gateway", g.internet_gateway_id().unwrap().to_string())),
    );
    out.sort();
    out
}

/// A fresh labs.yaml directory under the temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "labctl-aws-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The lab's login key in these tests.
pub const LOGIN_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJ2kTo6eG5jMN8TNA4IS1zfZXCw6M4ZTDyIozx0Z8Kb labctl-test";

/// A real ed25519 host key pair (made for these tests only by ssh-keygen).
pub const HOST_KEY_PUBLIC: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMB6OkRCQ/9onj6+bP4wFutKAUy8qxP3YlhzdjisARcq";
const HOST_KEY_PRIVATE: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACDAejpEQkP/aJ4+vmz+MBbrSgFMvKsT92JYc3Y4rAEXKgAAAJAkRhbeJEYW\n3gAAAAtzc2gtZWQyNTUxOQAAACDAejpEQkP/aJ4+vmz+MBbrSgFMvKsT92JYc3Y4rAEXKg\nAAAECGWJlpAkiIX1x0nQlosRrVEWNlOtlqhjJYOGapAsaQI8B6OkRCQ/9onj6+bP4wFutK\nAUy8qxP3YlhzdjisARcqAAAAB2V4YW1wbGUBAgMEBQY=\n-----END OPENSSH PRIVATE KEY-----\n";

/// The keys `create` hands the nodes of `spec`: [`LOGIN_KEY`], and the same
/// test host key pair for every node.
pub fn node_keys(spec: &lab_model::LabSpec) -> lab_providers::NodeKeys {
    let pair = lab_providers::HostKeyPair {
        private_openssh: HOST_KEY_PRIVATE.into(),
        public: HOST_KEY_PUBLIC.into(),
    };
    lab_providers::NodeKeys {
        authorized_key: LOGIN_KEY.into(),
        host_keys: spec
            .resolve_nodes()
            .into_iter()
            .map(|n| (n.name, pair.clone()))
            .collect(),
        preload: Vec::new(),
    }
}

/// Points the AWS SDK of this process (and of the labctl processes it
/// starts) at `moto` with test keys, the way a user's environment would:
/// AWS_ENDPOINT_URL, the key variables, no config or credentials files, no
/// profile, region or LABCTL_STATE_DIR; and the registry of live labs that
/// `up` writes goes under `base`. Only for a test binary with one test:
/// nothing else may read the environment while it changes.
pub fn aws_environment_for(moto: &Moto, base: &std::path::Path) {
    std::env::set_var("AWS_ENDPOINT_URL", &moto.endpoint);
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    std::env::set_var("AWS_CONFIG_FILE", base.join("no-config"));
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", base.join("no-credentials"));
    std::env::set_var("XDG_STATE_HOME", base.join("xdg-state"));
    std::env::remove_var("AWS_PROFILE");
    std::env::remove_var("AWS_REGION");
    std::env::remove_var("LABCTL_STATE_DIR");
}

/// Writes `file` holding one two-node aws lab `name` (us-east-1, image `ami`,
/// SSH to private addresses); returns its path.
pub fn write_aws_lab(file: &std::path::Path, name: &str, ami: &str) -> PathBuf {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(
        file,
        format!(
            "labs:\n  - name: {name}\n    provider: aws\n    aws:\n      region: us-east-1\n      instance_type: t3.medium\n      ami: {ami}\n      ssh_cidr: 198.51.100.7/32\n      ssh_address: private\n    nodes:\n      - name: server\n      - name: client\n"
        ),
    )
    .unwrap();
    file.to_path_buf()
}
