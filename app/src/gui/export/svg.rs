//! A small SVG writer for the views' vector exports: enough of SVG 1.1 for rectangles, lines,
//! polylines, circles and text, with XML escaping, plus the charts several views draw (line and
//! grouped bar charts) and `stack`, which puts documents one above the other.

use std::fmt::Write;

pub struct Svg {
    width: f64,
    height: f64,
    body: String,
}

pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' && c != '\r' => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

impl Svg {
    pub fn new(width: f64, height: f64) -> Svg {
        Svg { width, height, body: String::new() }
    }

    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, stroke: Option<&str>) {
        let _ = write!(self.body, r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}" fill="{fill}""#);
        if let Some(s) = stroke {
            let _ = write!(self.body, r#" stroke="{s}" stroke-width="1""#);
        }
        self.body.push_str("/>\n");
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, width: f64, dashed: bool) {
        let dash = if dashed { r#" stroke-dasharray="4 3""# } else { "" };
        let _ = writeln!(self.body, r#"<line x1="{x1:.2}" y1="{y1:.2}" x2="{x2:.2}" y2="{y2:.2}" stroke="{stroke}" stroke-width="{width}"{dash}/>"#);
    }

    pub fn polyline(&mut self, pts: &[(f64, f64)], stroke: &str, width: f64, dashed: bool) {
        let p: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.2},{y:.2}")).collect();
        let dash = if dashed { r#" stroke-dasharray="4 3""# } else { "" };
        let _ = writeln!(self.body, r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="{width}"{dash}/>"#, p.join(" "));
    }

    pub fn circle(&mut self, x: f64, y: f64, r: f64, fill: &str) {
        let _ = writeln!(self.body, r#"<circle cx="{x:.2}" cy="{y:.2}" r="{r}" fill="{fill}"/>"#);
    }

    /// `anchor`: start, middle or end.
    pub fn text(&mut self, x: f64, y: f64, s: &str, size: f64, fill: &str, anchor: &str) {
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.2}" y="{y:.2}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" xml:space="preserve">{}</text>"#,
            escape(s)
        );
    }

    /// Text turned 90 degrees counter-clockwise about its anchor (a y axis' title).
    pub fn text_vertical(&mut self, x: f64, y: f64, s: &str, size: f64) {
        let _ = writeln!(self.body, r#"<text x="{x:.2}" y="{y:.2}" font-size="{size}" fill="black" text-anchor="middle" transform="rotate(-90 {x:.2} {y:.2})">{}</text>"#, escape(s));
    }

    /// Monospace text, so that layouts computed from character counts line up.
    pub fn mono(&mut self, x: f64, y: f64, s: &str, size: f64) {
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.2}" y="{y:.2}" font-family="monospace" font-size="{size}" xml:space="preserve">{}</text>"#,
            escape(s)
        );
    }

    pub fn finish(self) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{}</svg>\n",
            self.body,
            w = self.width,
            h = self.height
        )
    }
}

/// One data series of a chart.
pub struct Series {
    pub name: String,
    pub color: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// A line chart with axes, ticks, a legend and optional horizontal reference lines.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series], hlines: &[(String, f64)]) -> String {
    let (w, h) = (640.0, 400.0);
    let (l, r, t, b) = (70.0, 170.0, 40.0, 50.0);
    let pts = series.iter().flat_map(|s| s.points.iter().cloned());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0f64, f64::NEG_INFINITY);
    for (x, y) in pts.chain(hlines.iter().map(|h| (f64::NAN, h.1))) {
        if x.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
        }
        if y.is_finite() {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if !y1.is_finite() || y1 <= y0 {
        y1 = y0 + 1.0;
    }
    // The axes run from nice round numbers (1, 2 or 5 times a power of ten) around the data.
    let yt = nice_ticks(y0, y1 + (y1 - y0) * 0.02, 5);
    let (y0, y1) = (yt[0], *yt.last().expect("ticks"));
    let xt = nice_ticks(x0, x1, 6);
    let px = |x: f64| l + (x - x0) / (x1 - x0) * (w - l - r);
    let py = |y: f64| h - b - (y - y0) / (y1 - y0) * (h - t - b);
    let mut s = Svg::new(w, h);
    s.text(w / 2.0, 24.0, title, 15.0, "black", "middle");
    s.line(l, h - b, w - r, h - b, "black", 1.0, false);
    s.line(l, t, l, h - b, "black", 1.0, false);
    for &fx in xt.iter().filter(|&&v| v >= x0 - 1e-9 && v <= x1 + 1e-9) {
        s.line(px(fx), h - b, px(fx), h - b + 4.0, "black", 1.0, false);
        s.text(px(fx), h - b + 16.0, &tick(fx), 11.0, "black", "middle");
    }
    for &fy in &yt {
        s.line(l - 4.0, py(fy), l, py(fy), "black", 1.0, false);
        s.text(l - 6.0, py(fy) + 4.0, &tick(fy), 11.0, "black", "end");
    }
    // Axis titles outside the tick labels: x below them, y turned along the axis at the edge.
    s.text((l + w - r) / 2.0, h - 10.0, x_label, 12.0, "black", "middle");
    s.text_vertical(14.0, (t + h - b) / 2.0, y_label, 12.0);
    let mut ly = t + 10.0;
    for (name, y) in hlines {
        s.line(l, py(*y), w - r, py(*y), "#888888", 1.0, true);
        s.line(w - r + 10.0, ly, w - r + 30.0, ly, "#888888", 1.0, true);
        s.text(w - r + 35.0, ly + 4.0, name, 11.0, "black", "start");
        ly += 18.0;
    }
    for se in series {
        let p: Vec<(f64, f64)> = se.points.iter().map(|&(x, y)| (px(x), py(y))).collect();
        s.polyline(&p, &se.color, 2.0, se.dashed);
        for &(x, y) in &p {
            s.circle(x, y, 2.5, &se.color);
        }
        s.line(w - r + 10.0, ly, w - r + 30.0, ly, &se.color, 2.0, se.dashed);
        s.text(w - r + 35.0, ly + 4.0, &se.name, 11.0, "black", "start");
        ly += 18.0;
    }
    s.finish()
}

/// Grouped bar chart: `groups` categories on x, one bar per series in each.
/// `swatches`: per category a colour drawn as a square under its label (the group's colour, as
/// on screen), or none when empty.
pub fn bar_chart(title: &str, categories: &[String], swatches: &[String], series: &[(String, String, Vec<f64>)], hline: Option<(String, f64)>) -> String {
    let (w, h) = (640.0, 400.0);
    let (l, r, t, b) = (70.0, 170.0, 40.0, 50.0);
    let data_max = series.iter().flat_map(|s| s.2.iter().cloned()).chain(hline.iter().map(|h| h.1)).fold(0f64, f64::max).max(1e-9) * 1.05;
    let yt = nice_ticks(0.0, data_max, 5);
    let ymax = *yt.last().expect("ticks");
    let py = |y: f64| h - b - y / ymax * (h - t - b);
    let n = categories.len().max(1) as f64;
    let cw = (w - l - r) / n;
    let bw = cw * 0.8 / series.len().max(1) as f64;
    let mut s = Svg::new(w, h);
    s.text(w / 2.0, 24.0, title, 15.0, "black", "middle");
    s.line(l, h - b, w - r, h - b, "black", 1.0, false);
    s.line(l, t, l, h - b, "black", 1.0, false);
    for &fy in &yt {
        s.line(l - 4.0, py(fy), l, py(fy), "black", 1.0, false);
        s.text(l - 6.0, py(fy) + 4.0, &tick(fy), 11.0, "black", "end");
    }
    for (ci, c) in categories.iter().enumerate() {
        let x = l + cw * ci as f64;
        s.text(x + cw / 2.0, h - b + 16.0, c, 11.0, "black", "middle");
        if let Some(col) = swatches.get(ci) {
            s.rect(x + cw / 2.0 - 6.0, h - b + 22.0, 12.0, 12.0, col, None);
        }
        for (si, (_, color, vals)) in series.iter().enumerate() {
            let v = vals.get(ci).cloned().unwrap_or(0.0);
            s.rect(x + cw * 0.1 + bw * si as f64, py(v), bw, (h - b) - py(v), color, None);
        }
    }
    let mut ly = t + 10.0;
    if let Some((name, y)) = &hline {
        s.line(l, py(*y), w - r, py(*y), "#888888", 1.0, true);
        s.line(w - r + 10.0, ly, w - r + 30.0, ly, "#888888", 1.0, true);
        s.text(w - r + 35.0, ly + 4.0, name, 11.0, "black", "start");
        ly += 18.0;
    }
    for (name, color, _) in series {
        s.rect(w - r + 10.0, ly - 6.0, 20.0, 10.0, color, None);
        s.text(w - r + 35.0, ly + 4.0, name, 11.0, "black", "start");
        ly += 18.0;
    }
    s.finish()
}

/// Stacks SVG documents vertically into one.
pub fn stack(docs: &[String], width: f64, heights: &[f64]) -> String {
    let total: f64 = heights.iter().sum();
    let mut out = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{total}\" viewBox=\"0 0 {width} {total}\">\n");
    let mut y = 0.0;
    for (d, h) in docs.iter().zip(heights) {
        let body = d.split_once("?>\n").map(|x| x.1).unwrap_or(d);
        out += &body.replacen("<svg ", &format!("<svg y=\"{y}\" "), 1);
        y += h;
    }
    out + "</svg>\n"
}

/// Tick values covering [lo, hi]: multiples of a step of 1, 2 or 5 times a power of ten, about
/// `target` of them, from a multiple at or below `lo` to one at or above `hi`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo, lo + 1.0) };
    let raw = (hi - lo) / target.max(1) as f64;
    let p = 10f64.powf(raw.log10().floor());
    // The finest of 1, 2, 5, 10 times p with at most target + 1 intervals.
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|&s| (hi - lo) / s <= target as f64 + 1.0 + 1e-9).unwrap_or(10.0 * p);
    let (a, b) = ((lo / step + 1e-9).floor() as i64, (hi / step - 1e-9).ceil() as i64);
    (a..=b).map(|i| {
        let v = i as f64 * step;
        // Rounded to the step's decimals, so that 0.1 * 3 prints as 0.3.
        let d = (-step.log10().floor()).max(0.0) as i32;
        let f = 10f64.powi(d);
        (v * f).round() / f
    }).collect()
}

fn tick(v: f64) -> String {
    // Ticks are round numbers: print as few decimals as they have.
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_closes() {
        let mut s = Svg::new(10.0, 10.0);
        s.text(1.0, 2.0, "a<b & \"c\"\u{1}", 10.0, "black", "start");
        let out = s.finish();
        assert!(out.contains("a&lt;b &amp; &quot;c&quot;\u{fffd}"));
        assert!(out.trim_end().ends_with("</svg>"));
    }

    /// Ticks are 1-2-5 multiples (not 0.204, 0.408, …) and cover the data.
    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_ticks(0.0, 1.02, 5), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2]);
        assert_eq!(nice_ticks(0.0, 43.0, 5), vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0]);
        assert_eq!(nice_ticks(1024.0, 8192.0, 6), vec![0.0, 2000.0, 4000.0, 6000.0, 8000.0, 10000.0]);
        assert_eq!(nice_ticks(0.0, 0.17, 5), vec![0.0, 0.05, 0.1, 0.15, 0.2]);
        let c = line_chart("t", "x", "y", &[Series { name: "s".into(), color: "#000".into(), points: vec![(0.0, 0.0), (29.0, 1.02)], dashed: false }], &[]);
        assert!(!c.contains(">0.204<") && c.contains(">0.2<") && c.contains(">1.2<"), "{c}");
        // The y title is turned along the axis, left of the tick labels.
        assert!(c.contains("rotate(-90"));
    }

    #[test]
    fn charts_have_every_series() {
        let c = line_chart("t", "x", "y", &[Series { name: "dense".into(), color: "#000".into(), points: vec![(1.0, 2.0), (2.0, 3.0)], dashed: false }], &[("1/K".into(), 0.125)]);
        assert!(c.contains("dense") && c.contains("1/K") && c.contains("<polyline"));
        let b = bar_chart("t", &["g0".into(), "g1".into()], &[], &[("after".into(), "#123456".into(), vec![0.5, 0.5])], None);
        assert_eq!(b.matches("fill=\"#123456\"").count(), 3);
    }
}
