//! Sia's workloads read as rigid jobs, on small fixtures of our own whose jobs' times alone
//! are worked out by hand from Sia's formulas (`Job.step`, `update_local_bsz`,
//! `get_throughput` and `get_grad_stats` of its simulator).

use hadar_core::{GpuType, Job};
use hadar_formats::{FormatError, SiaCluster, load_sia};
use std::path::PathBuf;

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/sia")
        .join(path)
}

fn load(workload: &str, cluster: &str) -> Result<hadar_formats::SiaWorkload, FormatError> {
    load_sia(
        &fixture(&format!("workloads/{workload}")),
        &fixture("profiles"),
        &SiaCluster::parse(cluster).unwrap(),
    )
}

/// Seconds the job takes alone on type `t`: its steps at its rate there.
fn alone_s(job: &Job, t: u16) -> Option<f64> {
    job.rate_on(GpuType(t)).map(|r| job.total_steps / r)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn jobs_take_the_time_sias_formulas_give() {
    let w = load("good.csv", "aws:2,rtx:1").unwrap();
    assert_eq!(w.cluster.type_names(), ["t4", "rtx2080ti"]);
    assert_eq!(w.cluster.total_gpus(), 16);
    let [a, b, c] = &w.jobs[..] else {
        panic!("three jobs expected, got {}", w.jobs.len())
    };
    // Progress by epoch: min over batch sizes of each epoch's end, 100 then 300, so 100 and
    // 200 to make. Gain g = (var + sqr) / (var / scale + sqr), scale = batch / 16.

    // Job a: 4 GPUs at batch 32 on one T4 node ("4"): local 8, profiled up to 8, so no
    // accumulation; step 0.9 s. At batch 32 (a third of the way from 16 to 64): epoch 0
    // sqr 1, var 1, scale 2: g = 2 / 1.5 = 4/3; epoch 1 sqr 4/3, var 8/3: g = 1.5.
    // Iterations 100 / (4/3) + 200 / 1.5 = 208 1/3; x 0.9 s x slowdown 1.2 = 225 s.
    assert!(close(alone_s(a, 0).unwrap(), 225.0), "{:?}", alone_s(a, 0));
    // On the RTX node local 8 exceeds the 6 profiled: one accumulation of 4 each (batch 32
    // still), iteration 0.4 + (0.4 - 0.05) = 0.75 s: 208 1/3 x 0.75 x 1.2 = 187.5 s.
    assert!(close(alone_s(a, 1).unwrap(), 187.5), "{:?}", alone_s(a, 1));
    // Its steps are iterations at its own batch, and its restart its application's.
    assert!(close(a.total_steps, 625.0 / 3.0));
    assert_eq!((a.workers, a.restart_s, a.arrival_s), (4, Some(120.0), 0.0));
    assert_eq!(a.kind, "bert (batch size 32)");

    // Job b: 8 GPUs at batch 64 on two T4 nodes ("44"): local 8, step 1.0 s; at a validated
    // batch: epoch 0 g = 2 / 1.25 = 1.6, epoch 1 g = 4 / 2.5 = 1.6: 187.5 iterations, 225 s.
    assert!(close(alone_s(b, 0).unwrap(), 225.0), "{:?}", alone_s(b, 0));
    // A whole RTX node ("8") was not profiled: b cannot use that type.
    assert_eq!(alone_s(b, 1), None);

    // Job c: 4 GPUs at batch 64 on a T4 node: local 16 over at most 8, one accumulation of
    // 8: iteration 0.9 + (0.9 - 0.1) = 1.7 s; 187.5 iterations x 1.7 x 1.2 = 382.5 s.
    assert!(close(alone_s(c, 0).unwrap(), 382.5), "{:?}", alone_s(c, 0));
    // On the RTX node: local 16 over at most 6 is 3 passes of 6, capped at 64 / 12 = 5, so it
    // trains at batch 60. Iteration at 5: step 0.475, sync 0.05: 0.475 + 2 x 0.425 = 1.325 s.
    // Gains at 60 (11/12 of the way): scale 3.75; epoch 0 sqr 1, var 1: g = 2 / (1/3.75 + 1);
    // epoch 1 sqr 23/12, var 25/12: g = 4 / (25/12 / 3.75 + 23/12).
    let g0 = 2.0 / (1.0 / 3.75 + 1.0);
    let g1 = 4.0 / (25.0 / 12.0 / 3.75 + 23.0 / 12.0);
    let expected = (100.0 / g0 + 200.0 / g1) * 1.325 * 1.2;
    assert!(
        close(alone_s(c, 1).unwrap(), expected),
        "{:?} vs {expected}",
        alone_s(c, 1)
    );
    assert_eq!(w.notes.len(), 1, "{:?}", w.notes);
    assert!(
        w.notes[0].contains("placement 8 was not profiled"),
        "{:?}",
        w.notes
    );
}

/// The error's text, which must name the file and line.
fn error(workload: &str, cluster: &str) -> String {
    let e = load(workload, cluster)
        .expect_err("bad input must be refused")
        .to_string();
    assert!(e.contains(workload), "{e}: does not name the file");
    e
}

#[test]
fn an_unknown_application_is_named_with_its_line() {
    let e = error("unknown-app.csv", "aws:2");
    assert!(e.contains(":3: field `application`"), "{e}");
    assert!(e.contains("unknown application `gpt_pmp`"), "{e}");
}

#[test]
fn a_missing_profile_is_named_with_the_line_that_needs_it() {
    let e = error("missing-profile.csv", "aws:2");
    assert!(
        e.contains(":3: field `application`") && e.contains("no profile of yolov3"),
        "{e}"
    );
    let e = error("good.csv", "aws:2,dgx-ext:1");
    assert!(e.contains(":2: field `application`"), "{e}");
    assert!(e.contains("placements-dgx-ext.csv is missing"), "{e}");
}

#[test]
fn a_batch_no_placement_was_profiled_for_is_refused() {
    let e = error("unprofiled-batch.csv", "aws:2,rtx:1");
    assert!(e.contains(":3:") && e.contains("can run on no GPU"), "{e}");
    assert!(
        e.contains("placement 44 was not profiled at a local batch size of 2"),
        "{e}"
    );
    let e = error("good.csv", "aws:1");
    assert!(
        e.contains("needs 8 GPUs, more than the cluster's 4 t4"),
        "{e}"
    );
    let e = error("batch-out-of-range.csv", "aws:2");
    assert!(
        e.contains(":2: field `batch_size`") && e.contains("16 to 64"),
        "{e}"
    );
}

#[test]
fn malformed_fields_and_clusters_are_named() {
    let e = error("bad-number.csv", "aws:2");
    assert!(
        e.contains(":3: field `time`") && e.contains("`later`"),
        "{e}"
    );
    for (spec, says) in [
        ("aws:2,h100:1", "`h100` is not one of Sia's clusters"),
        ("aws", "should be KIND:NODES"),
        ("aws:0", "must be 1 to 10000"),
        ("dgx:1,dgx-ext:1", "named twice"),
    ] {
        let e = SiaCluster::parse(spec).unwrap_err().to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
}

#[test]
fn a_copy_with_fewer_gpus_trains_the_jobs_batch_at_that_placements_rate() {
    let w = load("good.csv", "aws:2,rtx:1").unwrap();
    let [a, b, c] = &w.jobs[..] else {
        panic!("three jobs expected, got {}", w.jobs.len())
    };
    let t4 = |j: &Job| j.throughput.curve(GpuType(0)).points().to_vec();
    // Job b (8 GPUs, batch 64) forked onto one T4 node trains batch 64 on "4", exactly as
    // job c does alone: 382.5 s for the same 187.5 iterations, so 187.5 / 382.5 steps/s.
    // Its own 8 GPUs keep their rate (225 s alone).
    let points = t4(b);
    assert_eq!(points.len(), 2, "{points:?}");
    assert_eq!(points[0].0, 4);
    assert!(close(points[0].1, 187.5 / 382.5), "{points:?}");
    assert!(close(b.total_steps / points[1].1, 225.0), "{points:?}");
    assert!(close(alone_s(c, 0).unwrap(), 382.5));
    // Job a has no copy smaller than its 4 GPUs: no placement of 1 to 3 GPUs was profiled.
    assert_eq!(t4(a).iter().map(|p| p.0).collect::<Vec<_>>(), vec![4]);
}
