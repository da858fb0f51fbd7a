//! The SVG plots, drawn with plotters' SVG backend (no fonts needed: text stays text).

use crate::series::{self, span, timeline_order};
use crate::{ReportError, Run};
use plotters::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;

const SIZE: (u32, u32) = (960, 540);

/// The unit a plot's time axis is written in, chosen from the span it covers.
#[derive(Clone, Copy)]
enum TimeUnit {
    Seconds,
    Minutes,
    Hours,
}

impl TimeUnit {
    fn for_span(seconds: f64) -> Self {
        if seconds >= 2.0 * 3600.0 {
            TimeUnit::Hours
        } else if seconds >= 120.0 {
            TimeUnit::Minutes
        } else {
            TimeUnit::Seconds
        }
    }

    fn scale(self, seconds: f64) -> f64 {
        match self {
            TimeUnit::Seconds => seconds,
            TimeUnit::Minutes => seconds / 60.0,
            TimeUnit::Hours => seconds / 3600.0,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Minutes => "min",
            TimeUnit::Hours => "h",
        }
    }
}

/// The JCT CDF of every run in one chart.
pub fn jct_cdf(path: &Path, runs: &[Run]) -> Result<(), ReportError> {
    let curves: Vec<(&str, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|r| (r.name.as_str(), series::jct_cdf(&r.jobs)))
        .collect();
    let max = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let unit = TimeUnit::for_span(max);
    let x_max = unit.scale(max).max(1e-9) * 1.02;
    let fail = |e: &dyn std::fmt::Display| ReportError::plot(path, e);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Job completion time, CDF", ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..x_max, 0f64..1.0)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc(format!("JCT ({})", unit.name()))
        .y_desc("fraction of jobs finished")
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, (name, points)) in curves.into_iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let steps = step_points(points.iter().map(|&(x, y)| (unit.scale(x), y)), 0.0);
        chart
            .draw_series(LineSeries::new(steps, colour.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    legend_and_present(&mut chart, &root, path)
}

/// GPUs busy per type over time: one panel per type, busy GPUs filled up to the type's
/// capacity (the panel's top), so types never hide each other.
pub fn busy_over_time(path: &Path, run: &Run) -> Result<(), ReportError> {
    let busy = series::busy_over_time(&run.segments);
    let (start, end) = span(&run.jobs, &run.segments);
    let unit = TimeUnit::for_span(end - start);
    let types = type_names(run);
    let fail = |e: &dyn std::fmt::Display| ReportError::plot(path, e);
    let height = (120 + 160 * types.len()).clamp(SIZE.1 as usize, 4000) as u32;
    let root = SVGBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(
            &format!("GPUs busy per type: {}", run.name),
            ("sans-serif", 22),
        )
        .map_err(|e| fail(&e))?;
    let panels = root.split_evenly((types.len().max(1), 1));
    for (i, (gpu_type, panel)) in types.iter().zip(panels.iter()).enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let points = busy.get(gpu_type).cloned().unwrap_or_default();
        let capacity = run.capacity.get(gpu_type).copied().unwrap_or(0);
        let top = points
            .iter()
            .map(|p| p.1)
            .max()
            .unwrap_or(0)
            .max(capacity)
            .max(1);
        let last = i + 1 == types.len();
        let mut chart = ChartBuilder::on(panel)
            .margin(8)
            .x_label_area_size(if last { 40 } else { 18 })
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..unit.scale(end - start), 0f64..f64::from(top))
            .map_err(|e| fail(&e))?;
        let mut mesh = chart.configure_mesh();
        mesh.y_desc(format!("{gpu_type} ({capacity})"))
            .y_labels(top.min(8) as usize + 1)
            .y_label_formatter(&|v| format!("{v:.0}"));
        if last {
            mesh.x_desc(format!("time since the first arrival ({})", unit.name()));
        }
        mesh.draw().map_err(|e| fail(&e))?;
        let bars = points.windows(2).filter(|w| w[0].1 > 0).map(|w| {
            Rectangle::new(
                [
                    (unit.scale(w[0].0 - start), 0.0),
                    (unit.scale(w[1].0 - start), f64::from(w[0].1)),
                ],
                colour.mix(0.7).filled(),
            )
        });
        chart.draw_series(bars).map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))
}

/// One row per job (by arrival): a thin grey bar while it waits, then a bar per stretch on
/// GPUs, coloured by type.
pub fn timeline(path: &Path, run: &Run) -> Result<(), ReportError> {
    let rows = timeline_order(&run.jobs);
    let (start, end) = span(&run.jobs, &run.segments);
    let unit = TimeUnit::for_span(end - start);
    let types = type_names(run);
    let row_of: std::collections::HashMap<u64, usize> =
        rows.iter().enumerate().map(|(i, j)| (j.id, i)).collect();
    let n = rows.len().max(1) as f64;
    let x = |t: f64| unit.scale(t - start);
    let fail = |e: &dyn std::fmt::Display| ReportError::plot(path, e);
    let height = (SIZE.1 as usize).max(120 + 6 * rows.len()).min(4000) as u32;
    let root = SVGBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("Jobs over time: {}", run.name), ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..x(end), 0f64..n)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc(format!("time since the first arrival ({})", unit.name()))
        .y_desc("jobs, by arrival")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .disable_y_mesh()
        .draw()
        .map_err(|e| fail(&e))?;
    let waiting = rows.iter().enumerate().filter_map(|(i, j)| {
        let until = j.first_start_s.or(j.finish_s).unwrap_or(end);
        (until > j.arrival_s).then(|| {
            let y = i as f64 + 0.5;
            Rectangle::new(
                [(x(j.arrival_s), y - 0.08), (x(until), y + 0.08)],
                RGBColor(170, 170, 170).filled(),
            )
        })
    });
    chart.draw_series(waiting).map_err(|e| fail(&e))?;
    for (i, gpu_type) in types.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let bars = run
            .segments
            .iter()
            .filter(|s| &s.gpu_type == gpu_type)
            .filter_map(|s| row_of.get(&s.job).map(|&row| (s, row)))
            .map(|(s, row)| {
                let y = row as f64;
                Rectangle::new(
                    [(x(s.start_s), y + 0.15), (x(s.end_s), y + 0.85)],
                    colour.filled(),
                )
            });
        chart
            .draw_series(bars)
            .map_err(|e| fail(&e))?
            .label(gpu_type.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    legend_and_present(&mut chart, &root, path)
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Draws the legend in the lower right corner and writes the file.
fn legend_and_present<'a>(
    chart: &mut Chart<'a, 'a>,
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    path: &Path,
) -> Result<(), ReportError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| ReportError::plot(path, e))?;
    root.present().map_err(|e| ReportError::plot(path, e))
}

/// The run's GPU types: those of the cluster, and any a segment names.
fn type_names(run: &Run) -> Vec<String> {
    let names: BTreeSet<String> = run
        .capacity
        .keys()
        .cloned()
        .chain(run.segments.iter().map(|s| s.gpu_type.clone()))
        .collect();
    names.into_iter().collect()
}

/// A step function's corners from its change points: each value holds until the next change.
fn step_points(points: impl Iterator<Item = (f64, f64)>, initial: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut last = initial;
    for (x, y) in points {
        out.push((x, last));
        out.push((x, y));
        last = y;
    }
    out
}
