//! First-use errors as a person sees them: what, why and the fix, without a
//! library's debug output, log noise or colour codes in a pipe.

use std::process::Command;

#[test]
fn test_missing_aws_credentials_are_two_plain_lines() {
    let dir = std::env::temp_dir().join(format!("labctl-nocreds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("labs.yaml");
    std::fs::write(
        &file,
        "labs:\n  - name: aw\n    provider: aws\n    aws:\n      region: us-east-1\n      instance_type: m5.large\n      ami: ami-12345678\n    nodes: [{name: s}, {name: c}]\n",
    )
    .unwrap();
    // Every credential source empty or switched off; nothing reaches AWS.
    let out = Command::new(env!("CARGO_BIN_EXE_labctl"))
        .arg("-f")
        .arg(&file)
        .arg("up")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &dir)
        .env("LABCTL_STATE_DIR", dir.join("state"))
        .env("XDG_STATE_HOME", dir.join("xdg"))
        .env("AWS_CONFIG_FILE", dir.join("none"))
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("none"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].starts_with("error: no usable AWS credentials: "), "{stderr}");
    assert!(lines[0].contains("(tried: Environment, Profile"), "{stderr}");
    assert!(lines[1].starts_with("  fix: set AWS_ACCESS_KEY_ID"), "{stderr}");
    // No SDK log line, no Debug dump of its error structs, no ANSI escape.
    assert!(
        !stderr.contains("WARN") && !stderr.contains("CredentialsNotLoaded {"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

#[test]
fn test_a_trace_ring_out_of_range_is_refused_before_any_lab_is_read() {
    for events in ["0", "1048577"] {
        let out = Command::new(env!("CARGO_BIN_EXE_labctl"))
            .args(["-f", "/nonexistent/labs.yaml", "run", "write-read", "--trace", "t.json"])
            .args(["--trace-events", events])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        // clap names the option and the range; the missing labs file is not
        // reached, nor is the trace file created.
        assert!(
            stderr.contains("--trace-events <N>") && stderr.contains("1..=1048576"),
            "{stderr}"
        );
        assert!(!stderr.contains("labs.yaml"), "{stderr}");
    }
}

#[test]
fn test_bench_sizes_take_units_and_are_refused_out_of_range_before_any_lab_is_read() {
    let bench = |sizes: &str| {
        Command::new(env!("CARGO_BIN_EXE_labctl"))
            .args([
                "-f",
                "/nonexistent/labs.yaml",
                "bench",
                "--suite",
                "collectives",
                "--sizes",
                sizes,
            ])
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    for (sizes, says) in [
        ("8,0", "0 B is not in 1 B ..= 64 MiB"),
        ("65MiB", "68157440 B is not in"),
        ("8,4 parsecs", "is not a size"),
    ] {
        let out = bench(sizes);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--sizes <SIZES>") && stderr.contains(says), "{stderr}");
        assert!(!stderr.contains("labs.yaml"), "{stderr}");
    }
    // Sizes with units are read; the missing labs file is what stops it.
    let out = bench("8,64KiB,1MiB");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("labs.yaml") && !stderr.contains("--sizes"), "{stderr}");
}
