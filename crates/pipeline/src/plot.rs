//! Speedup-vs-tokens plots, one per (component, kind, ub_name): a line per parallel key and
//! module with its p10/p90 band, the threshold (dashed), and each rule's `min_tokens` marked.
//!
//! The x axis is log2 of the token count, labelled at every power of two (256, 512, 1k, ...),
//! and the legend sits beside the plot, never over the data.

use plotters::prelude::*;

/// One line of a plot.
pub struct Line {
    /// Legend label.
    pub label: String,
    /// (tokens, speedup of the medians), sorted by tokens.
    pub points: Vec<(u64, f64)>,
    /// (tokens, pessimistic speedup bf16 p10 / fp8 p90, optimistic bf16 p90 / fp8 p10): the
    /// spread the timings had. Empty when the report has no spread (estimates).
    pub band: Vec<(u64, f64, f64)>,
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
    RGBColor(23, 190, 207),
];

/// `1536` -> `1.5k`, `32768` -> `32k`.
fn human(t: f64) -> String {
    if t >= 1024.0 {
        let k = t / 1024.0;
        if (k - k.round()).abs() < 1e-9 {
            format!("{}k", k.round())
        } else {
            format!("{k:.1}k")
        }
    } else {
        format!("{}", t.round())
    }
}

/// What a chart's axes and legend say.
#[derive(Debug, Clone, Copy)]
pub struct Chart<'a> {
    /// The x axis' label.
    pub x_desc: &'a str,
    /// The y axis' label.
    pub y_desc: &'a str,
    /// The threshold's legend entry.
    pub threshold_label: &'a str,
    /// Whether lines carry policy rules (the `min_tokens` marker and "FP8 from" in the legend).
    pub rules: bool,
}

impl Chart<'_> {
    /// A module's speedup against tokens, with its rule (the policy plots).
    pub const POLICY: Chart<'static> = Chart {
        x_desc: "tokens compared by the policy (log scale)",
        y_desc: "FP8 / BF16 speedup (fwd+bwd)",
        threshold_label: "threshold",
        rules: true,
    };
}

/// Renders the plot as SVG text.
pub fn speedup_svg(title: &str, threshold: f64, lines: &[Line]) -> Result<String, String> {
    chart_svg(title, threshold, lines, &Chart::POLICY)
}

/// [`speedup_svg`] with other axes and legend words.
pub fn chart_svg(
    title: &str,
    threshold: f64,
    lines: &[Line],
    axes: &Chart<'_>,
) -> Result<String, String> {
    fn e<E: std::fmt::Debug>(err: E) -> String {
        format!("plot: {err:?}")
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1320, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (plot_area, legend_area) = root.split_horizontally(760);
        let x = |t: u64| (t.max(1) as f64).log2();
        let xs: Vec<f64> = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| x(p.0)))
            .collect();
        let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let xmax = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (xmin, xmax) = if xmin.is_finite() {
            (xmin.floor(), xmax.ceil().max(xmin.floor() + 1.0))
        } else {
            (8.0, 16.0)
        };
        let ys = lines.iter().flat_map(|l| {
            l.points
                .iter()
                .map(|p| p.1)
                .chain(l.band.iter().flat_map(|b| [b.1, b.2]))
        });
        let (ylo, yhi) = ys.fold((threshold, threshold), |(lo, hi), y| (lo.min(y), hi.max(y)));
        let pad = ((yhi - ylo) * 0.08).max(0.02);
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(xmin - 0.25..xmax + 0.25, (ylo - pad)..(yhi + pad))
            .map_err(e)?;
        let steps = (xmax - xmin).round() as usize + 1;
        chart
            .configure_mesh()
            .x_desc(axes.x_desc)
            .y_desc(axes.y_desc)
            .x_labels(steps * 2 + 1)
            .x_label_formatter(&|v| {
                if (v - v.round()).abs() < 1e-6 {
                    human(2f64.powf(v.round()))
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(e)?;
        // Threshold: dashed, so it never reads as a data line.
        let mut at = xmin - 0.25;
        while at < xmax + 0.25 {
            let end = (at + 0.12).min(xmax + 0.25);
            chart
                .draw_series(LineSeries::new(
                    [(at, threshold), (end, threshold)],
                    BLACK.stroke_width(1),
                ))
                .map_err(e)?;
            at += 0.2;
        }
        for (i, l) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            if !l.band.is_empty() {
                let upper = l.band.iter().map(|b| (x(b.0), b.2));
                let lower = l.band.iter().rev().map(|b| (x(b.0), b.1));
                chart
                    .draw_series([Polygon::new(
                        upper.chain(lower).collect::<Vec<_>>(),
                        color.mix(0.18).filled(),
                    )])
                    .map_err(e)?;
            }
            let pts: Vec<(f64, f64)> = l.points.iter().map(|&(t, s)| (x(t), s)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(e)?;
            // A marker shape per line as well as a colour: lines stay apart in grey print.
            match i % 3 {
                0 => chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map(|_| ()),
                1 => chart
                    .draw_series(
                        pts.iter()
                            .map(|&p| TriangleMarker::new(p, 5, color.filled())),
                    )
                    .map(|_| ()),
                _ => chart
                    .draw_series(pts.iter().map(|&p| Cross::new(p, 4, color.stroke_width(2))))
                    .map(|_| ()),
            }
            .map_err(e)?;
            if let Some(t) = l.min_tokens
                && let Some(&(_, s)) = l.points.iter().find(|p| p.0 == t)
            {
                chart
                    .draw_series([Circle::new((x(t), s), 8, color.stroke_width(2))])
                    .map_err(e)?;
            }
        }
        draw_legend(&legend_area, threshold, lines, axes)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}

/// The legend beside the plot: the threshold, the rule marker, the band, one entry per line.
fn draw_legend(
    legend_area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    threshold: f64,
    lines: &[Line],
    axes: &Chart<'_>,
) -> Result<(), String> {
    fn e<E: std::fmt::Debug>(err: E) -> String {
        format!("plot: {err:?}")
    }
    let font = ("sans-serif", 13).into_font();
    let mut y = 40;
    legend_area
        .draw(&Text::new(
            "legend",
            (10, 16),
            ("sans-serif", 14).into_font(),
        ))
        .map_err(e)?;
    for k in 0..4 {
        legend_area
            .draw(&PathElement::new(
                vec![(10 + 8 * k, y), (14 + 8 * k, y)],
                BLACK.stroke_width(1),
            ))
            .map_err(e)?;
    }
    legend_area
        .draw(&Text::new(
            format!("{} {threshold}", axes.threshold_label),
            (50, y - 7),
            font.clone(),
        ))
        .map_err(e)?;
    y += 22;
    if axes.rules {
        legend_area
            .draw(&Circle::new((25, y), 7, BLACK.stroke_width(2)))
            .map_err(e)?;
        legend_area
            .draw(&Text::new(
                "the rule's min_tokens",
                (50, y - 7),
                font.clone(),
            ))
            .map_err(e)?;
        y += 22;
    }
    if lines.iter().any(|l| !l.band.is_empty()) {
        legend_area
            .draw(&Rectangle::new(
                [(10, y - 5), (40, y + 5)],
                BLACK.mix(0.18).filled(),
            ))
            .map_err(e)?;
        legend_area
            .draw(&Text::new("p10-p90 band", (50, y - 7), font.clone()))
            .map_err(e)?;
        y += 22;
    }
    for (i, l) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        legend_area
            .draw(&PathElement::new(
                vec![(10, y), (40, y)],
                color.stroke_width(2),
            ))
            .map_err(e)?;
        let label = match (axes.rules, l.min_tokens) {
            (false, _) => l.label.clone(),
            (true, Some(t)) => format!("{} (FP8 from {})", l.label, human(t as f64)),
            (true, None) => format!("{} (no rule: BF16)", l.label),
        };
        legend_area
            .draw(&Text::new(label, (50, y - 7), font.clone()))
            .map_err(e)?;
        y += 22;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_legend_and_bands() {
        let lines = [
            Line {
                label: "tp=1".into(),
                points: vec![(256, 0.8), (1024, 1.05), (4096, 1.3)],
                band: vec![(256, 0.75, 0.85), (1024, 1.0, 1.1), (4096, 1.25, 1.35)],
                min_tokens: Some(1024),
            },
            Line {
                label: "tp=2".into(),
                points: vec![(256, 0.7), (1024, 0.9), (4096, 1.1)],
                band: Vec::new(),
                min_tokens: None,
            },
        ];
        let svg = speedup_svg("t", 1.0, &lines).expect("renders");
        // Every power of two between the extremes is labelled.
        for t in ["256", "512", "1k", "2k", "4k"] {
            assert!(svg.contains(&format!(">\n{t}\n</text>")), "no tick {t}");
        }
        assert!(svg.contains("tp=1 (FP8 from 1k)") && svg.contains("tp=2 (no rule: BF16)"));
        // The legend is right of the plot area (760 px wide): its texts start beyond it.
        let legend_x: Vec<f64> = svg
            .split("<text x=\"")
            .skip(1)
            .filter(|t| t.contains("(FP8 from") || t.contains("(no rule"))
            .filter_map(|t| t.split('"').next()?.parse().ok())
            .collect();
        assert!(
            legend_x.len() == 2 && legend_x.iter().all(|x| *x > 760.0),
            "{legend_x:?}"
        );
        assert!(svg.contains("p10-p90 band") && svg.contains("<polygon"));
        assert_eq!(human(1536.0), "1.5k");
    }

    #[test]
    fn a_chart_without_rules_says_nothing_of_them() {
        let lines = [Line {
            label: "all-FP8".into(),
            points: vec![(1024, 0.8), (4096, 1.1)],
            band: vec![],
            min_tokens: None,
        }];
        let axes = Chart {
            x_desc: "tokens per sequence",
            y_desc: "step speedup",
            threshold_label: "all-BF16 =",
            rules: false,
        };
        let svg = chart_svg("t", 1.0, &lines, &axes).expect("renders");
        assert!(svg.contains("all-FP8") && !svg.contains("no rule") && !svg.contains("min_tokens"));
        assert!(svg.contains("step speedup") && svg.contains("all-BF16 = 1"));
        assert!(!svg.contains("FP8 / BF16 speedup (fwd+bwd)"));
    }
}
