//! A lab's topology as a picture (`labctl graph`): one model, [`Topology`],
//! and three renderers: [`to_mermaid`] (for Markdown pages), [`to_dot`]
//! (Graphviz) and [`to_svg`], which lays the same DOT text out in pure Rust
//! with layout-rs, so no Graphviz install is needed.
//!
//! The model is filled by the orchestration crate, from what `labctl status`
//! reads off a running lab, or from labs.yaml alone when the lab is not up
//! ([`Source::Planned`]: nodes and addresses, devices unknown). This module
//! only renders: it reads no files and talks to nothing.

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use serde::Serialize;

mod fit;

/// Version of `labctl graph --json`.
pub const TOPOLOGY_SCHEMA: u32 = 1;

/// Where a topology's facts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Read from the running lab: its machines, agents and RDMA devices.
    Live,
    /// From labs.yaml alone: the lab is not up; devices, GIDs and agents
    /// are unknown.
    Planned,
}

/// A lab: its data network and the nodes on it.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    /// [`TOPOLOGY_SCHEMA`].
    pub schema: u32,
    /// The lab's name.
    pub lab: String,
    /// Its provider (`qemu`, `multipass`, `aws`).
    pub provider: String,
    /// Its fabric (`rxe`, `efa`, `none`).
    pub fabric: String,
    /// The data network, `ADDRESS/PREFIX`.
    pub data_network: String,
    /// Live or planned.
    pub source: Source,
    /// What the picture cannot show (planned: not up; live: a phase other
    /// than ready).
    pub note: Option<String>,
    /// The nodes, in labs.yaml order.
    pub nodes: Vec<TopologyNode>,
}

/// One node.
#[derive(Debug, Clone, Serialize)]
pub struct TopologyNode {
    /// Its name (hostname).
    pub name: String,
    /// Its data address, `ADDRESS/PREFIX`.
    pub data_addr: String,
    /// The data NIC inside the node (`eth1`), when known.
    pub netdev: Option<String>,
    /// The machine: `running`, `stopped: WHY`, or `planned`.
    pub machine: String,
    /// The node's agent.
    pub agent: AgentState,
    /// Every port of every RDMA device the agent reported.
    pub rdma: Vec<RdmaPort>,
}

/// A node's rdma-agent as the graph shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum AgentState {
    /// It answered `Health`.
    Up {
        /// Its version.
        version: String,
        /// Seconds since it started.
        uptime_s: u64,
    },
    /// It did not answer (or the node did not).
    Down {
        /// The first line of what failed.
        error: String,
    },
    /// Not known: the lab is not up.
    Unknown,
}

/// One port of an RDMA device.
#[derive(Debug, Clone, Serialize)]
pub struct RdmaPort {
    /// The device (`rxe0`).
    pub device: String,
    /// Its port number.
    pub port: u32,
    /// The Ethernet device under it (`eth1`).
    pub netdev: String,
    /// `PORT_ACTIVE`, ...
    pub state: String,
    /// The active MTU.
    pub active_mtu: u32,
    /// The index of the RoCE v2 GID of the node's data address (what the
    /// workloads use, as in the lab facts), when on this port.
    pub data_gid_index: Option<u32>,
    /// That GID, as the device reports it.
    pub data_gid: Option<String>,
    /// Every GID of the port: `INDEX GID TYPE`.
    pub gids: Vec<String>,
}

/// Why a topology could not be drawn as SVG.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// layout-rs could not read the DOT text labctl made (a defect here).
    #[error("laying out the graph: layout-rs could not parse the DOT text: {0}")]
    Layout(String),
}

impl Topology {
    /// The heading: lab, provider, fabric and where the facts come from.
    pub fn title(&self) -> String {
        let source = match self.source {
            Source::Live => "live",
            Source::Planned => "planned from labs.yaml, not up",
        };
        format!("lab {} ({}, {}): {source}", self.lab, self.provider, self.fabric)
    }
}

impl TopologyNode {
    /// The lines of its box: name, RDMA device and GID, agent.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.name.clone()];
        if self.machine != "running" && self.machine != "planned" {
            lines.push(format!("machine {}", self.machine));
        }
        if self.rdma.is_empty() {
            lines.push(match self.agent {
                AgentState::Unknown => "RDMA device: unknown until up".to_string(),
                _ => "no RDMA device".to_string(),
            });
        }
        for p in &self.rdma {
            lines.push(format!(
                "{} port {} {}, MTU {}",
                p.device,
                p.port,
                p.state.strip_prefix("PORT_").unwrap_or(&p.state),
                p.active_mtu
            ));
            if let (Some(index), Some(gid)) = (p.data_gid_index, &p.data_gid) {
                // The data GID is an IPv4-mapped RoCE v2 one, or on
                // InfiniBand the port GUID's GID 0 (the address is on IPoIB).
                let kind = match gid.parse::<Ipv6Addr>().map(|a| a.to_ipv4_mapped()) {
                    Ok(None) => "IB",
                    _ => "RoCE v2",
                };
                lines.push(format!("GID {index} {} ({kind})", short_gid(gid)));
            }
        }
        lines.push(match &self.agent {
            AgentState::Up { version, uptime_s } => format!("agent {version}, up {}", duration(*uptime_s)),
            AgentState::Down { error } => format!("agent down: {}", clip(error, 48)),
            AgentState::Unknown => "agent: not deployed".to_string(),
        });
        lines
    }

    /// The label of its link to the data network: NIC and address.
    pub fn link(&self) -> String {
        match &self.netdev {
            Some(nic) => format!("{nic} {}", self.data_addr),
            None => self.data_addr.clone(),
        }
    }
}

/// A GID the way people read it: `::ffff:10.77.0.1` for sysfs's
/// `0000:0000:0000:0000:0000:ffff:0a4d:0001` (unchanged if it does not parse).
pub fn short_gid(gid: &str) -> String {
    gid.parse::<Ipv6Addr>()
        .map_or_else(|_| gid.to_string(), |a| a.to_string())
}

fn duration(s: u64) -> String {
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

fn clip(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_string(),
    }
}

/// The data network's lines: the network, then the heading.
fn network_lines(t: &Topology) -> [String; 2] {
    [format!("data network {}", t.data_network), t.title()]
}

/// A Mermaid flowchart (GitHub and most doc sites draw it in Markdown):
/// the data network in the middle, each node linked to it by its NIC and
/// address.
pub fn to_mermaid(t: &Topology) -> String {
    // Labels are quoted; Mermaid reads `#quot;` etc. as entities.
    let esc = |s: &str| {
        s.replace('&', "#amp;")
            .replace('"', "#quot;")
            .replace('<', "#lt;")
            .replace('>', "#gt;")
    };
    let mut out = String::new();
    let _ = writeln!(out, "%% {}", t.title());
    if let Some(note) = &t.note {
        let _ = writeln!(out, "%% {note}");
    }
    out.push_str("flowchart TB\n");
    let net = network_lines(t).map(|l| esc(&l));
    let _ = writeln!(out, "    net([\"<b>{}</b><br/>{}\"])", net[0], net[1]);
    for (i, n) in t.nodes.iter().enumerate() {
        let lines: Vec<String> = n.lines().iter().map(|l| esc(l)).collect();
        let _ = writeln!(
            out,
            "    n{i}[\"<b>{}</b><br/>{}\"]",
            lines[0],
            lines[1..].join("<br/>")
        );
        let _ = writeln!(out, "    n{i} ---|\"{}\"| net", esc(&n.link()));
    }
    out
}

/// Graphviz DOT: an undirected graph, the data network an ellipse, each
/// node a box linked to it. Only what layout-rs also reads (no clusters, no
/// HTML labels), since [`to_svg`] draws this very text.
pub fn to_dot(t: &Topology) -> String {
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let multi = |lines: &[String]| lines.iter().map(|l| esc(l)).collect::<Vec<_>>().join("\\n");
    let mut out = String::new();
    let _ = writeln!(out, "// {}", t.title());
    if let Some(note) = &t.note {
        let _ = writeln!(out, "// {note}");
    }
    let _ = writeln!(out, "graph \"{}\" {{", esc(&t.lab));
    out.push_str("    node [shape=box, fontsize=14];\n    edge [fontsize=12];\n");
    let _ = writeln!(out, "    net [shape=ellipse, label=\"{}\"];", multi(&network_lines(t)));
    for (i, n) in t.nodes.iter().enumerate() {
        let _ = writeln!(out, "    n{i} [label=\"{}\"];", multi(&n.lines()));
        let _ = writeln!(out, "    n{i} -- net [label=\"{}\"];", esc(&n.link()));
    }
    out.push_str("}\n");
    out
}

/// The DOT of [`to_dot`] laid out and drawn as SVG by layout-rs, on a
/// canvas the size of the drawing.
pub fn to_svg(t: &Topology) -> Result<String, TopologyError> {
    use layout::gv::{DotParser, GraphBuilder};

    let dot = to_dot(t);
    let mut parser = DotParser::new(&dot);
    let graph = parser.process().map_err(TopologyError::Layout)?;
    let mut builder = GraphBuilder::new();
    builder.visit_graph(&graph);
    let mut visual = builder.get();
    let mut svg = fit::FittedSvg::new();
    visual.do_it(false, false, false, &mut svg);
    Ok(svg.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> Topology {
        let node = |name: &str, addr: &str, gid: &str| TopologyNode {
            name: name.into(),
            data_addr: format!("{addr}/24"),
            netdev: Some("eth1".into()),
            machine: "running".into(),
            agent: AgentState::Up {
                version: "0.1.0".into(),
                uptime_s: 300,
            },
            rdma: vec![RdmaPort {
                device: "rxe0".into(),
                port: 1,
                netdev: "eth1".into(),
                state: "PORT_ACTIVE".into(),
                active_mtu: 1024,
                data_gid_index: Some(1),
                data_gid: Some(gid.into()),
                gids: vec![format!("1 {gid} RoCE v2")],
            }],
        };
        Topology {
            schema: TOPOLOGY_SCHEMA,
            lab: "e2e".into(),
            provider: "qemu".into(),
            fabric: "rxe".into(),
            data_network: "10.77.0.0/24".into(),
            source: Source::Live,
            note: None,
            nodes: vec![
                node("server", "10.77.0.1", "0000:0000:0000:0000:0000:ffff:0a4d:0001"),
                node("client", "10.77.0.2", "0000:0000:0000:0000:0000:ffff:0a4d:0002"),
            ],
        }
    }

    fn planned() -> Topology {
        let mut t = live();
        t.source = Source::Planned;
        t.note = Some("the lab is not up".into());
        for n in &mut t.nodes {
            n.netdev = None;
            n.machine = "planned".into();
            n.agent = AgentState::Unknown;
            n.rdma.clear();
        }
        t.nodes[1].agent = AgentState::Down {
            error: "SSH \"did not\" answer\nsecond line".into(),
        };
        t
    }

    #[test]
    fn test_mermaid_of_a_live_lab() {
        assert_eq!(
            to_mermaid(&live()),
            r#"%% lab e2e (qemu, rxe): live
flowchart TB
    net(["<b>data network 10.77.0.0/24</b><br/>lab e2e (qemu, rxe): live"])
    n0["<b>server</b><br/>rxe0 port 1 ACTIVE, MTU 1024<br/>GID 1 ::ffff:10.77.0.1 (RoCE v2)<br/>agent 0.1.0, up 5 min"]
    n0 ---|"eth1 10.77.0.1/24"| net
    n1["<b>client</b><br/>rxe0 port 1 ACTIVE, MTU 1024<br/>GID 1 ::ffff:10.77.0.2 (RoCE v2)<br/>agent 0.1.0, up 5 min"]
    n1 ---|"eth1 10.77.0.2/24"| net
"#
        );
    }

    #[test]
    fn test_dot_of_a_planned_lab_says_so_and_escapes_quotes() {
        assert_eq!(
            to_dot(&planned()),
            r#"// lab e2e (qemu, rxe): planned from labs.yaml, not up
// the lab is not up
graph "e2e" {
    node [shape=box, fontsize=14];
    edge [fontsize=12];
    net [shape=ellipse, label="data network 10.77.0.0/24\nlab e2e (qemu, rxe): planned from labs.yaml, not up"];
    n0 [label="server\nRDMA device: unknown until up\nagent: not deployed"];
    n0 -- net [label="10.77.0.1/24"];
    n1 [label="client\nno RDMA device\nagent down: SSH \"did not\" answer"];
    n1 -- net [label="10.77.0.2/24"];
}
"#
        );
        let mermaid = to_mermaid(&planned());
        assert!(mermaid.starts_with("%% lab e2e (qemu, rxe): planned from labs.yaml, not up\n%% the lab is not up\n"));
        assert!(
            mermaid.contains("agent down: SSH #quot;did not#quot; answer\"]"),
            "{mermaid}"
        );
    }

    #[test]
    fn test_svg_draws_every_line_of_every_box() {
        let svg = to_svg(&live()).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("tspan"))
            .filter_map(|n| n.text())
            .collect();
        for want in [
            "server",
            "client",
            "rxe0 port 1 ACTIVE, MTU 1024",
            "GID 1 ::ffff:10.77.0.1 (RoCE v2)",
            "GID 1 ::ffff:10.77.0.2 (RoCE v2)",
            "data network 10.77.0.0/24",
        ] {
            assert!(texts.contains(&want), "{want:?} not among {texts:?}");
        }
        // The links' labels: NIC and address.
        for want in ["eth1 10.77.0.1/24", "eth1 10.77.0.2/24"] {
            assert!(texts.contains(&want), "{want:?} not among {texts:?}");
        }
        // The boxes and the two links are drawn.
        assert!(doc.descendants().filter(|n| n.has_tag_name("rect")).count() >= 2);
        assert!(doc.descendants().filter(|n| n.has_tag_name("path")).count() >= 2);
    }

    #[test]
    fn test_svg_lays_out_one_node_and_sixteen() {
        // labs.yaml allows 1 to 16 nodes: layout-rs draws both ends.
        for count in [1, 16] {
            let mut t = live();
            let template = t.nodes[0].clone();
            t.nodes = (0..count)
                .map(|i| TopologyNode {
                    name: format!("node-{i}"),
                    data_addr: format!("10.77.0.{}/24", i + 1),
                    ..template.clone()
                })
                .collect();
            let svg = to_svg(&t).unwrap();
            let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
            let names = doc
                .descendants()
                .filter(|n| n.has_tag_name("tspan"))
                .filter(|n| n.text().is_some_and(|t| t.starts_with("node-")))
                .count();
            assert_eq!(names, count);
        }
    }

    #[test]
    fn test_svg_canvas_fits_the_drawing() {
        // layout-rs alone made a two-node lab's canvas 993 px tall around
        // 200 px of drawing. The canvas is now the shapes' extent plus a
        // few px, for a planned and a live lab of 2 and 4 nodes.
        let mut four = live();
        four.nodes.extend(four.nodes.clone());
        for (i, n) in four.nodes.iter_mut().enumerate() {
            n.name = format!("n{}", i + 1);
        }
        for t in [live(), planned(), four] {
            let svg = to_svg(&t).unwrap();
            let doc = roxmltree::Document::parse(&svg).unwrap();
            let root = doc.root_element();
            let number = |n: &roxmltree::Node, a: &str| n.attribute(a).unwrap().trim().parse::<f64>().unwrap();
            let view: Vec<f64> = root
                .attribute("viewBox")
                .unwrap()
                .split(' ')
                .map(|v| v.parse().unwrap())
                .collect();
            assert_eq!((number(&root, "width"), number(&root, "height")), (view[2], view[3]));
            let (mut x0, mut y0, mut x1, mut y1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
            for n in doc.descendants() {
                let (left, top, right, bottom) = match n.tag_name().name() {
                    "rect" if n.ancestors().all(|a| !a.has_tag_name("clipPath")) => {
                        let (x, y) = (number(&n, "x"), number(&n, "y"));
                        (x, y, x + number(&n, "width"), y + number(&n, "height"))
                    }
                    "ellipse" => {
                        let (cx, cy, rx, ry) = (number(&n, "cx"), number(&n, "cy"), number(&n, "rx"), number(&n, "ry"));
                        (cx - rx, cy - ry, cx + rx, cy + ry)
                    }
                    _ => continue,
                };
                (x0, y0, x1, y1) = (x0.min(left), y0.min(top), x1.max(right), y1.max(bottom));
            }
            let (vx0, vy0, vx1, vy1) = (view[0], view[1], view[0] + view[2], view[1] + view[3]);
            assert!(
                vx0 <= x0 && vy0 <= y0 && vx1 >= x1 && vy1 >= y1,
                "a shape outside {view:?}"
            );
            let slack = [x0 - vx0, y0 - vy0, vx1 - x1, vy1 - y1];
            assert!(
                slack.iter().all(|s| *s <= 8.0),
                "canvas {view:?} around shapes ({x0}, {y0})..({x1}, {y1}): {slack:?} px to spare"
            );
        }
    }

    #[test]
    fn test_short_gid_and_labels() {
        assert_eq!(short_gid("0000:0000:0000:0000:0000:ffff:0a4d:0001"), "::ffff:10.77.0.1");
        assert_eq!(
            short_gid("fe80:0000:0000:0000:5054:00ff:fe00:0001"),
            "fe80::5054:ff:fe00:1"
        );
        assert_eq!(short_gid("not a gid"), "not a gid");
        assert_eq!(duration(59), "59 s");
        assert_eq!(duration(3600), "60 min");
        assert_eq!(duration(7200), "2 h");
        assert_eq!(clip("abcdef\nsecond", 3), "abc...");
        assert_eq!(clip("abc", 3), "abc");
    }
}
