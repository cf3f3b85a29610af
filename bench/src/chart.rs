//! A PNG chart of the results: osprey/nginx ratios per scenario, with the 1.0 line.

use std::path::Path;

use plotters::prelude::*;

use crate::report::Report;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

pub fn draw(report: &Report, path: &Path) -> Result<(), String> {
    let font = std::fs::read(FONT)
        .map_err(|e| format!("{FONT}: {e} (apt-get install fonts-dejavu-core)"))?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| "cannot load the chart font".to_string())?;
    let n = report.scenarios.len().max(1);
    let top = report
        .scenarios
        .iter()
        .flat_map(|s| [s.ratio(), 1.0 / s.cpu_ratio().max(1e-9)])
        .fold(1.5f64, f64::max)
        * 1.15;
    let root = BitMapBackend::new(path, (1200, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Osprey / nginx (same machine, server on one core)",
            ("sans-serif", 26),
        )
        .margin(20)
        .x_label_area_size(150)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)
        .map_err(|e| e.to_string())?;
    let names: Vec<String> = report.scenarios.iter().map(|s| s.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(
            ("sans-serif", 14)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .y_desc("ratio to nginx (higher is better)")
        .draw()
        .map_err(|e| e.to_string())?;
    let throughput = RGBColor(31, 119, 180);
    let efficiency = RGBColor(255, 127, 14);
    chart
        .draw_series(report.scenarios.iter().enumerate().map(|(i, s)| {
            let x = i as f64;
            Rectangle::new([(x + 0.1, 0.0), (x + 0.48, s.ratio())], throughput.filled())
        }))
        .map_err(|e| e.to_string())?
        .label("req/s ratio")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], throughput.filled()));
    chart
        .draw_series(report.scenarios.iter().enumerate().map(|(i, s)| {
            let x = i as f64;
            Rectangle::new(
                [(x + 0.52, 0.0), (x + 0.9, 1.0 / s.cpu_ratio().max(1e-9))],
                efficiency.filled(),
            )
        }))
        .map_err(|e| e.to_string())?
        .label("CPU efficiency ratio (nginx CPU/req ÷ osprey CPU/req)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], efficiency.filled()));
    chart
        .draw_series(LineSeries::new(
            [(0.0, 1.0), (n as f64, 1.0)],
            BLACK.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
