//! layout-rs's SVG writer with a canvas the size of the drawing.
//!
//! layout-rs 0.1 grows its canvas by each text's length in the wrong
//! direction (a long label adds height) and by an ellipse's full size past
//! its centre, so a lab of two nodes came out about three times taller than
//! what is drawn. This backend passes every shape on to the SVG writer and
//! keeps the extent of what is actually drawn; [`FittedSvg::finalize`]
//! gives the writer's SVG with its canvas set to that extent.

use layout::backends::svg::SVGWriter;
use layout::core::format::{ClipHandle, RenderBackend};
use layout::core::geometry::Point;
use layout::core::style::StyleAttr;

/// Space around the drawing, in px.
const MARGIN: f64 = 4.0;
/// The width of a character of the writer's serif font, in em: a little
/// more than Times' average, so text is never cut off.
const CHAR_EM: f64 = 0.55;

/// The extent of what has been drawn.
#[derive(Debug, Clone, Copy)]
struct Extent {
    min: Point,
    max: Point,
}

impl Extent {
    fn empty() -> Extent {
        Extent {
            min: Point::new(f64::INFINITY, f64::INFINITY),
            max: Point::new(f64::NEG_INFINITY, f64::NEG_INFINITY),
        }
    }

    /// Takes in the box from `(x0, y0)` to `(x1, y1)`.
    fn include(&mut self, x0: f64, y0: f64, x1: f64, y1: f64) {
        self.min.x = self.min.x.min(x0.min(x1));
        self.min.y = self.min.y.min(y0.min(y1));
        self.max.x = self.max.x.max(x0.max(x1));
        self.max.y = self.max.y.max(y0.max(y1));
    }

    fn is_empty(&self) -> bool {
        !(self.min.x <= self.max.x && self.min.y <= self.max.y)
    }
}

/// An SVG backend for layout-rs whose canvas fits the drawing.
pub(super) struct FittedSvg {
    writer: SVGWriter,
    drawn: Extent,
}

impl FittedSvg {
    pub(super) fn new() -> FittedSvg {
        FittedSvg {
            writer: SVGWriter::new(),
            drawn: Extent::empty(),
        }
    }

    /// The SVG document, its width, height and viewBox those of the drawing
    /// (plus a small margin).
    pub(super) fn finalize(&self) -> String {
        let svg = self.writer.finalize();
        if self.drawn.is_empty() {
            return svg;
        }
        let (x, y) = (self.drawn.min.x - MARGIN, self.drawn.min.y - MARGIN);
        let width = (self.drawn.max.x - self.drawn.min.x + 2.0 * MARGIN).ceil();
        let height = (self.drawn.max.y - self.drawn.min.y + 2.0 * MARGIN).ceil();
        let fitted = format!("<svg width=\"{width}\" height=\"{height}\" viewBox=\"{x} {y} {width} {height}\" ");
        // The writer's root element is `<svg width=".." height=".." viewBox=".." xmlns=..>`.
        match (svg.find("<svg "), svg.find(" xmlns=")) {
            (Some(start), Some(end)) if start < end => format!("{}{}{}", &svg[..start], fitted, &svg[end + 1..]),
            _ => svg,
        }
    }
}

impl RenderBackend for FittedSvg {
    fn draw_rect(
        &mut self,
        xy: Point,
        size: Point,
        look: &StyleAttr,
        properties: Option<String>,
        clip: Option<ClipHandle>,
    ) {
        let w = look.line_width as f64 / 2.0;
        self.drawn
            .include(xy.x - w, xy.y - w, xy.x + size.x + w, xy.y + size.y + w);
        self.writer.draw_rect(xy, size, look, properties, clip);
    }

    fn draw_line(&mut self, start: Point, stop: Point, look: &StyleAttr, properties: Option<String>) {
        let w = look.line_width as f64 / 2.0;
        self.drawn.include(start.x - w, start.y - w, stop.x + w, stop.y + w);
        self.drawn.include(start.x + w, start.y + w, stop.x - w, stop.y - w);
        self.writer.draw_line(start, stop, look, properties);
    }

    fn draw_circle(&mut self, xy: Point, size: Point, look: &StyleAttr, properties: Option<String>) {
        // xy is the centre, size the full width and height.
        let w = look.line_width as f64 / 2.0;
        let (rx, ry) = (size.x / 2.0 + w, size.y / 2.0 + w);
        self.drawn.include(xy.x - rx, xy.y - ry, xy.x + rx, xy.y + ry);
        self.writer.draw_circle(xy, size, look, properties);
    }

    fn draw_text(&mut self, xy: Point, text: &str, look: &StyleAttr) {
        // The writer centres the lines on xy, one em each.
        let em = look.font_size as f64;
        let lines = text.lines().count() as f64;
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
        let (half_w, half_h) = (widest * CHAR_EM * em / 2.0, lines * em / 2.0);
        if lines > 0.0 {
            self.drawn
                .include(xy.x - half_w, xy.y - half_h, xy.x + half_w, xy.y + half_h);
        }
        self.writer.draw_text(xy, text, look);
    }

    fn draw_arrow(
        &mut self,
        path: &[(Point, Point)],
        dashed: bool,
        head: (bool, bool),
        look: &StyleAttr,
        properties: Option<String>,
        text: &str,
    ) {
        // A Bézier curve lies within its control points; a label along it
        // stands out by up to a line of text.
        let pad = look.line_width as f64 + if text.is_empty() { 0.0 } else { look.font_size as f64 };
        for (a, b) in path {
            for p in [a, b] {
                self.drawn.include(p.x - pad, p.y - pad, p.x + pad, p.y + pad);
            }
        }
        self.writer.draw_arrow(path, dashed, head, look, properties, text);
    }

    fn create_clip(&mut self, xy: Point, size: Point, rounded_px: usize) -> ClipHandle {
        self.writer.create_clip(xy, size, rounded_px)
    }
}
