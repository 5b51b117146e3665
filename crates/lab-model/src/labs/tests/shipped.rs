//! What the repository ships beside the model: the JSON schema, the
//! example labs.yaml, and the examples in the reference and provider docs.

use std::path::{Path, PathBuf};

use super::*;

/// `rel` in the repository: the first ancestor of this crate holding it,
/// else the first holding a `docs` directory.
fn repo_file(rel: &str) -> PathBuf {
    let start = Path::new(env!("CARGO_MANIFEST_DIR"));
    start
        .ancestors()
        .map(|d| d.join(rel))
        .find(|p| p.exists())
        .or_else(|| start.ancestors().find(|d| d.join("docs").is_dir()).map(|d| d.join(rel)))
        .unwrap_or_else(|| start.join("../..").join(rel))
}

#[test]
fn test_shipped_schema_matches_the_model() {
    let path = repo_file("docs/labs.schema.json");
    let want = format!("{}\n", serde_json::to_string_pretty(&json_schema()).unwrap());
    if std::env::var_os("LABCTL_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is out of date with the model; regenerate it with:\n  LABCTL_BLESS=1 cargo test -p lab-model labs::tests::shipped::test_shipped_schema_matches_the_model",
        path.display()
    );
}

#[test]
fn test_schema_describes_the_format() {
    let s = json_schema();
    let lab = &s["$defs"]["LabSpec"];
    assert_eq!(lab["additionalProperties"], false);
    assert_eq!(s["required"], serde_json::json!(["labs"]));
    let provider = serde_json::to_string(&s["$defs"]["ProviderKind"]).unwrap();
    assert!(provider.contains("multipass"), "{provider}");
    // A step's workload is one of the catalogue's (pairs and
    // collectives), for editors to offer.
    let workload = &s["$defs"]["SuiteStep"]["properties"]["workload"];
    let all: Vec<&str> = workload_catalogue::CATALOGUE.iter().map(|w| w.name).collect();
    assert!(all.contains(&"write-read") && all.contains(&"allreduce"));
    assert_eq!(workload["enum"], serde_json::json!(all), "{workload}");
}

#[test]
fn test_repo_labs_yaml_is_valid() {
    let path = repo_file("labs.yaml");
    let f = LabsFile::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.names(), ["local", "quad"]);
    let local = f.select(None).unwrap();
    let names: Vec<&str> = local.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["server", "client"]);
    assert_eq!((local.provider, local.fabric), (ProviderKind::Qemu, Fabric::Rxe));
    let quad = f.select(Some("quad")).unwrap();
    let names: Vec<String> = quad.resolve_nodes().into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["n1", "n2", "n3", "n4"]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# yaml-language-server: $schema=docs/labs.schema.json"));
}

#[test]
fn test_examples_in_the_reference_are_valid() {
    let path = repo_file("docs/labs-yaml.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut checked = 0;
    for block in text.split("```yaml\n").skip(1) {
        let block = block.split("```").next().unwrap();
        if block.lines().any(|l| l == "labs:") {
            if let Err(e) = LabsFile::parse(&path, block) {
                panic!("an example in {} does not parse:\n{block}\n{e}", path.display());
            }
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} examples found");
}

#[test]
fn test_aws_example_in_the_provider_doc_is_valid() {
    let path = repo_file("docs/providers/aws.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let block = text.split("```yaml\n").nth(1).unwrap().split("```").next().unwrap();
    let f = LabsFile::parse(&path, block).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.names(), ["efa-pair", "cloud-rxe"]);
    assert!(f
        .labs
        .iter()
        .all(|l| l.provider == ProviderKind::Aws && l.aws.is_some()));
}
