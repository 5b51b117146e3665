//! A lab is its id, against moto (issue 36 item 1): two labs of one name,
//! from two directories, brought up at once, get distinct instances, key
//! pairs, security groups and networks; `delete` of one leaves every
//! resource of the other; a lab whose state is lost is deleted by the ids
//! the registry of live labs has for its directory, never by name; and
//! `down --leaked` deletes a resource without a lab id only when it is named.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use aws_sdk_ec2::Client;
use lab_model::{LabSpec, LabsFile};
use lab_providers::aws::{scan_leaked, AwsProvider, AwsState, Leftover, Waits};
use lab_providers::{Provider, ProviderError};
use lab_state::live_labs::{register_in, LiveLab};
use lab_state::progress::Silent;
use lab_state::{LabDir, LabState};

use crate::common::{self, some_linux_ami, tagged, temp_dir, Moto};

const REGION: &str = "us-east-1";

fn fast() -> Waits {
    Waits {
        poll: Duration::from_millis(100),
        running: Duration::from_secs(30),
        teardown: Duration::from_secs(30),
    }
}

/// One project directory with a labs.yaml holding a two-node aws lab `name`.
struct Project {
    spec: LabSpec,
    dir: LabDir,
}

fn project(root: &Path, name: &str, ami: &str) -> Project {
    std::fs::create_dir_all(root).unwrap();
    let file = root.join("labs.yaml");
    std::fs::write(
        &file,
        format!(
            "labs:\n  - name: {name}\n    provider: aws\n    aws:\n      region: {REGION}\n      instance_type: t3.medium\n      ami: {ami}\n      ssh_cidr: 198.51.100.7/32\n    nodes:\n      - name: server\n      - name: client\n"
        ),
    )
    .unwrap();
    let spec = LabsFile::load(&file).unwrap_or_else(|e| panic!("{e}")).labs[0].clone();
    let dir = LabDir::for_lab(&file, name);
    dir.create().unwrap();
    Project { spec, dir }
}

struct Fixture {
    moto: Moto,
    client: Client,
    ami: String,
    base: PathBuf,
}

impl Fixture {
    async fn new(tag: &str) -> Fixture {
        let moto = Moto::start();
        let client = moto.client(REGION);
        let ami = some_linux_ami(&client).await;
        Fixture {
            moto,
            client,
            ami,
            base: temp_dir(tag),
        }
    }

    fn project(&self, sub: &str, name: &str) -> Project {
        project(&self.base.join(sub), name, &self.ami)
    }

    /// A provider whose registry of live labs is `base/registry`.
    fn provider(&self, spec: &LabSpec) -> AwsProvider {
        AwsProvider::with_client(self.client.clone(), spec.aws.clone(), spec.fabric)
            .with_waits(fast())
            .with_registry(&self.registry())
    }

    fn registry(&self) -> PathBuf {
        self.base.join("registry")
    }

    /// `create` as `up` runs it: a fresh state (a new id) saved and
    /// registered before anything is created.
    async fn create(&self, p: &Project) -> Result<LabState, ProviderError> {
        let mut state = LabState::new(&p.spec.name, "aws", &p.spec.fabric.to_string());
        p.dir.save(&state).unwrap();
        register_in(
            &self.registry(),
            &LiveLab {
                id: state.id.clone(),
                lab: state.lab.clone(),
                provider: "aws".into(),
                state_dir: p.dir.root().to_path_buf(),
                created: state.created_at.clone(),
            },
        )
        .unwrap();
        let nodes = p.spec.resolve_nodes();
        self.provider(&p.spec)
            .create(
                &p.spec,
                &nodes,
                &p.dir,
                &mut state,
                &common::node_keys(&p.spec),
                &Silent,
            )
            .await
            .map(|()| state)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn id_filter(lab_id: &str) -> Filter {
    Filter::builder().name("tag:labctl:lab-id").values(lab_id).build()
}

/// Every resource EC2 holds tagged with lab id `lab_id`: (kind, id), sorted;
/// terminated instances do not count.
async fn with_id(client: &Client, lab_id: &str) -> Vec<(&'static str, String)> {
    common::matching(client, id_filter(lab_id)).await
}

fn of_kind<'r>(resources: &'r [(&str, String)], kind: &str) -> Vec<&'r str> {
    resources
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, id)| id.as_str())
        .collect()
}

/// The key pair's and the security group's names of the lab `aws` records.
async fn names(client: &Client, aws: &AwsState) -> (String, String) {
    let group = client
        .describe_security_groups()
        .group_ids(aws.security_group_id.clone().unwrap())
        .send()
        .await
        .unwrap();
    (
        aws.key_name.clone().unwrap(),
        group.security_groups()[0].group_name().unwrap().to_string(),
    )
}

#[tokio::test]
async fn test_two_labs_of_one_name_up_at_once_share_nothing_and_down_of_one_leaves_the_other() {
    let f = Fixture::new("samename").await;
    let a = f.project("project-a", "shared");
    let b = f.project("project-b", "shared");
    let (state_a, state_b) = tokio::join!(f.create(&a), f.create(&b));
    let state_a = state_a.unwrap_or_else(|e| panic!("{e}\n{}", f.moto.log_text()));
    let state_b = state_b.unwrap_or_else(|e| panic!("{e}\n{}", f.moto.log_text()));
    assert_ne!(state_a.id, state_b.id);

    // Each lab has its own 7 resources, tagged with its own id, and the
    // two sets are disjoint: 14 under the shared name.
    let res_a = with_id(&f.client, &state_a.id).await;
    let res_b = with_id(&f.client, &state_b.id).await;
    assert_eq!(res_a.len(), 7, "{res_a:?}");
    assert_eq!(res_b.len(), 7, "{res_b:?}");
    assert!(res_a.iter().all(|r| !res_b.contains(r)), "shared: {res_a:?} {res_b:?}");
    assert_eq!(tagged(&f.client, "shared").await.len(), 14);
    // What each state records is its own lab's, not the other's.
    let aws_a = AwsState::from_lab_state(&state_a).unwrap();
    let aws_b = AwsState::from_lab_state(&state_b).unwrap();
    for (aws, own) in [(&aws_a, &res_a), (&aws_b, &res_b)] {
        let mut instances: Vec<&str> = aws.instances.values().map(String::as_str).collect();
        instances.sort();
        assert_eq!(instances, of_kind(own, "instance"));
        assert_eq!(of_kind(own, "key-pair"), vec![aws.key_name.as_deref().unwrap()]);
        assert_eq!(
            of_kind(own, "security-group"),
            vec![aws.security_group_id.as_deref().unwrap()]
        );
        assert_eq!(of_kind(own, "vpc"), vec![aws.vpc_id.as_deref().unwrap()]);
    }
    // The names EC2 keeps unique carry the id.
    let (key_a, group_a) = names(&f.client, &aws_a).await;
    let (key_b, group_b) = names(&f.client, &aws_b).await;
    assert_eq!(key_a, format!("labctl-shared-{}", state_a.id));
    assert_eq!(group_a, format!("labctl-shared-{}", state_a.id));
    assert_eq!(key_b, format!("labctl-shared-{}", state_b.id));
    assert_eq!(group_b, format!("labctl-shared-{}", state_b.id));

    // A repeated create of lab A (its state kept) reuses A's and only A's.
    let again = f.provider(&a.spec);
    let mut state = state_a.clone();
    again
        .create(
            &a.spec,
            &a.spec.resolve_nodes(),
            &a.dir,
            &mut state,
            &common::node_keys(&a.spec),
            &Silent,
        )
        .await
        .unwrap();
    assert_eq!(AwsState::from_lab_state(&state).unwrap(), aws_a);
    assert_eq!(with_id(&f.client, &state_a.id).await, res_a);
    assert_eq!(with_id(&f.client, &state_b.id).await, res_b);

    // `down` of A: all of A goes, every resource of B stays, and B's nodes
    // still run.
    f.provider(&a.spec).delete(&a.dir, Some(&state_a)).await.unwrap();
    assert_eq!(with_id(&f.client, &state_a.id).await, vec![]);
    assert_eq!(with_id(&f.client, &state_b.id).await, res_b);
    assert_eq!(tagged(&f.client, "shared").await, res_b);
    let provider_b = f.provider(&b.spec);
    for node in ["server", "client"] {
        provider_b.check_alive(&b.dir, &state_b, node).await.unwrap();
    }
    provider_b.delete(&b.dir, Some(&state_b)).await.unwrap();
    assert_eq!(tagged(&f.client, "shared").await, vec![]);
}

#[tokio::test]
async fn test_delete_with_the_state_lost_goes_by_the_registry_never_by_name() {
    let f = Fixture::new("lost").await;
    let a = f.project("project-a", "twin");
    let b = f.project("project-b", "twin");
    let state_a = f.create(&a).await.unwrap();
    let state_b = f.create(&b).await.unwrap();
    let res_b = with_id(&f.client, &state_b.id).await;

    // A's state.json is gone: its id comes from the registry entry for A's
    // state directory; B, of the same name, is untouched.
    std::fs::remove_file(a.dir.root().join("state.json")).unwrap();
    assert!(a.dir.load().unwrap().is_none());
    f.provider(&a.spec).delete(&a.dir, None).await.unwrap();
    assert_eq!(with_id(&f.client, &state_a.id).await, vec![]);
    assert_eq!(tagged(&f.client, "twin").await, res_b);

    // With neither state nor registry entry, nothing is known to be the
    // lab's: nothing is deleted (`down --leaked` lists what is left, by id).
    let empty_registry = f.base.join("no-registry");
    AwsProvider::with_client(f.client.clone(), b.spec.aws.clone(), b.spec.fabric)
        .with_waits(fast())
        .with_registry(&empty_registry)
        .delete(&b.dir, None)
        .await
        .unwrap();
    assert_eq!(tagged(&f.client, "twin").await, res_b);
    f.provider(&b.spec).delete(&b.dir, Some(&state_b)).await.unwrap();
    assert_eq!(tagged(&f.client, "twin").await, vec![]);
}

#[tokio::test]
async fn test_a_state_without_an_id_creates_nothing_and_deletes_only_what_it_recorded() {
    let f = Fixture::new("noid").await;
    let old = f.project("project-old", "legacy");
    let live = f.project("project-live", "legacy");
    let live_state = f.create(&live).await.unwrap();
    let res_live = with_id(&f.client, &live_state.id).await;

    // `create` refuses a state without an id before it creates anything.
    let mut state = LabState::new("legacy", "aws", "rxe");
    state.id.clear();
    let err = f
        .provider(&old.spec)
        .create(
            &old.spec,
            &old.spec.resolve_nodes(),
            &old.dir,
            &mut state,
            &common::node_keys(&old.spec),
            &Silent,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lab `legacy` has no id"), "{err}");
    assert_eq!(tagged(&f.client, "legacy").await, res_live);

    // An older labctl's state (no id) recording one key pair of its own:
    // `delete` removes exactly that, and nothing of the live lab of the
    // same name.
    let key = "labctl-legacy";
    f.client
        .import_key_pair()
        .key_name(key)
        .public_key_material(aws_sdk_ec2::primitives::Blob::new(common::LOGIN_KEY.as_bytes()))
        .tag_specifications(old_tags(ResourceType::KeyPair, "legacy"))
        .send()
        .await
        .unwrap();
    state.provider_state = serde_json::to_value(AwsState {
        region: REGION.into(),
        key_name: Some(key.into()),
        ..AwsState::default()
    })
    .unwrap();
    f.provider(&old.spec).delete(&old.dir, Some(&state)).await.unwrap();
    assert_eq!(tagged(&f.client, "legacy").await, res_live);
    f.provider(&live.spec)
        .delete(&live.dir, Some(&live_state))
        .await
        .unwrap();
    assert_eq!(tagged(&f.client, "legacy").await, vec![]);
}

/// The tags an older labctl put on its resources: lab, owner, creation
/// time, no lab id.
fn old_tags(kind: ResourceType, lab: &str) -> TagSpecification {
    let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
    TagSpecification::builder()
        .resource_type(kind)
        .tags(tag("labctl:lab", lab))
        .tags(tag("labctl:owner", &lab_providers::aws::default_owner()))
        .tags(tag("labctl:created", "2026-01-01T00:00:00Z"))
        .build()
}

#[tokio::test]
async fn test_leaked_deletes_a_resource_without_a_lab_id_only_when_named() {
    let f = Fixture::new("idless").await;
    // A leaked lab (state directory removed by hand) and a live lab, both
    // named `old`, and two id-less resources of an older labctl's `old`.
    let gone = f.project("project-gone", "old");
    let live = f.project("project-live", "old");
    let gone_state = f.create(&gone).await.unwrap();
    let live_state = f.create(&live).await.unwrap();
    let res_live = with_id(&f.client, &live_state.id).await;
    std::fs::remove_dir_all(gone.dir.root()).unwrap();
    let vpc = f
        .client
        .create_vpc()
        .cidr_block("10.99.0.0/16")
        .tag_specifications(old_tags(ResourceType::Vpc, "old"))
        .send()
        .await
        .unwrap()
        .vpc()
        .unwrap()
        .vpc_id()
        .unwrap()
        .to_string();
    let key = "labctl-old";
    f.client
        .import_key_pair()
        .key_name(key)
        .public_key_material(aws_sdk_ec2::primitives::Blob::new(common::LOGIN_KEY.as_bytes()))
        .tag_specifications(old_tags(ResourceType::KeyPair, "old"))
        .send()
        .await
        .unwrap();

    // Live is what the registry says is live; everything else is listed.
    let registry = f.registry();
    let known = |l: &Leftover| {
        l.lab_id
            .as_deref()
            .is_some_and(|id| lab_state::live_labs::is_live_in(&registry, id))
    };
    let owner = lab_providers::aws::default_owner();
    let scan = scan_leaked(f.client.clone(), &owner, known).await.unwrap();
    let id_less: Vec<(&str, &str)> = scan.id_less().map(|l| (l.kind, l.id.as_str())).collect();
    assert_eq!(
        id_less,
        vec![("key-pair", key), ("vpc", vpc.as_str())],
        "{:?}",
        scan.leftovers
    );
    assert_eq!(
        scan.leftovers.len(),
        9,
        "the leaked lab's 7 and the 2 id-less: {:?}",
        scan.leftovers
    );

    // Not named: the leaked lab goes (by its id), the id-less two and the
    // live lab of the same name stay.
    let deleted = scan.delete(fast(), &[]).await.unwrap();
    assert_eq!(deleted.len(), 7);
    assert!(deleted
        .iter()
        .all(|l| l.lab_id.as_deref() == Some(gone_state.id.as_str())));
    assert_eq!(with_id(&f.client, &gone_state.id).await, vec![]);
    assert_eq!(with_id(&f.client, &live_state.id).await, res_live);
    let mut left = tagged(&f.client, "old").await;
    left.retain(|r| !res_live.contains(r));
    assert_eq!(left, vec![("key-pair", key.to_string()), ("vpc", vpc.clone())]);

    // Named: exactly the one named goes.
    let scan = scan_leaked(f.client.clone(), &owner, known).await.unwrap();
    assert_eq!(scan.leftovers.len(), 2, "{:?}", scan.leftovers);
    let deleted = scan.delete(fast(), std::slice::from_ref(&vpc)).await.unwrap();
    assert_eq!(
        deleted.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        vec![vpc.as_str()]
    );
    let mut left = tagged(&f.client, "old").await;
    left.retain(|r| !res_live.contains(r));
    assert_eq!(left, vec![("key-pair", key.to_string())]);
    assert_eq!(with_id(&f.client, &live_state.id).await, res_live);

    let scan = scan_leaked(f.client.clone(), &owner, known).await.unwrap();
    scan.delete(fast(), &[key.to_string()]).await.unwrap();
    assert_eq!(tagged(&f.client, "old").await, res_live);
    f.provider(&live.spec)
        .delete(&live.dir, Some(&live_state))
        .await
        .unwrap();
    assert_eq!(tagged(&f.client, "old").await, vec![]);
}
