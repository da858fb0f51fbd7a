//! `hadar bench round` and `hadar bench read-slurm`: their output carries the figures, and bad
//! sizes are refused. (The timings themselves are not asserted: speed belongs to benchmarks.)

use std::process::Command;

fn hadar(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .output()
        .expect("run hadar")
}

#[test]
fn json_reports_median_and_max_for_the_requested_shape() {
    let o = hadar(&[
        "bench",
        "round",
        "--jobs",
        "60",
        "--nodes",
        "8",
        "--gpus-per-node",
        "4",
        "--types",
        "3",
        "--repetitions",
        "3",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let median = v["median_ms"].as_f64().expect("median_ms");
    let max = v["max_ms"].as_f64().expect("max_ms");
    assert!(median > 0.0 && median <= max, "{v}");
    assert_eq!(v["gpus"], 32);
    assert_eq!(v["repetitions"], 3);
    let placed = v["placed"].as_u64().unwrap();
    assert_eq!(
        placed,
        v["admitted"].as_u64().unwrap() + v["filled"].as_u64().unwrap()
    );
    assert!(placed > 0 && placed <= 60);
}

#[test]
fn zero_sizes_are_refused() {
    for flag in [
        "--jobs",
        "--nodes",
        "--gpus-per-node",
        "--types",
        "--repetitions",
        "--excluded-nodes",
    ] {
        let o = hadar(&["bench", "round", flag, "0"]);
        assert_eq!(o.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("{flag}: must be at least 1")),
            "{flag}: {err}"
        );
    }
}

#[test]
fn hadare_round_is_timed_and_named() {
    let o = hadar(&[
        "bench",
        "round",
        "--policy",
        "hadare",
        "--jobs",
        "60",
        "--nodes",
        "8",
        "--gpus-per-node",
        "4",
        "--types",
        "3",
        "--repetitions",
        "3",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["policy"], "hadare");
    let median = v["median_ms"].as_f64().expect("median_ms");
    assert!(
        median > 0.0 && median <= v["max_ms"].as_f64().unwrap(),
        "{v}"
    );
    let placed = v["placed"].as_u64().unwrap();
    assert!(placed > 0 && placed <= 60, "{v}");
    let bad = hadar(&["bench", "round", "--policy", "gavel"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn bench_read_slurm_reads_every_job_in_both_forms() {
    let o = hadar(&["bench", "read-slurm", "--jobs", "37", "--repetitions", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.starts_with("37 jobs, median of 1 runs:"), "{out}");
    assert!(out.contains("  JSON ") && out.contains("  text "), "{out}");
    let o = hadar(&["bench", "read-slurm", "--jobs", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--jobs and --repetitions"));
}
