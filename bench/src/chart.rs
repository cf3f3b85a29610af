//! The chart, an SVG written by hand: one group per family (HTTP/1.1, h2, files, proxy, idle
//! memory), one row per scenario, horizontal bars per server side by side — req/s on the left,
//! server CPU per request on the right. Each row is scaled to its own largest value (the
//! scenarios differ by orders of magnitude) and every bar carries its value at its end; the
//! legend and the names sit outside the bars.

use std::fmt::Write;

use crate::report::{group, Report, Samples};
use crate::servers::Kind;

const SERVERS: [(Kind, &str); 3] = [
    (Kind::Osprey, "#1f77b4"),
    (Kind::Nginx, "#2ca02c"),
    (Kind::H2o, "#ff7f0e"),
];
const NAMES: f64 = 230.0;
const PANEL: f64 = 420.0;
/// Room after the longest bar for its value.
const VALUE: f64 = 80.0;
const BAR: f64 = 11.0;
const WIDTH: f64 = NAMES + 2.0 * PANEL + 20.0;

/// One row: a name and, per server present, the two values with their labels.
struct Row {
    name: String,
    bars: Vec<(Kind, f64, String, f64, String)>,
}

pub fn svg(report: &Report) -> String {
    let mut groups: Vec<(String, Vec<Row>)> = Vec::new();
    for s in &report.scenarios {
        let row = Row {
            name: s.name.clone(),
            bars: SERVERS
                .iter()
                .filter_map(|(k, _)| s.servers.get(k).map(|x| bars(*k, x)))
                .collect(),
        };
        match groups.last_mut() {
            Some((family, rows)) if family == s.family => rows.push(row),
            _ => groups.push((s.family.to_owned(), vec![row])),
        }
    }
    let mut body = String::new();
    let mut y = 100.0;
    for (family, rows) in &groups {
        heading(&mut body, y, family);
        y += 10.0;
        for row in rows {
            y = draw_row(&mut body, y, row, true);
        }
        y += 14.0;
    }
    if let Some(idle) = &report.idle {
        heading(
            &mut body,
            y,
            "idle memory: RSS bytes per keep-alive connection (shorter is better)",
        );
        y += 10.0;
        let row = Row {
            name: format!("{} connections", group(idle.connections as f64)),
            bars: idle
                .bytes_per_conn
                .iter()
                .map(|(k, b)| (*k, *b, format!("{b:.0} B"), 0.0, String::new()))
                .collect(),
        };
        y = draw_row(&mut body, y, &row, false) + 14.0;
    }
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="24" font-size="17" font-weight="bold">Osprey, nginx and h2o: one server core, the load generator on another</text>
<text x="10" y="44" fill="#555">{} · commit {} · median of {} rounds x {} s · each row scaled to its largest value</text>
"##,
        escape(&report.date),
        escape(&report.commit),
        report.rounds,
        report.seconds
    );
    // The legend, above the plot.
    let mut x = 10.0;
    for (kind, color) in SERVERS {
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="56" width="12" height="12" fill="{color}"/><text x="{}" y="67">{}</text>"#,
            x + 16.0,
            kind.name()
        );
        x += 90.0;
    }
    for (i, title) in [
        "requests per second (longer is better)",
        "server CPU µs per request (shorter is better)",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="88" font-weight="bold">{title}</text>"#,
            NAMES + i as f64 * PANEL
        );
    }
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

fn bars(kind: Kind, s: &Samples) -> (Kind, f64, String, f64, String) {
    let (rps, cpu) = (s.median_rps(), s.median_cpu());
    (kind, rps, group(rps), cpu, format!("{cpu:.1} µs"))
}

fn heading(out: &mut String, y: f64, text: &str) {
    let _ = write!(
        out,
        r##"<text x="10" y="{}" font-weight="bold" font-size="14">{}</text>
<line x1="10" y1="{}" x2="{}" y2="{}" stroke="#ccc"/>
"##,
        y + 8.0,
        escape(text),
        y + 12.0,
        WIDTH - 10.0,
        y + 12.0
    );
}

/// Draw a row's bars from `y`; returns where the next row starts.
fn draw_row(out: &mut String, y: f64, row: &Row, cpu_panel: bool) -> f64 {
    let top = y + 8.0;
    let height = row.bars.len() as f64 * (BAR + 2.0);
    let _ = writeln!(
        out,
        r#"<text x="20" y="{}">{}</text>"#,
        top + height / 2.0 + 4.0,
        escape(&row.name)
    );
    let max_left = row.bars.iter().map(|b| b.1).fold(1e-9, f64::max);
    let max_right = row.bars.iter().map(|b| b.3).fold(1e-9, f64::max);
    for (i, (kind, left, left_label, right, right_label)) in row.bars.iter().enumerate() {
        let color = SERVERS
            .iter()
            .find(|(k, _)| k == kind)
            .map_or("#777", |c| c.1);
        let by = top + i as f64 * (BAR + 2.0);
        let mut panels = vec![(NAMES, *left / max_left, left_label)];
        if cpu_panel {
            panels.push((NAMES + PANEL, *right / max_right, right_label));
        }
        for (x0, share, label) in panels {
            let w = (PANEL - VALUE - 10.0) * share;
            let _ = writeln!(
                out,
                r#"<rect x="{x0}" y="{by}" width="{w:.1}" height="{BAR}" fill="{color}"/><text x="{:.1}" y="{}" font-size="10">{}</text>"#,
                x0 + w + 4.0,
                by + BAR - 2.0,
                escape(label)
            );
        }
    }
    top + height + 4.0
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
