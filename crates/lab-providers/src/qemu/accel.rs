//! Which accelerator a node's QEMU runs with: KVM where it works, TCG
//! (software emulation) otherwise, and why.

use std::fs;
use std::path::Path;

use lab_model::Accel;

/// Which accelerator to use and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccelChoice {
    /// `kvm` or `tcg`.
    pub accel: &'static str,
    /// Why it was chosen, for the log.
    pub reason: String,
}

/// Picks KVM when it is requested or usable, else TCG. `LABCTL_ACCEL`
/// (kvm|tcg) overrides labs.yaml.
///
/// `/dev/kvm` alone is not enough: some hosts back it with `kvm_pvm`, under
/// which a stock guest kernel hangs at boot. KVM counts as usable only with
/// `kvm_intel` or `kvm_amd` loaded.
pub fn choose_accel(requested: Accel) -> AccelChoice {
    let env = std::env::var("LABCTL_ACCEL").ok();
    let (requested, source) = match env.as_deref() {
        Some("kvm") => (Accel::Kvm, "LABCTL_ACCEL"),
        Some("tcg") => (Accel::Tcg, "LABCTL_ACCEL"),
        Some("auto") => (Accel::Auto, "LABCTL_ACCEL"),
        Some(other) => {
            tracing::warn!(value = other, "LABCTL_ACCEL must be kvm, tcg or auto; using labs.yaml");
            (requested, "labs.yaml")
        }
        None => (requested, "labs.yaml"),
    };
    match requested {
        Accel::Kvm => AccelChoice {
            accel: "kvm",
            reason: format!("kvm requested in {source}"),
        },
        Accel::Tcg => AccelChoice {
            accel: "tcg",
            reason: format!("tcg requested in {source}"),
        },
        Accel::Auto => detect_kvm(Path::new("/dev/kvm"), Path::new("/sys/module")),
    }
}

fn detect_kvm(dev: &Path, modules: &Path) -> AccelChoice {
    let tcg = |reason: String| AccelChoice { accel: "tcg", reason };
    if !dev.exists() {
        return tcg("no /dev/kvm; using TCG software emulation".into());
    }
    if fs::OpenOptions::new().read(true).write(true).open(dev).is_err() {
        return tcg("/dev/kvm is not accessible; using TCG software emulation".into());
    }
    for module in ["kvm_intel", "kvm_amd"] {
        if modules.join(module).exists() {
            return AccelChoice {
                accel: "kvm",
                reason: format!("/dev/kvm with {module}"),
            };
        }
    }
    let backend = ["kvm_pvm"]
        .iter()
        .find(|m| modules.join(m).exists())
        .map_or("an unknown backend".to_string(), |m| m.to_string());
    tcg(format!(
        "/dev/kvm is backed by {backend}, not kvm_intel/kvm_amd (guests hang there); using TCG. Set accel: kvm to force"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_kvm_needs_a_real_backend() {
        let tmp = std::env::temp_dir().join(format!("labctl-kvm-test-{}", std::process::id()));
        let modules = tmp.join("module");
        fs::create_dir_all(&modules).unwrap();
        let dev = tmp.join("kvm");
        assert_eq!(detect_kvm(&dev, &modules).accel, "tcg");
        fs::write(&dev, b"").unwrap();
        fs::create_dir_all(modules.join("kvm_pvm")).unwrap();
        let choice = detect_kvm(&dev, &modules);
        assert_eq!(choice.accel, "tcg");
        assert!(choice.reason.contains("kvm_pvm"), "{}", choice.reason);
        fs::create_dir_all(modules.join("kvm_intel")).unwrap();
        assert_eq!(detect_kvm(&dev, &modules).accel, "kvm");
        fs::remove_dir_all(tmp).unwrap();
    }
}
