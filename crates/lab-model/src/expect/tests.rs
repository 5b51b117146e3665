use std::path::Path;

use super::*;
use crate::labs::LabsFile;

/// A lab whose `expect:` block is `body` (each line indented under it);
/// its first line is line 4 of the file.
fn lab_expecting(body: &str) -> Result<LabsFile, String> {
    let mut text = String::from("labs:\n  - name: a\n    expect:\n");
    for line in body.lines() {
        text.push_str(&format!("      {line}\n"));
    }
    text.push_str("    nodes:\n      - name: x\n");
    LabsFile::parse(Path::new("labs.yaml"), &text).map_err(|e| e.to_string())
}

#[test]
fn test_expectations_are_read_with_their_units_and_defaults() {
    let f = lab_expecting(
        "write-bw: {size: 64KiB, min: 90Gb/s}\nwrite-lat: {size: 8, max: 3us}\nread-bw: {min: 800MiB/s}\n\
         allreduce: {size: 1MiB, min: 12.5GB/s}\nsend-recv: {min: 1Gbps, max: 1.5ms}\n\
         devices: 4\nlink_rate: 100Gb/s\nmtu: 4096\nfi_provider: verbs;ofi_rxm",
    )
    .unwrap();
    let e = &f.labs[0].expect;
    assert_eq!(e.devices, Some(4));
    assert_eq!(e.mtu, Some(4096));
    assert_eq!(e.fi_provider.as_deref(), Some("verbs;ofi_rxm"));
    assert_eq!(e.link_rate.as_ref().unwrap().bits_per_s, 100_000_000_000);
    let names: Vec<&str> = e.workloads.iter().map(|w| w.workload.as_str()).collect();
    assert_eq!(names, ["write-bw", "write-lat", "read-bw", "allreduce", "send-recv"]);
    let w = &e.workloads;
    assert_eq!(
        (w[0].size, w[0].min.as_ref().unwrap().bits_per_s),
        (65536, 90_000_000_000)
    );
    assert_eq!((w[1].size, w[1].max.as_ref().unwrap().ns), (8, 3_000));
    // read-bw's size is the catalogue's default; MiB/s are binary bytes.
    assert_eq!(w[2].size, workload_catalogue::find("read-bw").unwrap().defaults.size);
    assert_eq!(w[2].min.as_ref().unwrap().bits_per_s, 800 * 8 * (1 << 20));
    assert_eq!(w[3].min.as_ref().unwrap().bits_per_s, 100_000_000_000);
    assert_eq!(w[4].max.as_ref().unwrap().ns, 1_500_000);
    // Written out as read, and read back the same.
    let json = serde_json::to_value(&f.labs[0]).unwrap();
    assert_eq!(json["expect"]["write-bw"]["min"], "90Gb/s");
    assert_eq!(json["expect"]["read-bw"]["size"], 65536);
    let back: crate::labs::LabSpec = serde_json::from_value(json).unwrap();
    assert_eq!(&back, &f.labs[0]);
    // A lab that expects nothing writes no `expect`.
    let plain = LabsFile::parse(
        Path::new("labs.yaml"),
        "labs:\n  - name: a\n    nodes:\n      - name: x\n",
    )
    .unwrap();
    assert!(plain.labs[0].expect.is_empty());
    assert!(serde_json::to_value(&plain.labs[0]).unwrap().get("expect").is_none());
}

#[test]
fn test_bad_expectations_are_refused_where_they_stand_with_a_fix() {
    let cases: &[(&str, &str, &str)] = &[
        // (expect body, located message, fix)
        (
            "write-bw: {size: 64KiB, min: 90}",
            "labs.yaml:4:36: ",
            "min has no unit",
        ),
        (
            "write-bw: {min: 90Gb}",
            "labs.yaml:4:23: ",
            "`Gb` is not a unit of rate",
        ),
        ("write-lat: {max: 3}", "labs.yaml:4:24: ", "max has no unit"),
        (
            "write-lat: {max: 3 parsecs}",
            "labs.yaml:4:24: ",
            "`parsecs` is not a unit of time",
        ),
        (
            "write-lat: {min: 1Gb/s}",
            "labs.yaml:4:18: ",
            "write-lat measures latency, not bandwidth",
        ),
        (
            "write-bw: {max: 3us}",
            "labs.yaml:4:17: ",
            "write-bw measures bandwidth, not latency",
        ),
        (
            "write-bw: {size: 64KiB}",
            "labs.yaml:4:17: ",
            "write-bw expects nothing: give min or max",
        ),
        (
            "write-bw: {size: 0, min: 1Gb/s}",
            "labs.yaml:4:24: ",
            "size 0 is out of range",
        ),
        ("write-bw: {speed: 1Gb/s}", "labs.yaml:4:18: ", "unknown field `speed`"),
        ("wirte-bw: {min: 1Gb/s}", "labs.yaml:4:7: ", "write `write-bw`"),
        ("write-bw: [1Gb/s]", "labs.yaml:4:17: ", "write-bw"),
        ("mtu: 1500", "labs.yaml:4:12: ", "1500 is not an RDMA port MTU"),
        ("devices: 0", "labs.yaml:4:16: ", "0 is out of range (1..=64)"),
        ("link_rate: fast", "labs.yaml:4:18: ", "`fast` is not a rate"),
        (
            "fi_provider: 'tcp;'",
            "labs.yaml:4:20: ",
            "fi_provider must be a provider's name",
        ),
        ("mtus: 4096", "labs.yaml:4:7: ", "write `mtu`"),
    ];
    for (body, at, says) in cases {
        let err = lab_expecting(body).expect_err(body);
        assert!(err.starts_with(at), "{body}: {err}");
        assert!(err.contains(says), "{body}: {err}");
        assert!(err.contains("\n  fix: "), "{body}: {err}");
    }
}

#[test]
fn test_rates_and_latencies_parse_in_every_unit_and_show_in_theirs() {
    for (text, bits) in [
        ("1b/s", 1u64),
        ("25Gbps", 25_000_000_000),
        ("25 Gbit/s", 25_000_000_000),
        ("1.5KB/s", 12_000),
        ("2GiB/s", 16 << 30),
        ("1Tb/s", 1_000_000_000_000),
    ] {
        let r: Rate = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(r.bits_per_s, bits, "{text}");
    }
    let r: Rate = "90Gb/s".parse().unwrap();
    assert!((r.in_unit(11.2e9) - 11.2).abs() < 1e-9);
    for bad in ["", "Gb/s", "-1Gb/s", "0Gb/s", "1 gb/s", "1e3Gb/s"] {
        assert!(bad.parse::<Rate>().is_err(), "{bad:?} parsed");
    }
    let l: Latency = "3µs".parse().unwrap();
    assert_eq!((l.ns, l.unit), (3_000, "µs"));
    assert!((l.in_unit(4.5) - 4.5).abs() < 1e-9);
    let l: Latency = "1.5ms".parse().unwrap();
    assert!((l.us() - 1500.0).abs() < 1e-9 && (l.in_unit(750.0) - 0.75).abs() < 1e-9);
    for bad in ["3", "us", "0.1ns", "2h"] {
        assert!(bad.parse::<Latency>().is_err(), "{bad:?} parsed");
    }
}

#[test]
fn test_a_suites_expectations_go_over_its_labs() {
    let lab = lab_expecting("write-bw: {size: 64KiB, min: 1Gb/s}\nwrite-lat: {max: 1ms}\nmtu: 1024").unwrap();
    let suite = lab_expecting("write-bw: {size: 64KiB, min: 2Gb/s}\nread-bw: {min: 1Mb/s}\nmtu: 4096").unwrap();
    let both = lab.labs[0].expect.overlaid(&suite.labs[0].expect);
    let names: Vec<(&str, String)> = both
        .workloads
        .iter()
        .map(|w| {
            (
                w.workload.as_str(),
                w.min.as_ref().map(|r| r.text.clone()).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("write-lat", String::new()),
            ("write-bw", "2Gb/s".into()),
            ("read-bw", "1Mb/s".into())
        ]
    );
    assert_eq!(both.mtu, Some(4096));
}

#[test]
fn test_an_expectations_file_is_read_with_located_errors() {
    let dir = std::env::temp_dir().join(format!("expect-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.yaml");
    std::fs::write(
        &good,
        "# thresholds of a 100G RoCE pair\nwrite-bw: {size: 64KiB, min: 90Gb/s}\nmtu: 4096\n",
    )
    .unwrap();
    let e = Expectations::load(&good).unwrap();
    assert_eq!((e.workloads.len(), e.mtu), (1, Some(4096)));
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "write-bw: {size: 64KiB, min: 90Gb/s}\nwrite-lat: {max: 3}\n").unwrap();
    let err = Expectations::load(&bad).unwrap_err();
    assert!(err.starts_with(&format!("{}:2:18: ", bad.display())), "{err}");
    assert!(err.contains("max has no unit") && err.contains("\n  fix: "), "{err}");
    let err = Expectations::load(&dir.join("missing.yaml")).unwrap_err();
    assert!(err.contains("cannot read the expectations file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
