//! The lab's `packages:` on a node: checked when the image has them,
//! installed with apt-get when not, and a failure explained by its cause.

use lab_remote::command::RemoteCommand;
use lab_remote::ssh::SshSession;
use lab_state::progress::Reporter;
use lab_state::NodeState;

use super::error::ProvisionError;
use super::privilege::as_root;

/// Checks or installs the lab's `packages:`; run with `sh -c` (see
/// [`ensure_packages`]).
pub const PACKAGES: &str = include_str!("../../../../provisioning/node/packages.sh");

/// Makes sure `packages` are installed on the node: with `in_image`, checks
/// that the image has them; otherwise installs the missing ones with apt-get
/// (as root, non-interactively). The script's `packages: ...` lines are
/// reported as notes of the node; a failure quotes apt's own error lines.
pub async fn ensure_packages(
    session: &SshSession,
    node: &NodeState,
    packages: &[String],
    in_image: bool,
    reporter: &dyn Reporter,
) -> Result<(), ProvisionError> {
    let mode = if in_image { "check" } else { "install" };
    let command = as_root(
        node,
        RemoteCommand::script_with(
            PACKAGES,
            std::iter::once(mode).chain(packages.iter().map(String::as_str)),
        ),
    );
    let mut stdout_line = Vec::new();
    let mut stderr = Vec::new();
    let status = session
        .exec_streaming(&command, None, |is_err, data| {
            if is_err {
                stderr.extend_from_slice(data);
                return;
            }
            for &byte in data {
                if byte != b'\n' {
                    stdout_line.push(byte);
                    continue;
                }
                let line = String::from_utf8_lossy(&stdout_line).into_owned();
                if let Some(said) = line.strip_prefix("packages: ") {
                    reporter.note(&node.name, &format!("packages: {said}"));
                }
                stdout_line.clear();
            }
        })
        .await?;
    if status == 0 {
        return Ok(());
    }
    Err(packages_failure(
        &node.name,
        status,
        &String::from_utf8_lossy(&stderr),
        packages,
    ))
}

/// The error of a failed `packages.sh`: by its exit status, with apt's `E:`
/// lines (else the end of what it printed).
fn packages_failure(node: &str, status: i32, stderr: &str, packages: &[String]) -> ProvisionError {
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("E: ")).collect();
    let said = if errors.is_empty() {
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    } else {
        errors.join("\n")
    };
    let names = packages.join(", ");
    let (message, fix) = match status {
        30 => (
            format!("the node image lacks packages of labs.yaml: {said}"),
            "`packages:` changed since this lab came up: run `labctl down` and `labctl up`, which boots an image with them".to_string(),
        ),
        31 => (
            format!("cannot install packages: {said}"),
            "`packages:` works on Debian and Ubuntu images only; use one, or remove `packages:`".to_string(),
        ),
        32 => (
            format!("`apt-get update` failed:\n{said}"),
            "check that the node reaches its package mirror (`labctl exec NODE -- apt-get update`), then run `labctl up` again".to_string(),
        ),
        _ => (
            format!("installing packages ({names}) with apt-get failed (exit status {status}):\n{said}"),
            format!("check the names in `packages:` of labs.yaml ({names}) against the node's distribution: `labctl exec NODE -- apt-cache policy NAME` shows whether it has a package (Debian and Ubuntu name some packages differently)"),
        ),
    };
    ProvisionError::Packages {
        node: node.to_string(),
        message,
        fix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn test_a_failed_install_quotes_apt_s_own_error() {
        // What packages.sh printed on stderr on a Debian 12 node asked for
        // `hello labctl-no-such-package` (apt 2.6).
        let stderr = "Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\n\
                      Fetched 15.8 MB in 23s (683 kB/s)\n\
                      Reading package lists...\n\
                      Building dependency tree...\n\
                      Reading state information...\n\
                      E: Unable to locate package labctl-no-such-package\n";
        let packages = names(&["hello", "labctl-no-such-package"]);
        let err = packages_failure("client", 33, stderr, &packages);
        assert_eq!(
            err.to_string(),
            "node `client`: installing packages (hello, labctl-no-such-package) with apt-get failed (exit status 33):\n\
             E: Unable to locate package labctl-no-such-package\n  \
             fix: check the names in `packages:` of labs.yaml (hello, labctl-no-such-package) against the node's distribution: \
             `labctl exec NODE -- apt-cache policy NAME` shows whether it has a package (Debian and Ubuntu name some packages differently)"
        );
    }

    #[test]
    fn test_each_way_packages_fail_has_its_own_fix() {
        let packages = names(&["gdb"]);
        let missing = packages_failure("server", 30, "not installed: gdb\n", &packages).to_string();
        assert!(
            missing.starts_with("node `server`: the node image lacks packages of labs.yaml: not installed: gdb\n"),
            "{missing}"
        );
        assert!(missing.contains("run `labctl down` and `labctl up`"), "{missing}");
        let no_apt = packages_failure(
            "server",
            31,
            "apt-get is missing: packages: needs a Debian or Ubuntu image\n",
            &packages,
        );
        assert!(no_apt.to_string().contains("Debian and Ubuntu images only"), "{no_apt}");
        // Without `E:` lines, the end of what the script printed.
        let update = packages_failure(
            "server",
            32,
            "Err:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving 'deb.debian.org'\n",
            &packages,
        )
        .to_string();
        assert!(
            update.contains("`apt-get update` failed:\nErr:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving"),
            "{update}"
        );
    }

    #[test]
    fn test_the_packages_script_checks_before_it_installs() {
        // On the controller itself (a Debian or Ubuntu host, as
        // provisioning/host/install-deps.sh requires): a package every such
        // host has is found, and one no distribution has is reported
        // missing, without apt being run (check mode).
        let run = |args: &[&str]| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(PACKAGES)
                .arg("sh")
                .args(args)
                .output()
                .unwrap()
        };
        let found = run(&["check", "dpkg"]);
        assert!(found.status.success(), "{found:?}");
        assert_eq!(String::from_utf8_lossy(&found.stdout), "packages: all 1 installed\n");
        let missing = run(&["check", "dpkg", "labctl-no-such-package"]);
        assert_eq!(missing.status.code(), Some(30));
        assert_eq!(
            String::from_utf8_lossy(&missing.stderr),
            "not installed: labctl-no-such-package\n"
        );
    }
}
