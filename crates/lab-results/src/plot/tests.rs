//! What the chart tests share (reading back a PNG's and an SVG's content,
//! a scratch directory), and the colours checked across line and bar charts.

use std::path::{Path, PathBuf};

use super::*;

/// A PNG's width, height and how many pixels are not white.
pub(crate) fn decode_png(path: &Path) -> (u32, u32, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().expect("a valid PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size fits")];
    let frame = reader.next_frame(&mut buf).expect("a decodable PNG frame");
    let pixels = &buf[..frame.buffer_size()];
    // Count non-white pixels: an empty canvas would pass the decoder too.
    let inked = pixels.chunks(3).filter(|p| p.iter().any(|&c| c < 200)).count();
    (frame.width, frame.height, inked)
}

/// The text of every `<text>` in an SVG.
pub(crate) fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect()
}

/// Every `<text>` with its position (x, y as written).
pub(crate) fn svg_text_at(path: &Path) -> Vec<(String, f64, f64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| {
            let at = |a: &str| n.attribute(a).and_then(|v| v.parse::<f64>().ok());
            Some((n.text()?.trim().to_string(), at("x")?, at("y")?))
        })
        .collect()
}

/// The colours (`stroke` of lines, `fill` of rectangles) an SVG draws
/// with, in drawing order, leaving out black, white and the grid's greys.
pub(crate) fn svg_colors(path: &Path, tag: &str, attr: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    doc.descendants()
        .filter(|n| n.has_tag_name(tag))
        .filter_map(|n| n.attribute(attr).map(str::to_string))
        .filter(|c| {
            let c = c.to_ascii_uppercase();
            // Greys (black, white, the grid) have R = G = B.
            let grey = c.len() == 7 && c[1..3] == c[3..5] && c[3..5] == c[5..7];
            c != "NONE" && !grey
        })
        .collect()
}

/// A fresh scratch directory under the system's temp dir.
pub(crate) fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("labctl-plot-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn test_each_transport_has_one_colour_in_line_and_bar_charts() {
    let dir = tempdir();
    let line = |label: &str, transport, stroke| Series {
        label: label.into(),
        points: vec![(0.1, 1.0), (0.2, 2.0), (0.3, 1.5)],
        transport: Some(transport),
        stroke,
    };
    let chart = LineChart {
        title: "lines".into(),
        x_label: "time".into(),
        y_label: "throughput".into(),
        y_unit: "MiB/s".into(),
        x_scale: XScale::Seconds,
        series: vec![
            line("RDMA (client)", Transport::Rdma, Stroke::Solid),
            line("RDMA (server)", Transport::Rdma, Stroke::Dashed),
            line("TCP (client)", Transport::Tcp, Stroke::Solid),
            line("TCP (server)", Transport::Tcp, Stroke::Dashed),
            line("fabric", Transport::Libfabric, Stroke::Solid),
        ],
    };
    let lines = write_line_chart(&chart, &dir.join("lines")).unwrap();
    let strokes = svg_colors(&lines[1], "polyline", "stroke");
    let (rdma, tcp, fabric) = (Transport::Rdma.hex(), Transport::Tcp.hex(), Transport::Libfabric.hex());
    // Every line and legend sample is in its transport's colour; the
    // three colours differ.
    assert!(
        strokes.iter().all(|c| [&rdma, &tcp, &fabric].contains(&c)),
        "{strokes:?}"
    );
    for c in [&rdma, &tcp, &fabric] {
        assert!(strokes.contains(c), "{c} not among {strokes:?}");
    }
    assert!(rdma != tcp && tcp != fabric && rdma != fabric);
    let bar = |label: &str, transport| Bar {
        label: label.into(),
        value: 1.0,
        transport: Some(transport),
    };
    let bars = BarChart {
        title: "bars".into(),
        y_label: "CPU".into(),
        y_unit: "s/GiB".into(),
        bars: vec![
            bar("RDMA server", Transport::Rdma),
            bar("TCP server", Transport::Tcp),
            bar("RDMA client", Transport::Rdma),
            bar("TCP client", Transport::Tcp),
        ],
    };
    let files = write_bar_chart(&bars, &dir.join("bars")).unwrap();
    assert_eq!(
        svg_colors(&files[1], "rect", "fill"),
        [&rdma, &tcp, &rdma, &tcp].map(String::clone)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
