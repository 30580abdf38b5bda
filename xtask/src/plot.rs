//! Speedup-vs-tokens plots, one per (component, kind, ub_name): a line per parallel key and
//! module, the threshold, and each rule's `min_tokens` marked.

use plotters::prelude::*;

/// One line of a plot.
pub struct Line {
    /// Legend label.
    pub label: String,
    /// (tokens, speedup), sorted by tokens.
    pub points: Vec<(u64, f64)>,
    /// The rule's `min_tokens`, if one was written for this line's key.
    pub min_tokens: Option<u64>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Renders the plot as SVG text.
pub fn speedup_svg(title: &str, threshold: f64, lines: &[Line]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 540)).into_drawing_area();
        fn e<E: std::fmt::Debug>(err: E) -> String {
            format!("plot: {err:?}")
        }
        root.fill(&WHITE).map_err(e)?;
        let all: Vec<&(u64, f64)> = lines.iter().flat_map(|l| &l.points).collect();
        let xmin = all.iter().map(|p| p.0).min().unwrap_or(256).max(1) as f64;
        let xmax = (all.iter().map(|p| p.0).max().unwrap_or(65536) as f64).max(xmin * 2.0);
        let ymax = all.iter().map(|p| p.1).fold(threshold, f64::max) * 1.08;
        let ymin = all.iter().map(|p| p.1).fold(threshold, f64::min) * 0.92;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin / 1.2..xmax * 1.2).log_scale(), ymin..ymax)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("tokens compared by the policy (log scale)")
            .y_desc("FP8 / BF16 speedup (fwd+bwd)")
            .x_label_formatter(&|x| format!("{}", x.round() as u64))
            .draw()
            .map_err(e)?;
        chart
            .draw_series(LineSeries::new(
                [(xmin / 1.2, threshold), (xmax * 1.2, threshold)],
                BLACK.stroke_width(1),
            ))
            .map_err(e)?
            .label(format!("threshold {threshold}"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        for (i, l) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = l.points.iter().map(|&(t, s)| (t as f64, s)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(e)?
                .label(match l.min_tokens {
                    Some(t) => format!("{} (FP8 from {t})", l.label),
                    None => format!("{} (no rule: BF16)", l.label),
                })
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
            if let Some(t) = l.min_tokens
                && let Some(&(_, s)) = l.points.iter().find(|p| p.0 == t)
            {
                chart
                    .draw_series([TriangleMarker::new((t as f64, s), 9, color.filled())])
                    .map_err(e)?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}
