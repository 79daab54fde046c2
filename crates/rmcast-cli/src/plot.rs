//! SVG figures for `rmcast sim --plot FILE` and `rmcast bench --plot FILE`: line charts drawn
//! with `plotters`' SVG backend alone (no system font or C library; text is left to the SVG
//! viewer).

use anyhow::{bail, Context};
use plotters::prelude::*;
use std::path::Path;

/// One line of a chart: its name and its points.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points `(x, y)`, in x order.
    pub points: Vec<(f64, f64)>,
}

/// Draw `series` as a line chart into the SVG file `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    if all().next().is_none() {
        bail!("nothing to plot");
    }
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in all() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, 0f64..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    colour.stroke_width(2),
                ))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_written_as_svg_without_fonts() {
        let dir = std::env::temp_dir().join(format!("rmcast-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("chart.svg");
        let s = Series {
            name: "host 1".into(),
            points: vec![(0.0, 0.0), (1.0, 2.0), (2.0, 5.0)],
        };
        line_chart(&f, "a title", "time (ms)", "deliveries", &[s]).unwrap();
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("polyline"), "{svg}");
        assert!(svg.contains("a title") && svg.contains("host 1"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
