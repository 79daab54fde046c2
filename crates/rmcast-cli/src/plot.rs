//! SVG figures for `rmcast sim --plot FILE` and `rmcast bench --plot FILE`: line charts (one, or
//! several side by side as [`Panel`]s, for `rmcast sim --experiment rmp`) drawn
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

/// One chart of a figure: its title, axis labels and lines.
pub struct Panel<'a> {
    /// Caption.
    pub title: &'a str,
    /// Label of the x axis.
    pub x_label: &'a str,
    /// Label of the y axis.
    pub y_label: &'a str,
    /// The lines.
    pub series: &'a [Series],
    /// Lines to compare with (bounds, limits), drawn dashed in black.
    pub references: &'a [Series],
    /// Mark every point of `series` with a dot (a series of one point is then visible too).
    pub markers: bool,
    /// Where the legend goes.
    pub legend: SeriesLabelPosition,
}

/// Line colours, in series order (Tableau 10: told apart on white and by most readers).
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Draw `series` as a line chart into the SVG file `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let panel = Panel {
        title,
        x_label,
        y_label,
        series,
        references: &[],
        markers: false,
        legend: SeriesLabelPosition::MiddleMiddle,
    };
    panels(path, &[panel])
}

/// Draw several charts side by side into the SVG file `path` (900 × 540 pixels each).
pub fn panels(path: &Path, panels: &[Panel<'_>]) -> anyhow::Result<()> {
    grid(path, panels, panels.len())
}

/// Draw several charts into the SVG file `path`, `columns` to a row (900 × 540 pixels each).
pub fn grid(path: &Path, panels: &[Panel<'_>], columns: usize) -> anyhow::Result<()> {
    let columns = columns.max(1);
    if panels.is_empty()
        || panels
            .iter()
            .any(|p| p.series.iter().all(|s| s.points.is_empty()))
    {
        bail!("nothing to plot");
    }
    let columns = columns.min(panels.len());
    let rows = panels.len().div_ceil(columns);
    let root = SVGBackend::new(path, (900 * columns as u32, 540 * rows as u32)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        for (area, panel) in root.split_evenly((rows, columns)).iter().zip(panels) {
            draw_panel(area, panel)?;
        }
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

fn draw_panel<'b>(
    area: &DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    panel: &Panel<'_>,
) -> Result<(), Box<dyn std::error::Error + 'b>> {
    let series = panel.series;
    let all = || {
        series
            .iter()
            .chain(panel.references)
            .flat_map(|s| s.points.iter())
    };
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
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0f64..y1)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_label)
        .y_desc(panel.y_label)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()].to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour));
        if panel.markers {
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
        }
    }
    for s in panel.references {
        chart
            .draw_series(DashedLineSeries::new(
                s.points.iter().copied(),
                6,
                4,
                BLACK.stroke_width(1),
            ))?
            .label(s.name.clone())
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(panel.legend.clone())
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
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

    #[test]
    fn panels_are_drawn_side_by_side_with_dashed_references() {
        let dir = std::env::temp_dir().join(format!("rmcast-panels-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("panels.svg");
        let one = [Series {
            name: "one point".into(),
            points: vec![(8.0, 3.0)],
        }];
        let limit = [Series {
            name: "a limit".into(),
            points: vec![(2.0, 1.0), (8.0, 1.0)],
        }];
        let panel = |title| Panel {
            title,
            x_label: "members",
            y_label: "KB/s",
            series: &one,
            references: &limit,
            markers: true,
            legend: SeriesLabelPosition::UpperLeft,
        };
        panels(&f, &[panel("left"), panel("right")]).unwrap();
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(svg.starts_with("<svg width=\"1800\""), "{svg}");
        assert!(svg.contains("left") && svg.contains("right") && svg.contains("a limit"));
        assert!(svg.contains("<circle"), "the single point is marked");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
