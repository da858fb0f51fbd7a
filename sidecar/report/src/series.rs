//! The series the plots draw, computed without drawing anything (tested on their own).

use crate::{JobRecord, Segment};
use std::collections::BTreeMap;

/// The empirical CDF of the finished jobs' completion times: points `(jct_s, fraction)` with
/// the fraction of jobs done by then, sorted, ending at 1. Empty when no job finished.
pub fn jct_cdf(jobs: &[JobRecord]) -> Vec<(f64, f64)> {
    let mut jcts: Vec<f64> = jobs.iter().filter_map(JobRecord::jct_s).collect();
    jcts.sort_by(f64::total_cmp);
    let n = jcts.len() as f64;
    jcts.into_iter()
        .enumerate()
        .map(|(i, jct)| (jct, (i + 1) as f64 / n))
        .collect()
}

/// GPUs busy per type over time, as a step function per type: points `(t, busy)` where the
/// count changes to `busy` at `t` (each change drawn as a vertical step by the caller),
/// starting at 0 and ending at 0 after the last segment ends. Segments that end where another
/// starts add up in the same instant, so a job kept on its GPUs across rounds shows no dip.
pub fn busy_over_time(segments: &[Segment]) -> BTreeMap<String, Vec<(f64, u32)>> {
    let mut events: BTreeMap<&str, Vec<(f64, i64)>> = BTreeMap::new();
    for s in segments
        .iter()
        .filter(|s| s.end_s > s.start_s && s.gpus > 0)
    {
        let e = events.entry(&s.gpu_type).or_default();
        e.push((s.start_s, i64::from(s.gpus)));
        e.push((s.end_s, -i64::from(s.gpus)));
    }
    events
        .into_iter()
        .map(|(gpu_type, mut e)| {
            e.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut points: Vec<(f64, u32)> = Vec::new();
            let mut busy = 0i64;
            let mut i = 0;
            while i < e.len() {
                let t = e[i].0;
                while i < e.len() && e[i].0 == t {
                    busy += e[i].1;
                    i += 1;
                }
                let value = busy.max(0) as u32;
                if points.last().is_none_or(|&(_, last)| last != value) {
                    points.push((t, value));
                }
            }
            (gpu_type.to_string(), points)
        })
        .collect()
}

/// The order of the timeline's rows: jobs by arrival, then id.
pub fn timeline_order(jobs: &[JobRecord]) -> Vec<&JobRecord> {
    let mut rows: Vec<&JobRecord> = jobs.iter().collect();
    rows.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then(a.id.cmp(&b.id)));
    rows
}

/// The time span a run covers: first arrival to last finish or segment end.
pub fn span(jobs: &[JobRecord], segments: &[Segment]) -> (f64, f64) {
    let starts = jobs.iter().map(|j| j.arrival_s);
    let ends = jobs
        .iter()
        .filter_map(|j| j.finish_s)
        .chain(segments.iter().map(|s| s.end_s));
    let start = starts.fold(f64::INFINITY, f64::min);
    let end = ends.fold(f64::NEG_INFINITY, f64::max);
    match (start.is_finite(), end.is_finite()) {
        (true, true) if end > start => (start, end),
        (true, _) => (start, start + 1.0),
        _ => (0.0, 1.0),
    }
}
