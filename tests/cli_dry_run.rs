//! `hadar dry-run`: golden files for its table and JSON output, the invariants every plan
//! it prints must keep, and one-line errors naming the job and field for bad jobs files.
//!
//! To regenerate the golden files after an intended change, run the tests with
//! `HADAR_UPDATE_GOLDEN=1` and review the diff.

#[path = "support/golden.rs"]
mod golden;

use golden::check_golden;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs hadar from the workspace root, so relative paths in its output are stable.
fn hadar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hadar"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("run hadar")
}

fn stdout_of(args: &[&str]) -> String {
    let o = hadar(args);
    assert!(
        o.status.success(),
        "hadar {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8 output")
}

/// What every printed plan must satisfy, checked on the JSON independently of the golden
/// text: placed jobs get exactly their GPUs, no (node, type) is over capacity, a waiting job
/// has a reason and no placement, and decisions match the running placements.
fn check_plan_invariants(json: &Value, capacity: &dyn Fn(&str, &str) -> u64) {
    let mut used = std::collections::HashMap::<(String, String), u64>::new();
    for job in json["jobs"].as_array().expect("jobs array") {
        let decision = job["decision"].as_str().expect("decision");
        let parts = job["placement"].as_array().expect("placement array");
        if decision == "wait" {
            assert!(parts.is_empty(), "{job}");
            assert!(job["wait"]["reason"].is_string(), "{job}");
            continue;
        }
        assert!(job["wait"].is_null(), "{job}");
        assert!(job["rate"].as_f64().expect("rate") > 0.0, "{job}");
        let gpus: u64 = parts
            .iter()
            .map(|p| p["gpus"].as_u64().expect("gpus"))
            .sum();
        assert_eq!(
            gpus,
            job["gpus"].as_u64().expect("job gpus"),
            "gang placement: {job}"
        );
        for p in parts {
            let key = (
                p["node"].as_str().unwrap().to_string(),
                p["type"].as_str().unwrap().to_string(),
            );
            *used.entry(key).or_default() += p["gpus"].as_u64().unwrap();
        }
    }
    for ((node, ty), n) in used {
        assert!(n <= capacity(&node, &ty), "{node} {ty}: {n} GPUs given");
    }
}

#[test]
fn embedded_example_table_matches_golden() {
    check_golden("dry_run_example.txt", &stdout_of(&["dry-run"]));
}

#[test]
fn embedded_example_json_matches_golden_and_keeps_the_rules() {
    let out = stdout_of(&["dry-run", "--format", "json"]);
    check_golden("dry_run_example.json", &out);
    let v: Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["policy"], "hadar");
    // The example cluster: nodes of four GPUs of one type.
    check_plan_invariants(&v, &|node, ty| if node.starts_with(ty) { 4 } else { 0 });
    let decision = |id: u64| {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id)
            .map(|j| j["decision"].as_str().unwrap().to_string())
    };
    // The example is written to show these: a kept running job, a job no type can run, one
    // too big for the cluster.
    assert_eq!(decision(1).as_deref(), Some("keep"));
    assert_eq!(decision(7).as_deref(), Some("wait"));
    assert_eq!(decision(8).as_deref(), Some("wait"));
}

#[test]
fn json_jobs_on_a_toml_cluster_match_golden() {
    let args = [
        "dry-run",
        "--cluster",
        "tests/data/dry_run_cluster.toml",
        "--jobs",
        "tests/data/dry_run_jobs.json",
    ];
    let table = stdout_of(&args);
    check_golden("dry_run_custom.txt", &table);
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let out = stdout_of(&json_args);
    check_golden("dry_run_custom.json", &out);
    let v: Value = serde_json::from_str(&out).expect("valid JSON");
    let capacity = |node: &str, ty: &str| match (node, ty) {
        ("mix", _) => 2,
        (n, t) if n.starts_with(t) => 4,
        _ => 0,
    };
    check_plan_invariants(&v, &capacity);
}

#[test]
fn exact_mode_and_other_policies_print_valid_plans() {
    for args in [
        vec!["dry-run", "--exact", "--format", "json"],
        vec!["dry-run", "--max-nodes", "1", "--format", "json"],
        vec!["dry-run", "--policy", "yarn-cs", "--format", "json"],
    ] {
        let v: Value = serde_json::from_str(&stdout_of(&args)).expect("valid JSON");
        check_plan_invariants(&v, &|node, ty| if node.starts_with(ty) { 4 } else { 0 });
    }
}

fn error_of(jobs_text: &str, file_name: &str) -> (String, i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file_name);
    std::fs::write(&path, jobs_text).unwrap();
    let o = hadar(&["dry-run", "--jobs", path.to_str().unwrap()]);
    assert!(o.stdout.is_empty(), "nothing on stdout for bad input");
    (
        String::from_utf8(o.stderr).unwrap(),
        o.status.code().unwrap(),
        path.display().to_string(),
    )
}

fn assert_one_line_error(stderr: &str, code: i32, expect: &str) {
    assert_eq!(code, 2, "exit code for bad input; stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("hadar: error: "), "{stderr}");
    assert!(stderr.contains(expect), "expected `{expect}` in: {stderr}");
}

#[test]
fn bad_toml_jobs_file_names_line_job_and_field() {
    let text = "[[job]]\nid = 5\ngpus = 2\nthroughput = { v100 = 10 }\nremaining_steps = -1\n";
    let (err, code, file) = error_of(text, "q.toml");
    assert_one_line_error(
        &err,
        code,
        &format!("{file}:5: field `remaining_steps`: job 5: must be a positive number, found -1"),
    );
}

#[test]
fn bad_json_jobs_file_names_job_and_field() {
    let text = r#"{"jobs": [{"id": 8, "gpus": 2, "throughput": {"v100": 10}, "remaining_steps": 10,
        "running": [{"node": "nowhere", "type": "v100", "gpus": 2}]}]}"#;
    let (err, code, file) = error_of(text, "q.json");
    assert_one_line_error(
        &err,
        code,
        &format!("{file}: field `running`: job 8: node `nowhere` is not in the cluster"),
    );
}

#[test]
fn a_bound_is_not_a_round_policy() {
    let o = hadar(&["dry-run", "--policy", "lower-bound"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a round policy"));
}

#[test]
fn golden_files_exist() {
    for f in [
        "dry_run_example.txt",
        "dry_run_example.json",
        "dry_run_custom.txt",
        "dry_run_custom.json",
    ] {
        assert!(
            Path::new(&root().join("tests/golden").join(f)).is_file(),
            "{f}"
        );
    }
}

/// `--config FILE` plans as `hadar serve --config FILE` would: the policy `served` and the
/// file's round and restart seconds; the plan keeps every invariant.
#[test]
fn config_plans_with_the_served_policy_and_the_files_round() {
    let config = root().join("etc/hadar.toml");
    let out = stdout_of(&[
        "dry-run",
        "--config",
        config.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["policy"], "served", "{v}");
    assert_eq!(v["round_s"], 360.0);
    assert_eq!(v["restart_s"], 60.0);
    assert!(v["jobs"].as_array().is_some_and(|j| !j.is_empty()), "{v}");
}

/// `--fork-jobs` under `[sidecar] policy = "hadare"` plans the named jobs as HadarE's copies
/// over what the other jobs leave (the mixed round `hadar serve` runs, as `hadar simulate
/// --fork-jobs` does): they are marked forked, and plain gangs and copies together fit every
/// node. Under `policy = "hadar"` the same list changes nothing; a job not in the queue is
/// named.
#[test]
fn fork_jobs_plan_the_mixed_round_under_hadare() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("etc/hadar.toml")).unwrap();
    assert!(text.contains("\npolicy = \"hadar\"\n"));
    let hadare = dir.path().join("hadare.toml");
    std::fs::write(
        &hadare,
        text.replace("\npolicy = \"hadar\"\n", "\npolicy = \"hadare\"\n"),
    )
    .unwrap();
    let plain = root().join("etc/hadar.toml");
    let run = |config: &Path, extra: &[&str]| -> Value {
        let mut args = vec!["dry-run", "--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--format", "json"]);
        serde_json::from_str(&stdout_of(&args)).unwrap()
    };
    let mixed = run(&hadare, &["--fork-jobs", "2,5"]);
    assert_eq!(mixed["policy"], "served", "{mixed}");
    assert_eq!(mixed["fork_jobs"], 2, "{mixed}");
    let jobs = mixed["jobs"].as_array().unwrap();
    let forked: Vec<u64> = jobs
        .iter()
        .filter(|j| j["forked"] == true)
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(forked, vec![2, 5], "{mixed}");
    assert!(
        jobs.iter()
            .any(|j| j["forked"] == true && j["decision"] != "wait"),
        "a forked job runs as copies: {mixed}"
    );
    let mut used = std::collections::HashMap::<String, u64>::new();
    for j in jobs {
        for p in j["placement"].as_array().unwrap() {
            *used.entry(p["node"].as_str().unwrap().into()).or_default() +=
                p["gpus"].as_u64().unwrap();
        }
    }
    assert!(
        used.values().all(|g| *g <= 4),
        "over a node's 4 GPUs: {used:?}"
    );
    let table = stdout_of(&[
        "dry-run",
        "--config",
        hadare.to_str().unwrap(),
        "--fork-jobs",
        "2,5",
    ]);
    assert!(table.contains("copies "), "{table}");

    let as_plain = run(&plain, &["--fork-jobs", "2,5"]);
    let none = run(&plain, &[]);
    assert_eq!(
        as_plain, none,
        "under policy = \"hadar\" forking changes nothing"
    );

    let o = hadar(&[
        "dry-run",
        "--config",
        hadare.to_str().unwrap(),
        "--fork-jobs",
        "2,42",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--fork-jobs") && err.contains("job 42") && err.contains("queue"),
        "{err}"
    );
    let o = hadar(&["dry-run", "--fork-jobs", "2"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--config"));
}
