//! `hadar simulate` on bad input: every mistake is one line on stderr naming the place,
//! exit code 2, nothing on stdout, and no output file claimed as a result.

use std::path::Path;
use std::process::{Command, Output};

fn hadar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .output()
        .expect("run hadar")
}

fn gavel_data() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gavel")
}

const GOOD_LINE: &str =
    "ResNet-18 (batch size 32)\tpython3 main.py\tdir\t--num_steps\t1\t3000\t1\t1\t-1.000000\t0";

/// Runs `simulate` on a trace with `bad` as its second line and returns (stderr, code).
fn with_trace_line(bad: &str) -> (String, i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.trace");
    std::fs::write(&trace, format!("{GOOD_LINE}\n{bad}\n")).unwrap();
    let out_file = dir.path().join("out.json");
    let o = hadar(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--out",
        out_file.to_str().unwrap(),
    ]);
    assert!(
        !out_file.exists(),
        "no output file may be written on bad input"
    );
    let trace_name = trace.display().to_string();
    (
        String::from_utf8(o.stderr).unwrap(),
        o.status.code().unwrap(),
        trace_name,
    )
}

fn assert_one_line_error(stderr: &str, code: i32, expect: &str) {
    assert_eq!(code, 2, "exit code for bad input; stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("hadar: error: "), "{stderr}");
    assert!(stderr.contains(expect), "expected `{expect}` in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn wrong_column_count_names_file_and_line() {
    let (err, code, file) = with_trace_line("ResNet-18 (batch size 32)\tpython3\t1\t2");
    assert_one_line_error(
        &err,
        code,
        &format!("{file}:2: expected 10 tab-separated fields"),
    );
}

#[test]
fn negative_field_names_the_field() {
    let (err, code, file) = with_trace_line(
        "ResNet-18 (batch size 32)\tpython3 main.py\tdir\t--num_steps\t1\t-3000\t1\t1\t-1\t0",
    );
    assert_one_line_error(
        &err,
        code,
        &format!("{file}:2: field `total_steps`: steps must be positive"),
    );
}

#[test]
fn non_numeric_field_names_the_field() {
    let (err, code, file) = with_trace_line(
        "ResNet-18 (batch size 32)\tpython3 main.py\tdir\t--num_steps\t1\t3000\tfour\t1\t-1\t0",
    );
    assert_one_line_error(
        &err,
        code,
        &format!("{file}:2: field `scale_factor`: expected a whole number, found `four`"),
    );
}

#[test]
fn unknown_job_type_names_the_type() {
    let (err, code, file) = with_trace_line(
        "GPT-9 (batch size 1)\tpython3 main.py\tdir\t--num_steps\t1\t3000\t1\t1\t-1\t0",
    );
    assert_one_line_error(
        &err,
        code,
        &format!("{file}:2: field `job_type`: unknown job type `GPT-9 (batch size 1)`"),
    );
}

#[test]
fn a_job_that_can_run_nowhere_is_named() {
    // ResNet-50 (batch size 128) with 2 workers has a zero rate on K80; a K80-only cluster
    // can never run it.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("k80.trace");
    std::fs::write(
        &trace,
        "ResNet-50 (batch size 128)\tpython3 main.py\tdir\t--num_steps\t1\t3000\t2\t1\t-1\t0\n",
    )
    .unwrap();
    let o = hadar(&[
        "simulate",
        "--cluster",
        "k80:8",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_one_line_error(&err, o.status.code().unwrap(), "could never run");
    assert!(o.stdout.is_empty());
}

#[test]
fn a_cluster_with_zero_gpus_is_refused() {
    let o = hadar(&["simulate", "--cluster", "v100:0,k80:0"]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_one_line_error(
        &err,
        o.status.code().unwrap(),
        "--cluster: the cluster has no GPUs",
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn a_cluster_file_error_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.toml");
    std::fs::write(&f, "[[node]]\nname = \"n1\"\ngpus = { v100 = \"four\" }\n").unwrap();
    let o = hadar(&["simulate", "--cluster", f.to_str().unwrap()]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_one_line_error(
        &err,
        o.status.code().unwrap(),
        &format!("{}:3:", f.display()),
    );
}

#[test]
fn an_unknown_policy_is_named_with_the_known_ones() {
    let o = hadar(&["simulate", "--policy", "gavel,fifo-magic"]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_one_line_error(
        &err,
        o.status.code().unwrap(),
        "--policy: unknown policy `fifo-magic`; known policies: ",
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn a_bad_throughput_table_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.json");
    std::fs::write(&f, "{\"v100\": {\"('A', 1)\": {\"null\": \"fast\"}}}").unwrap();
    let o = hadar(&["simulate", "--throughputs", f.to_str().unwrap()]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_one_line_error(
        &err,
        o.status.code().unwrap(),
        &format!(
            "{}:1: field `('A', 1)`: the \"null\" rate must be a number",
            f.display()
        ),
    );
}

#[test]
fn a_missing_file_is_named() {
    let o = hadar(&["simulate", "--trace", "/nonexistent/x.trace"]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_one_line_error(
        &err,
        o.status.code().unwrap(),
        "/nonexistent/x.trace: cannot read",
    );
}

#[test]
fn bad_round_and_restart_lengths_are_refused() {
    for (args, expect) in [
        (
            vec!["simulate", "--round-s", "0"],
            "--round-s: must be a positive",
        ),
        (
            vec!["simulate", "--restart-s", "400"],
            "--restart-s: must be at least 0 and at most the round length (360 s), got 400",
        ),
        (
            vec!["simulate", "--gpus-per-node", "0", "--cluster", "v100:4"],
            "--gpus-per-node: must be at least 1",
        ),
    ] {
        let o = hadar(&args);
        let err = String::from_utf8(o.stderr).unwrap();
        assert_one_line_error(&err, o.status.code().unwrap(), expect);
    }
}

#[test]
fn a_config_restart_beyond_its_round_names_the_config_key() {
    // The daemon accepts a restart longer than a round; the simulator cannot play one, and
    // must say so in the file's terms, not as a flag the user never gave.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hadar.toml");
    std::fs::write(
        &config,
        "[sidecar]\nround_seconds = 120\nrestart_seconds = 300\n",
    )
    .unwrap();
    let o = hadar(&["simulate", "--config", config.to_str().unwrap()]);
    let err = String::from_utf8(o.stderr).unwrap();
    let expect = format!(
        "{}: sidecar.restart_seconds: must be at least 0 and at most the round length (120 s), got 300",
        config.display()
    );
    assert_one_line_error(&err, o.status.code().unwrap(), &expect);
}

#[test]
fn a_restart_of_a_whole_round_is_played() {
    // The test cluster's daemon runs 3 s rounds with 3 s restarts; the simulator plays that.
    let o = hadar(&[
        "simulate",
        "--policy",
        "hadar",
        "--round-s",
        "60",
        "--restart-s",
        "60",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `hadar simulate --policy POLICIES --out OUT_FILE` and `extra` on static multi-GPU 120 at
/// a restart of a whole round, where Gavel moves every job it runs each round.
fn at_whole_round_restarts(policies: &str, out_file: &Path, extra: &[&str]) -> Output {
    let trace = gavel_data().join("traces/static_multigpu_120jobs_seed11.trace");
    let mut args = vec![
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        policies,
        "--restart-s",
        "360",
        "--out",
        out_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    hadar(&args)
}

#[test]
fn a_policy_whose_jobs_never_advance_is_stopped_with_a_reason() {
    // Gavel moves every job it runs each round; with a restart of a whole round none
    // advances after its first round. The run stops with the reason, writes no result, and
    // does not play on to the round limit.
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("out.json");
    let o = at_whole_round_restarts("gavel", &out_file, &[]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("policy `gavel` made no progress for 1000 rounds in a row")
            && err.contains("120 jobs left")
            && err.contains("restarting (360 s)"),
        "{err}"
    );
    assert!(!out_file.exists(), "no result may be written");
}

#[test]
fn the_policies_that_finish_are_shown_when_another_fails() {
    // Gavel cannot advance at a restart of a whole round; Hadar keeps its jobs in place and
    // ends. The comparison of the bound and Hadar is printed, Gavel's error and a summary
    // follow, and no output file is written (it would lack a policy asked for).
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("out.json");
    let trace_file = dir.path().join("tracker.jsonl");
    let o = at_whole_round_restarts(
        "lower-bound,gavel,hadar",
        &out_file,
        &["--trace-out", trace_file.to_str().unwrap()],
    );
    let out = String::from_utf8(o.stdout).unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(1), "{err}");
    let row = |name: &str| out.lines().any(|l| l.starts_with(&format!("{name} ")));
    assert!(row("lower-bound") && row("hadar") && !row("gavel"), "{out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].contains("policy `gavel` made no progress"),
        "{err}"
    );
    assert_eq!(
        lines[1],
        "hadar: error: 1 of 3 policies did not finish (`gavel`); the comparison above shows \
         the others; --out, --trace-out not written"
    );
    assert!(
        !out_file.exists() && !trace_file.exists(),
        "no result may be written"
    );
}

#[test]
fn the_gavel_data_is_in_the_repository() {
    // The fidelity tests read data/gavel inside the repository: a clone needs nothing beside it.
    assert!(
        gavel_data().join("reference-results.json").is_file(),
        "{}",
        gavel_data().display()
    );
}

/// The Sia-format fixtures of `hadar-formats` (our own small files, not Sia's).
fn sia_fixture(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sidecar/formats/tests/data/sia")
        .join(path)
        .display()
        .to_string()
}

#[test]
fn a_bad_sia_workload_is_named_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("out.json");
    let profiles = sia_fixture("profiles");
    for (workload, expect) in [
        (
            "unknown-app.csv",
            "unknown-app.csv:3: field `application`: unknown application",
        ),
        (
            "missing-profile.csv",
            "missing-profile.csv:3: field `application`: no profile of yolov3",
        ),
        (
            "unprofiled-batch.csv",
            "unprofiled-batch.csv:3: job bert-1 can run on no GPU",
        ),
    ] {
        let o = hadar(&[
            "simulate",
            "--sia-workload",
            &sia_fixture(&format!("workloads/{workload}")),
            "--sia-profiles",
            &profiles,
            "--sia-cluster",
            "aws:2,rtx:1",
            "--out",
            out_file.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8(o.stderr).unwrap();
        assert_one_line_error(&stderr, o.status.code().unwrap(), expect);
        assert!(o.stdout.is_empty(), "{workload}: nothing on stdout");
        assert!(
            !out_file.exists(),
            "{workload}: no output file on bad input"
        );
    }
}

#[test]
fn a_missing_profiles_folder_and_a_bad_fork_efficiency_name_their_flags() {
    let o = hadar(&[
        "simulate",
        "--sia-workload",
        &sia_fixture("workloads/good.csv"),
        "--sia-profiles",
        "/nonexistent-sia-profiles",
    ]);
    let stderr = String::from_utf8(o.stderr).unwrap();
    assert_one_line_error(
        &stderr,
        o.status.code().unwrap(),
        "--sia-profiles: /nonexistent-sia-profiles is not a folder",
    );
    for bad in ["0", "1.5", "nan", "-1"] {
        let o = hadar(&["simulate", &format!("--fork-efficiency={bad}")]);
        let stderr = String::from_utf8(o.stderr).unwrap();
        assert_one_line_error(
            &stderr,
            o.status.code().unwrap(),
            "--fork-efficiency: must be above 0 and at most 1",
        );
    }
}

#[test]
fn a_sia_workload_plays_with_a_note_for_the_types_a_job_cannot_use() {
    let o = hadar(&[
        "simulate",
        "--sia-workload",
        &sia_fixture("workloads/good.csv"),
        "--sia-profiles",
        &sia_fixture("profiles"),
        "--sia-cluster",
        "aws:2,rtx:1",
        "--policy",
        "gavel,hadar,lower-bound",
        "--format",
        "json",
    ]);
    let stderr = String::from_utf8(o.stderr).unwrap();
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "note: 1 job(s) of bert x8 batch 64: on rtx2080ti: placement 8 was not profiled"
        ),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results.iter().filter(|r| r["policy"] != "lower-bound") {
        assert_eq!(r["jobs_completed"], 3, "{r}");
        // Alone at their best the jobs take 187.5 s, 225 s and 297.2 s
        // (sidecar/formats/tests/sia.rs), and each pays bert's 120 s restart at its first
        // start, as Sia charges it: their mean JCT is at least 356.6 s (236.6 s without).
        assert!(r["avg_jct_s"].as_f64().unwrap() >= 356.5, "{r}");
    }
}
