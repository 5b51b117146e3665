//! Values and their round trips: memory sizes, networks, the enums' YAML
//! names, and labs and resolved nodes through JSON.

use std::path::Path;

use super::*;

#[test]
fn test_memory_sizes() {
    let mib = |s: &str| s.parse::<MemorySize>().map(|m| m.mib());
    assert_eq!(mib("512MiB"), Ok(512));
    assert_eq!(mib("1GiB"), Ok(1024));
    assert_eq!(mib("1536M"), Ok(1536));
    assert_eq!(mib("2G"), Ok(2048));
    assert_eq!(mib("2gb"), Ok(2048));
    assert_eq!(mib("1.5GiB"), Ok(1536));
    assert_eq!(mib("768"), Ok(768));
    assert_eq!(mib(" 1 GiB "), Ok(1024));
    assert_eq!(mib("64GiB"), Ok(65536));
    assert!(mib("65GiB").is_err());
    assert!(mib("1T").is_err());
    assert!(mib("255M").is_err());
    assert!(mib("1..5G").is_err());
    assert!(mib("G").is_err());
    assert_eq!(MemorySize::from_mib(1024).bytes(), 1 << 30);
    assert_eq!(MemorySize::from_mib(1024).to_string(), "1GiB");
    assert_eq!(MemorySize::from_mib(1536).to_string(), "1536MiB");
}

#[test]
fn test_networks() {
    let n: Ipv4Network = "10.77.0.0/24".parse().unwrap();
    assert_eq!(n.host(0), Some(Ipv4Addr::new(10, 77, 0, 1)));
    assert_eq!(n.host(253), Some(Ipv4Addr::new(10, 77, 0, 254)));
    assert_eq!(n.host(254), None);
    assert_eq!(n.broadcast(), Ipv4Addr::new(10, 77, 0, 255));
    assert!(n.is_host(Ipv4Addr::new(10, 77, 0, 9)));
    assert!(!n.is_host(Ipv4Addr::new(10, 77, 0, 0)));
    assert!(!n.contains(Ipv4Addr::new(10, 77, 1, 1)));
    assert!(n.overlaps(&"10.0.0.0/8".parse().unwrap()));
    assert!(!n.overlaps(&QEMU_USER_NETWORK));
    assert!("10.77.0.1/24".parse::<Ipv4Network>().is_err());
}

#[test]
fn test_enums_round_trip_their_yaml_names() {
    for p in ProviderKind::ALL {
        assert_eq!(p.to_string().parse::<ProviderKind>(), Ok(*p));
    }
    for f in Fabric::ALL {
        assert_eq!(f.to_string().parse::<Fabric>(), Ok(*f));
    }
    for a in Accel::ALL {
        assert_eq!(a.to_string().parse::<Accel>(), Ok(*a));
    }
    assert_eq!(ProviderKind::Qemu.to_string(), "qemu");
    assert_eq!(Fabric::None.to_string(), "none");
    assert_eq!(serde_json::to_string(&Fabric::Efa).unwrap(), "\"efa\"");
}

#[test]
fn test_resolved_nodes_serialize() {
    let f = LabsFile::parse(Path::new("labs.yaml"), TWO_LABS).unwrap();
    let nodes = f.labs[0].resolve_nodes();
    let json = serde_json::to_string(&nodes).unwrap();
    assert!(json.contains("\"data_addr\":\"10.77.0.1\""), "{json}");
    let back: Vec<ResolvedNode> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, nodes);
    let lab = serde_json::to_value(&f.labs[1]).unwrap();
    assert_eq!(lab["data_network"], "192.168.7.0/29");
    assert_eq!(lab["nodes"][3]["memory"], "512MiB");
}

#[test]
fn test_lab_spec_round_trips_through_json() {
    let f = LabsFile::parse(Path::new("labs.yaml"), TWO_LABS).unwrap();
    for lab in &f.labs {
        let json = serde_json::to_string(lab).unwrap();
        let back: LabSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, lab, "{json}");
    }
}
