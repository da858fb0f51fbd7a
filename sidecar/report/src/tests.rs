use super::*;
use proptest::prelude::*;
use series::{busy_over_time, jct_cdf, span};

fn job(id: u64, arrival: f64, start: Option<f64>, finish: Option<f64>) -> JobRecord {
    JobRecord {
        id,
        kind: "resnet50".into(),
        gpus: 1,
        arrival_s: arrival,
        first_start_s: start,
        finish_s: finish,
        restarts: 0,
    }
}

fn segment(job: u64, start: f64, end: f64, gpu_type: &str, gpus: u32) -> Segment {
    Segment {
        job,
        start_s: start,
        end_s: end,
        node: "n1".into(),
        gpu_type: gpu_type.into(),
        gpus,
    }
}

#[test]
fn cdf_counts_finished_jobs_only_and_ends_at_one() {
    let jobs = [
        job(1, 0.0, Some(0.0), Some(30.0)),
        job(2, 10.0, Some(10.0), Some(20.0)),
        job(3, 0.0, None, None),
    ];
    assert_eq!(jct_cdf(&jobs), vec![(10.0, 0.5), (30.0, 1.0)]);
}

#[test]
fn busy_steps_add_overlaps_and_join_back_to_back_segments() {
    let segs = [
        segment(1, 0.0, 10.0, "v100", 2),
        segment(1, 10.0, 20.0, "v100", 2),
        segment(2, 5.0, 15.0, "v100", 1),
        segment(3, 0.0, 5.0, "k80", 4),
    ];
    let busy = busy_over_time(&segs);
    assert_eq!(busy["v100"], vec![(0.0, 2), (5.0, 3), (15.0, 2), (20.0, 0)]);
    assert_eq!(busy["k80"], vec![(0.0, 4), (5.0, 0)]);
}

#[test]
fn span_covers_arrivals_to_last_end() {
    let jobs = [job(1, 5.0, Some(6.0), Some(9.0))];
    assert_eq!(
        span(&jobs, &[segment(1, 6.0, 12.0, "v100", 1)]),
        (5.0, 12.0)
    );
    assert_eq!(span(&[], &[]), (0.0, 1.0));
}

#[test]
fn report_writes_csv_and_plots_for_each_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| Run {
        name: name.into(),
        jobs: vec![
            job(1, 0.0, Some(0.0), Some(30.0)),
            job(2, 10.0, Some(12.0), Some(40.0)),
        ],
        segments: vec![
            segment(1, 0.0, 30.0, "v100", 1),
            segment(2, 12.0, 40.0, "nvidia_a100-sxm4-80gb", 1),
        ],
        capacity: [
            ("v100".to_string(), 4),
            ("nvidia_a100-sxm4-80gb".to_string(), 4),
        ]
        .into(),
    };
    let files = write_report(dir.path(), &[run("hadar"), run("gavel/max-min")]).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "jobs.csv",
            "jct-cdf.svg",
            "busy-hadar.svg",
            "timeline-hadar.svg",
            "busy-gavel_max-min.svg",
            "timeline-gavel_max-min.svg"
        ]
    );
    let csv = std::fs::read_to_string(dir.path().join("jobs.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 5, "{csv}");
    assert_eq!(
        lines[2],
        "hadar,2,resnet50,1,10.000,12.000,40.000,30.000,2.000,0"
    );
    let timeline = std::fs::read_to_string(dir.path().join("timeline-hadar.svg")).unwrap();
    assert!(timeline.starts_with("<svg"), "an SVG document");
    assert!(
        timeline.contains("nvidia_a100-sxm4-80gb"),
        "the legend names each type"
    );
    let cdf = std::fs::read_to_string(dir.path().join("jct-cdf.svg")).unwrap();
    assert!(
        cdf.contains("gavel/max-min") && cdf.contains("hadar"),
        "one curve per run"
    );
}

#[test]
fn no_runs_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        write_report(dir.path(), &[]),
        Err(ReportError::Empty)
    ));
}

proptest! {
    /// Whatever the segments, busy GPUs are never negative, never above the sum of the
    /// overlapping segments' GPUs, and back at 0 after the last one.
    #[test]
    fn busy_is_bounded_and_returns_to_zero(
        raw in proptest::collection::vec((0u32..100, 1u32..50, 0u32..3, 1u32..5), 1..40)
    ) {
        let types = ["v100", "p100", "k80"];
        let segs: Vec<Segment> = raw
            .iter()
            .enumerate()
            .map(|(i, &(start, len, t, gpus))| {
                segment(i as u64, f64::from(start), f64::from(start + len), types[t as usize], gpus)
            })
            .collect();
        let busy = busy_over_time(&segs);
        for (gpu_type, points) in &busy {
            let total: u32 = segs.iter().filter(|s| &s.gpu_type == gpu_type).map(|s| s.gpus).sum();
            prop_assert_eq!(points.last().unwrap().1, 0);
            for &(t, b) in points {
                let live: u32 = segs
                    .iter()
                    .filter(|s| &s.gpu_type == gpu_type && s.start_s <= t && t < s.end_s)
                    .map(|s| s.gpus)
                    .sum();
                prop_assert_eq!(b, live, "at t={}", t);
                prop_assert!(b <= total);
            }
        }
    }
}
