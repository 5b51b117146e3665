//! cloud-init user-data shared by the cloud providers (Multipass, AWS): the
//! node's SSH host key, given by labctl instead of generated on first boot.

use serde_yaml_ng::{Mapping, Value};

use crate::HostKeyPair;

/// The first line cloud-init requires of a `#cloud-config` document.
pub const HEADER: &str = "#cloud-config\n";

/// Adds the node's host key to a cloud-config document: `ssh_keys` replaces
/// the image's keys with labctl's ed25519 pair, and `ssh_genkeytypes: []`
/// stops cloud-init from generating others, so sshd presents only the key
/// labctl pinned before the first connection.
pub fn add_host_key(doc: &mut Mapping, host_key: &HostKeyPair) {
    let mut keys = Mapping::new();
    keys.insert(
        "ed25519_private".into(),
        format!("{}\n", host_key.private_openssh.trim()).into(),
    );
    keys.insert("ed25519_public".into(), host_key.public.trim().into());
    doc.insert("ssh_deletekeys".into(), true.into());
    doc.insert("ssh_keys".into(), Value::Mapping(keys));
    doc.insert("ssh_genkeytypes".into(), Value::Sequence(Vec::new()));
}

/// The document as user-data: the header, then YAML.
pub fn render(doc: &Mapping) -> String {
    let body = serde_yaml_ng::to_string(doc).expect("a YAML mapping of strings serialises");
    format!("{HEADER}{body}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A real ed25519 pair (generated for these tests only).
    pub(crate) fn test_host_key() -> HostKeyPair {
        HostKeyPair {
            private_openssh: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACDAejpEQkP/aJ4+vmz+MBbrSgFMvKsT92JYc3Y4rAEXKgAAAJAkRhbeJEYW\n3gAAAAtzc2gtZWQyNTUxOQAAACDAejpEQkP/aJ4+vmz+MBbrSgFMvKsT92JYc3Y4rAEXKg\nAAAECGWJlpAkiIX1x0nQlosRrVEWNlOtlqhjJYOGapAsaQI8B6OkRCQ/9onj6+bP4wFutK\nAUy8qxP3YlhzdjisARcqAAAAB2V4YW1wbGUBAgMEBQY=\n-----END OPENSSH PRIVATE KEY-----\n".into(),
            public: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMB6OkRCQ/9onj6+bP4wFutKAUy8qxP3YlhzdjisARcq".into(),
        }
    }

    #[test]
    fn test_host_key_is_where_cloud_init_reads_it_and_no_other_is_generated() {
        let mut doc = Mapping::new();
        doc.insert("hostname".into(), "server".into());
        add_host_key(&mut doc, &test_host_key());
        let text = render(&doc);
        assert!(text.starts_with("#cloud-config\n"));
        let back: Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back["hostname"].as_str(), Some("server"));
        let private = back["ssh_keys"]["ed25519_private"].as_str().unwrap();
        assert!(private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert!(private.ends_with("-----END OPENSSH PRIVATE KEY-----\n"));
        assert_eq!(
            back["ssh_keys"]["ed25519_public"].as_str(),
            Some(test_host_key().public.as_str())
        );
        assert_eq!(back["ssh_genkeytypes"].as_sequence().map(Vec::len), Some(0));
        assert_eq!(back["ssh_deletekeys"].as_bool(), Some(true));
    }
}
