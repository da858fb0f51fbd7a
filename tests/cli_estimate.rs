//! `hadar estimate`: the estimator judged against Gavel's measured table, through the real
//! binary. The figures asserted are claims that could fail: rank agreement well above chance,
//! and the online refinement reaching 10% for every (job, GPU type) cell.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hadar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .output()
        .expect("run hadar")
}

fn gavel_table() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gavel/simulation_throughputs.json")
}

fn evaluate_json(extra: &[&str]) -> Value {
    let table = gavel_table();
    let mut args = vec![
        "estimate",
        "--evaluate",
        table.to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let o = hadar(&args);
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON document")
}

#[test]
fn evaluation_against_gavel_has_the_promised_structure_and_converges() {
    let v = evaluate_json(&[]);
    let types: Vec<&str> = v["gpu_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types.len(), 3);
    for t in ["k80", "p100", "v100"] {
        assert!(types.contains(&t), "{types:?}");
    }
    assert_eq!(
        v["jobs"].as_array().unwrap().len(),
        26,
        "every Gavel job type has traits"
    );
    assert!(v["skipped_job_types"].as_array().unwrap().is_empty());
    for p in v["per_type"].as_array().unwrap() {
        assert_eq!(p["jobs"], 26);
        let mape = p["mape_pct"].as_f64().unwrap();
        let rho = p["spearman"].as_f64().unwrap();
        let tau = p["kendall"].as_f64().unwrap();
        assert!(mape.is_finite() && mape > 0.0, "{p}");
        // Ranking job types by speed on each GPU must be clearly better than chance.
        assert!(rho > 0.6 && tau > 0.4, "weak rank agreement: {p}");
    }
    let o = &v["overall"];
    assert_eq!(o["points"], 78);
    assert!(o["mape_pct"].as_f64().unwrap() < 100.0, "{o}");
    // The in-sample fit can only be at least as good on the loss it minimises; on MAPE it
    // should not be worse than the honest leave-one-out figure by much either.
    assert!(
        o["in_sample_mape_pct"].as_f64().unwrap() <= o["mape_pct"].as_f64().unwrap() + 1e-9,
        "{o}"
    );

    let r = &v["refinement"];
    assert_eq!(r["cells"], 78);
    assert_eq!(r["reached"], 78, "every cell gets within 10%: {r}");
    assert!(r["median_rounds"].as_f64().unwrap() <= 3.0, "{r}");
    assert!(r["max_rounds_needed"].as_u64().unwrap() <= 10, "{r}");
    assert_eq!(r["within_at_end"], 78, "and stays there with 5% noise: {r}");
    assert_eq!(r["settings"]["noise"], 0.05);
    assert_eq!(r["cross_type"].as_array().unwrap().len(), 3);
}

/// The rate of a GPU type the table lacks (what the daemon uses on an A100): each of Gavel's
/// types held out in turn and predicted from the others. Calibrating on the job's measured
/// types must not be worse than the estimator alone, and must help on most types.
#[test]
fn held_out_gpu_types_are_predicted_better_with_calibration() {
    let v = evaluate_json(&[]);
    let held = v["held_out_gpu_types"].as_array().unwrap();
    let types: Vec<&str> = held
        .iter()
        .map(|h| h["gpu_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["k80", "p100", "v100"]);
    let mut better = 0;
    for h in held {
        assert!(h["points"].as_u64().unwrap() >= 26, "{h}");
        let (c, u) = (
            h["calibrated_mape_pct"].as_f64().unwrap(),
            h["uncalibrated_mape_pct"].as_f64().unwrap(),
        );
        assert!(c <= u + 0.5, "{h}");
        better += usize::from(c < u - 5.0);
    }
    assert!(better >= 2, "{held:?}");
}

#[test]
fn evaluation_is_reproducible_for_a_seed() {
    let a = evaluate_json(&["--seed", "7"]);
    let b = evaluate_json(&["--seed", "7"]);
    assert_eq!(a, b);
}

#[test]
fn unknown_job_types_are_listed_as_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.json");
    std::fs::write(
        &file,
        r#"{"v100": {"('ResNet-50 (batch size 64)', 1)": {"null": 4.4}, "('LM (batch size 20)', 1)": {"null": 64.7},
                     "('MyNet', 1)": {"null": 3.0}},
            "k80": {"('ResNet-50 (batch size 64)', 1)": {"null": 0.62}, "('LM (batch size 20)', 1)": {"null": 17.1}}}"#,
    )
    .unwrap();
    let o = hadar(&[
        "estimate",
        "--evaluate",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["skipped_job_types"], serde_json::json!(["MyNet"]));
    assert_eq!(v["jobs"].as_array().unwrap().len(), 2);
    let table = hadar(&["estimate", "--evaluate", file.to_str().unwrap()]);
    assert!(
        String::from_utf8(table.stdout)
            .unwrap()
            .contains("skipped job types (no traits): MyNet")
    );
}

#[test]
fn bad_input_is_one_line_with_exit_code_2() {
    for args in [
        vec!["estimate", "--evaluate", "/nonexistent/table.json"],
        vec!["estimate", "--job-type", "NoSuchNet"],
        vec!["estimate", "--job-type", "A3C", "--gpus", "v100,tpu9"],
        vec!["estimate", "--job-type", "A3C", "--noise", "1.5"],
    ] {
        let o = hadar(&args);
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("hadar: error: "), "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn job_type_profile_lists_every_requested_gpu() {
    let o = hadar(&[
        "estimate",
        "--job-type",
        "ResNet-50 (batch size 64)",
        "--gpus",
        "k80,A100-40GB,h100",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 3);
    let rate = |i: usize| gpus[i]["rates"][0]["steps_per_s"].as_f64().unwrap();
    assert!(
        rate(0) < rate(1) && rate(1) < rate(2),
        "K80 < A100 < H100 for a compute-heavy job: {v}"
    );
}

#[test]
fn shipped_constants_are_the_fit_on_gavels_table() {
    let fitted = evaluate_json(&[])["constants_all"].clone();
    let o = hadar(&[
        "estimate",
        "--job-type",
        "A3C",
        "--gpus",
        "v100",
        "--format",
        "json",
    ]);
    assert!(o.status.success());
    let shipped = serde_json::from_slice::<Value>(&o.stdout).unwrap()["constants"].clone();
    for field in [
        "efficiency",
        "pre_pascal_factor",
        "step_overhead_s",
        "layer_overhead_s",
    ] {
        let (a, b) = (
            fitted[field].as_f64().unwrap(),
            shipped[field].as_f64().unwrap(),
        );
        assert!(
            (a / b - 1.0).abs() < 1e-3,
            "{field}: fitted {a} vs shipped {b}"
        );
    }
}
