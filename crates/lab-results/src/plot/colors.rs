//! Colours: one per transport, the same in every chart (and the HTML
//! report), and a few others for what stands for no transport.

use plotters::style::RGBColor;

/// Colours of series and bars that stand for no transport (after the
/// transports' own, which they never reuse).
const OTHER_COLORS: [RGBColor; 3] = [RGBColor(148, 103, 189), RGBColor(140, 86, 75), RGBColor(90, 90, 90)];

/// What carried the bytes a line or a bar stands for. Each has one colour,
/// the same in every chart labctl draws (and in the HTML report), so RDMA
/// is always blue and TCP always red whichever chart you look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Verbs (rdma_cm or out-of-band setup): blue.
    Rdma,
    /// libfabric (`fabric-*`): green.
    Libfabric,
    /// TCP sockets (`bulk-tcp`): red.
    Tcp,
}

impl Transport {
    /// The transport a workload moves its bytes with.
    pub fn of_workload(workload: &str) -> Transport {
        use workload_catalogue::Family;
        match workload_catalogue::find(workload).map(|w| w.family) {
            Some(Family::Libfabric) => Transport::Libfabric,
            Some(Family::Tcp) => Transport::Tcp,
            Some(Family::Verbs) | None => Transport::Rdma,
        }
    }

    /// Its colour.
    pub fn color(self) -> RGBColor {
        match self {
            Transport::Rdma => RGBColor(31, 119, 180),
            Transport::Libfabric => RGBColor(44, 160, 44),
            Transport::Tcp => RGBColor(214, 39, 40),
        }
    }

    /// Its colour as `#RRGGBB` (upper case, as the SVG files write it).
    pub fn hex(self) -> String {
        let RGBColor(r, g, b) = self.color();
        format!("#{r:02X}{g:02X}{b:02X}")
    }
}

/// Colour of the `i`-th series or bar, given what it stands for.
pub(super) fn color_of(transport: Option<Transport>, others: &mut usize) -> RGBColor {
    transport.map_or_else(
        || {
            let c = OTHER_COLORS[*others % OTHER_COLORS.len()];
            *others += 1;
            c
        },
        Transport::color,
    )
}
