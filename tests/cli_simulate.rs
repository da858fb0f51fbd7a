//! `hadar simulate` end to end: the default run, the JSON contract other tools read, and the
//! Job Tracker written by `--trace-out`.

#[path = "support/cli.rs"]
mod cli;

use cli::hadar;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// `hadar simulate ARGS --format json`, which must succeed, parsed.
fn simulate_json(args: &[&str]) -> Value {
    let mut all = vec!["simulate"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    let (out, err, code) = hadar(&all);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn no_arguments_runs_the_embedded_default() {
    let (out, err, code) = hadar(&["simulate", "--policy", "yarn-cs,hadar,hadare"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("40 jobs"), "{out}");
    for p in ["yarn-cs", "hadar", "hadare"] {
        assert!(
            out.lines().any(|l| l.starts_with(p)),
            "row for {p} in\n{out}"
        );
    }
}

#[test]
fn json_output_keeps_its_field_names() {
    let (out, err, code) = hadar(&["simulate", "--policy", "slurm,hadar", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        for key in [
            "policy",
            "ttd_s",
            "avg_jct_s",
            "p50_jct_s",
            "p95_jct_s",
            "cru",
            "jobs",
            "jobs_completed",
            "restarts",
            "decision_ms_mean",
            "decision_ms_max",
            "avg_queueing_s",
            "ftf_mean",
            "ftf_max",
            "rounds",
        ] {
            assert!(r.get(key).is_some(), "missing {key} in {r}");
        }
        assert_eq!(r["jobs"], r["jobs_completed"]);
        assert!(r["cru"].as_f64().unwrap() > 0.0 && r["cru"].as_f64().unwrap() <= 1.0);
        assert!(r["p95_jct_s"].as_f64().unwrap() >= r["p50_jct_s"].as_f64().unwrap());
    }
}

#[test]
fn the_same_seed_gives_the_same_results() {
    let strip = |s: &str| {
        let mut v: Value = serde_json::from_str(s).unwrap();
        for r in v["results"].as_array_mut().unwrap() {
            r.as_object_mut()
                .unwrap()
                .retain(|k, _| !k.starts_with("decision_ms"));
        }
        v
    };
    let args = [
        "simulate",
        "--policy",
        "yarn-cs,tiresias,hadar,hadare",
        "--format",
        "json",
        "--seed",
        "3",
    ];
    let (a, _, _) = hadar(&args);
    let (b, _, _) = hadar(&args);
    assert_eq!(strip(&a), strip(&b));
}

#[test]
fn the_job_tracker_accounts_for_every_step_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let trace_out = dir.path().join("tracker.jsonl");
    let (out, err, code) = hadar(&[
        "simulate",
        "--policy",
        "hadare",
        "--format",
        "json",
        "--trace-out",
        trace_out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let jobs = serde_json::from_str::<Value>(&out).unwrap()["results"][0]["jobs"]
        .as_u64()
        .unwrap();
    let text = std::fs::read_to_string(&trace_out).unwrap();
    let mut done: HashMap<u64, f64> = HashMap::new();
    let mut last_remaining: HashMap<u64, f64> = HashMap::new();
    let mut forked_rounds = 0;
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["policy"], "hadare");
        assert_eq!(r["kind"], "forked");
        let copies = r["copies"].as_array().unwrap();
        let nodes: HashSet<&str> = copies.iter().map(|c| c["node"].as_str().unwrap()).collect();
        assert_eq!(
            nodes.len(),
            copies.len(),
            "copies of one job never share a node: {line}"
        );
        let sum: f64 = copies.iter().map(|c| c["steps"].as_f64().unwrap()).sum();
        let agg = r["aggregated_steps"].as_f64().unwrap();
        assert!(
            (sum - agg).abs() <= 1e-6 * agg.max(1.0),
            "aggregated = sum of copies: {line}"
        );
        let w: f64 = copies.iter().map(|c| c["weight"].as_f64().unwrap()).sum();
        assert!((w - 1.0).abs() < 1e-9, "{line}");
        if copies.len() > 1 {
            forked_rounds += 1;
        }
        let job = r["job"].as_u64().unwrap();
        *done.entry(job).or_default() += agg;
        last_remaining.insert(job, r["remaining_steps"].as_f64().unwrap());
    }
    assert_eq!(done.len() as u64, jobs, "every job appears");
    assert!(
        last_remaining.values().all(|r| *r == 0.0),
        "every job ends with nothing left"
    );
    assert!(forked_rounds > 0, "some job ran as several copies");
}

#[test]
fn estimated_throughputs_still_complete_every_job() {
    let v = simulate_json(&[
        "--throughput-source",
        "estimated",
        "--policy",
        "gavel,hadar,hadare,slurm",
    ]);
    assert_eq!(v["workload"]["throughput_source"], "estimated");
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["jobs"], r["jobs_completed"], "{r}");
    }
    // Planning with estimates never beats planning with the truth by much on this workload,
    // and is measurably different for Gavel (whose LP relies on the rates).
    let (truth, _, _) = hadar(&["simulate", "--policy", "gavel", "--format", "json"]);
    let t: Value = serde_json::from_str(&truth).unwrap();
    let est_gavel = v["results"][0]["ttd_s"].as_f64().unwrap();
    let true_gavel = t["results"][0]["ttd_s"].as_f64().unwrap();
    assert_ne!(est_gavel, true_gavel);
}

#[test]
fn estimated_throughputs_need_known_job_traits() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.json");
    std::fs::write(&table, r#"{"v100": {"('MyModel', 1)": {"null": 2.0}}}"#).unwrap();
    let trace = dir.path().join("x.trace");
    std::fs::write(
        &trace,
        "MyModel\tpython3 x.py\t.\t--steps\t0\t100\t1\t1\t-1\t0\n",
    )
    .unwrap();
    let (out, err, code) = hadar(&[
        "simulate",
        "--cluster",
        "v100:2",
        "--trace",
        trace.to_str().unwrap(),
        "--throughputs",
        table.to_str().unwrap(),
        "--throughput-source",
        "estimated",
        "--policy",
        "hadar",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains(
            "--throughput-source estimated: no job traits are known for job type `MyModel`"
        ),
        "{err}"
    );
}

/// Tiresias' thresholds and promotion knob reach the policy (a single queue without
/// promotion is plain FIFO and runs this workload differently from the defaults), and
/// unusable values are refused with the flag named.
#[test]
fn tiresias_settings_reach_the_policy_and_bad_ones_are_refused() {
    let run = |extra: &[&str]| {
        let mut args = vec!["--policy", "tiresias"];
        args.extend_from_slice(extra);
        simulate_json(&args)["results"][0]["avg_jct_s"]
            .as_f64()
            .unwrap()
    };
    let defaults = run(&[]);
    assert_eq!(
        defaults,
        run(&[
            "--tiresias-thresholds",
            "3250,7200",
            "--tiresias-promote-knob",
            "8"
        ]),
        "the defaults are 3250,7200 and 8"
    );
    let fifo = run(&[
        "--tiresias-thresholds",
        "none",
        "--tiresias-promote-knob",
        "off",
    ]);
    assert_ne!(defaults, fifo);
    for (flag, value, says) in [
        (
            "--tiresias-thresholds",
            "7200,3250",
            "above the previous one",
        ),
        ("--tiresias-thresholds", "10,abc", "`abc` is not a number"),
        ("--tiresias-promote-knob", "-1", "positive finite"),
        (
            "--tiresias-promote-knob",
            "never",
            "neither a number nor `off`",
        ),
    ] {
        let (_, err, code) = hadar(&["simulate", "--policy", "tiresias", flag, value]);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
}

/// Hadar's weights and margins refuse mistyped values (a negative weight, `nan`, a share over
/// 1) with the flag named, instead of quietly turning the feature off.
#[test]
fn mistyped_hadar_weights_are_refused_not_turned_off() {
    for (flag, value, says) in [
        ("--guard-margin-share", "nan", "is not a number"),
        ("--guard-margin-share", "1.5", "share from 0 to 1"),
        ("--criticality", "-1", "0 or more"),
        ("--type-pressure", "inf", "finite number"),
        ("--guard-margin", "two", "is not a number"),
        ("--guard-type-tolerance", "-0.1", "0 or more"),
    ] {
        let (_, err, code) = hadar(&["simulate", flag, value]);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
    let (_, err, code) = hadar(&[
        "simulate",
        "--guard-type-tolerance",
        "inf",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "`inf` turns the type tolerance off: {err}");
}

/// A what-if on GPUs Gavel did not measure: the run completes every job, the A100s are used,
/// and the output says which types were estimated and which no job can use.
#[test]
fn gpus_gavel_did_not_measure_are_estimated_and_said_so() {
    let v = simulate_json(&["--cluster", "a100:4,k80:4,x100:2", "--policy", "hadar"]);
    assert_eq!(
        v["workload"]["estimated_gpu_types"],
        serde_json::json!(["a100"])
    );
    assert_eq!(
        v["workload"]["unusable_gpu_types"],
        serde_json::json!(["x100"])
    );
    let r = &v["results"][0];
    assert_eq!(r["jobs_completed"], r["jobs"]);
    assert!(
        r["utilisation_by_type"]["a100"].as_f64().unwrap() > 0.5,
        "{r}"
    );
    assert_eq!(r["utilisation_by_type"]["x100"].as_f64(), Some(0.0), "{r}");
    let (text, err, code) = hadar(&[
        "simulate",
        "--cluster",
        "a100:4,k80:4,x100:2",
        "--policy",
        "hadar",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("note:    a100 not in the throughput table"),
        "{text}"
    );
    assert!(text.contains("note:    x100 in neither"), "{text}");
}

/// `--report DIR`: per-job CSV whose JCTs average to the summary's, and the SVG plots.
#[test]
fn report_writes_per_job_csv_matching_the_summary_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let v = simulate_json(&[
        "--policy",
        "gavel,hadar",
        "--report",
        report.to_str().unwrap(),
    ]);
    let csv = std::fs::read_to_string(report.join("jobs.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut jcts: HashMap<String, Vec<f64>> = HashMap::new();
    for line in lines {
        // The kind column may hold a quoted name with commas; the run and the numbers do not.
        let fields: Vec<&str> = line.split(',').collect();
        let from_end = header.len() - col("jct_s");
        let jct: f64 = fields[fields.len() - from_end].parse().unwrap();
        jcts.entry(fields[col("run")].to_string())
            .or_default()
            .push(jct);
    }
    for result in v["results"].as_array().unwrap() {
        let policy = result["policy"].as_str().unwrap();
        let rows = &jcts[policy];
        assert_eq!(
            rows.len() as u64,
            result["jobs"].as_u64().unwrap(),
            "{policy}: a row per job"
        );
        let mean = rows.iter().sum::<f64>() / rows.len() as f64;
        let summary = result["avg_jct_s"].as_f64().unwrap();
        assert!(
            (mean - summary).abs() < 0.01,
            "{policy}: CSV mean JCT {mean} vs summary {summary}"
        );
    }
    for file in [
        "jct-cdf.svg",
        "busy-hadar.svg",
        "timeline-hadar.svg",
        "busy-gavel.svg",
        "timeline-gavel.svg",
    ] {
        let svg = std::fs::read_to_string(report.join(file)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{file} is a whole SVG"
        );
    }
}

/// A site's GPU type names: `V100M32` finds the V100 32 GB by itself; an internal code is
/// unusable until `--gpu-types` rates it, and then its GPUs are used.
#[test]
fn site_gpu_type_names_are_rated_by_name_or_by_gpu_types() {
    let cluster = ["--cluster", "V100M32:4,zq7:4", "--policy", "hadar"];
    let v = simulate_json(&cluster);
    assert_eq!(
        v["workload"]["estimated_gpu_types"],
        serde_json::json!(["v100m32"])
    );
    assert_eq!(
        v["workload"]["unusable_gpu_types"],
        serde_json::json!(["zq7"])
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hadar.toml");
    std::fs::write(
        &file,
        "[gpu_types]\nzq7 = { model = \"v100\", speed = 2.0 }\n",
    )
    .unwrap();
    let v = simulate_json(&[&cluster[..], &["--gpu-types", file.to_str().unwrap()]].concat());
    assert_eq!(v["workload"]["unusable_gpu_types"], serde_json::json!([]));
    let used = v["results"][0]["utilisation_by_type"]["zq7"]
        .as_f64()
        .unwrap();
    assert!(used > 0.0, "{v}");
    std::fs::write(&file, "[gpu_types]\nzq7 = \"rtx9090\"\n").unwrap();
    let args = [
        &["simulate"][..],
        &cluster[..],
        &["--gpu-types", file.to_str().unwrap()],
    ]
    .concat();
    let (_, err, code) = hadar(&args);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("gpu_types.zq7") && err.contains("rtx9090"),
        "{err}"
    );
}

/// `--config etc/hadar.toml` runs what `hadar serve --config etc/hadar.toml` runs: the policy
/// `served` with the file's round and restart seconds, on Gavel's traces and on the few-jobs
/// scenario, and every job completes.
#[test]
fn config_runs_the_served_policy_on_gavel_traces_and_the_few_jobs_scenario() {
    let root = env!("CARGO_MANIFEST_DIR");
    let config = format!("{root}/etc/hadar.toml");
    let few_jobs = format!("{root}/tests/data/few-jobs.trace");
    let physical = format!("{root}/tests/data/physical-cluster.toml");
    let gavel = format!("{root}/data/gavel/traces/static_multigpu_40jobs_seed10.trace");
    for (trace, cluster, per_node) in [
        (few_jobs.as_str(), physical.as_str(), "1"),
        (gavel.as_str(), "v100:8,p100:8,k80:8", "4"),
    ] {
        let v = simulate_json(&[
            "--config",
            &config,
            "--trace",
            trace,
            "--cluster",
            cluster,
            "--gpus-per-node",
            per_node,
        ]);
        assert_eq!(v["workload"]["round_s"], 360.0, "{v}");
        assert_eq!(v["workload"]["restart_s"], 60.0, "{v}");
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 1, "only `served` by default: {v}");
        let r = &results[0];
        assert_eq!(r["policy"], "served");
        assert_eq!(r["jobs_completed"], r["jobs"], "{trace}: {r}");
        assert!(r["ttd_s"].as_f64().unwrap() > 0.0);
    }
    // The file's round length is the one used: the flag is refused beside it.
    let (_, err, code) = hadar(&["simulate", "--config", &config, "--round-s", "60"]);
    assert_ne!(code, 0);
    assert!(err.contains("--round-s"), "{err}");
    // A bad file is named.
    let (_, err, code) = hadar(&["simulate", "--config", "/nonexistent/hadar.toml"]);
    assert_ne!(code, 0);
    assert!(err.contains("/nonexistent/hadar.toml"), "{err}");
}

/// `[sidecar] policy = "gavel"` or `"tiresias"` in the file: `--config` runs that policy
/// inside the served passes, as `hadar serve` would, so the same trace ends differently than
/// under Hadar; a policy `hadar serve` cannot run is refused with the file and key named.
#[test]
fn config_serves_the_policy_the_file_names() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let gavel_trace = format!("{root}/data/gavel/traces/static_multigpu_40jobs_seed10.trace");
    let mut avg_jct = Vec::new();
    for policy in ["hadar", "gavel", "tiresias"] {
        let config = dir.path().join(format!("{policy}.toml"));
        std::fs::write(
            &config,
            format!("[sidecar]\nround_seconds = 360\npolicy = \"{policy}\"\n"),
        )
        .unwrap();
        let v = simulate_json(&[
            "--config",
            config.to_str().unwrap(),
            "--trace",
            &gavel_trace,
            "--cluster",
            "v100:8,p100:8,k80:8",
            "--gpus-per-node",
            "4",
        ]);
        let r = &v["results"][0];
        assert_eq!(r["policy"], "served", "{v}");
        assert_eq!(r["jobs_completed"], r["jobs"], "{policy}: {r}");
        avg_jct.push(r["avg_jct_s"].as_f64().unwrap());
    }
    assert!(
        avg_jct[0] != avg_jct[1] && avg_jct[0] != avg_jct[2] && avg_jct[1] != avg_jct[2],
        "three policies, three outcomes: {avg_jct:?}"
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[sidecar]\npolicy = \"lower-bound\"\n").unwrap();
    let (_, err, code) = hadar(&["simulate", "--config", bad.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("bad.toml") && err.contains("cannot be served") && err.contains("tiresias"),
        "{err}"
    );
}

/// The cluster model's costs lengthen a run and bad figures are refused with the flag named.
#[test]
fn the_cluster_model_costs_time_and_refuses_bad_figures() {
    let plain = simulate_json(&["--policy", "served"]);
    let modelled = simulate_json(&["--policy", "served", "--start-latency-s", "60"]);
    let ttd = |v: &Value| v["results"][0]["ttd_s"].as_f64().unwrap();
    assert!(
        ttd(&modelled) > ttd(&plain),
        "{} vs {}",
        ttd(&modelled),
        ttd(&plain)
    );
    let (_, err, code) = hadar(&["simulate", "--start-latency-s", "400"]);
    assert_ne!(code, 0);
    assert!(err.contains("cluster model"), "{err}");
}

/// `--config` with `[sidecar] policy = "hadare"` and `--fork-jobs` runs the mixed round
/// `hadar serve` runs: the named jobs as HadarE's copies over what the others leave, the
/// others as `served`'s gangs; every job completes. With every job forked it is HadarE;
/// under `policy = "hadar"` the named jobs run as plain jobs, as on the cluster.
#[test]
fn config_with_fork_jobs_runs_the_mixed_round() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(format!("{root}/etc/hadar.toml")).unwrap();
    assert!(text.contains("\npolicy = \"hadar\"\n"));
    let hadare = dir.path().join("hadare.toml");
    std::fs::write(
        &hadare,
        text.replace("\npolicy = \"hadar\"\n", "\npolicy = \"hadare\"\n"),
    )
    .unwrap();
    let hadare = hadare.to_str().unwrap();
    let plain = format!("{root}/etc/hadar.toml");
    let few_jobs = format!("{root}/tests/data/few-jobs.trace");
    let physical = format!("{root}/tests/data/physical-cluster.toml");
    let tracker = dir.path().join("tracker.jsonl");
    let workload = ["--trace", &few_jobs, "--cluster", &physical];
    let run = |config: &str, extra: &[&str]| {
        let mut args = vec!["--config", config];
        args.extend_from_slice(&workload);
        args.extend_from_slice(extra);
        simulate_json(&args)
    };
    let ttd = |v: &Value| v["results"][0]["ttd_s"].as_f64().unwrap();

    let mixed = run(
        hadare,
        &[
            "--fork-jobs",
            "1,3",
            "--trace-out",
            tracker.to_str().unwrap(),
        ],
    );
    assert_eq!(mixed["workload"]["fork_jobs"], 2, "{mixed}");
    assert_eq!(mixed["workload"]["forked_by_hadare"], true);
    let r = &mixed["results"][0];
    assert_eq!(r["policy"], "served");
    assert_eq!(r["jobs_completed"], 4, "{r}");
    let lines: Vec<Value> = std::fs::read_to_string(&tracker)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds = |job: u64| -> HashSet<String> {
        lines
            .iter()
            .filter(|l| l["job"] == job)
            .map(|l| l["kind"].as_str().unwrap().to_string())
            .collect()
    };
    for job in [1, 3] {
        assert_eq!(
            kinds(job),
            HashSet::from(["forked".to_string()]),
            "job {job}"
        );
    }
    for job in [0, 2] {
        assert_eq!(kinds(job), HashSet::from(["gang".to_string()]), "job {job}");
    }
    // In every round, plain gangs and forked copies together fit each node's GPUs.
    let capacity: HashMap<&str, u32> = [
        ("v100-a", 4),
        ("p100-a", 4),
        ("p100-b", 4),
        ("k80-a", 4),
        ("k80-b", 4),
        ("mixed", 4),
    ]
    .into();
    let mut used: HashMap<(u64, String), u32> = HashMap::new();
    for l in &lines {
        for c in l["copies"].as_array().unwrap() {
            let node = c["node"].as_str().unwrap().to_string();
            *used
                .entry((l["round"].as_u64().unwrap(), node))
                .or_default() += c["gpus"].as_u64().unwrap() as u32;
        }
    }
    for ((round, node), gpus) in &used {
        assert!(
            gpus <= &capacity[node.as_str()],
            "round {round}: {node} {gpus}"
        );
    }

    // Every job forked: the mixed round is HadarE (the file's [hadare]).
    let all = run(hadare, &["--fork-jobs", "all"]);
    let alone = run(hadare, &["--policy", "hadare"]);
    assert_eq!(all["workload"]["fork_jobs"], 4);
    assert_eq!(ttd(&all), ttd(&alone), "{all}\n{alone}");
    // A forked job's copies are new jobs every round: keeping types holds it to none.
    let kept = run(hadare, &["--policy", "hadare", "--keeps-types"]);
    assert_eq!(ttd(&kept), ttd(&alone));
    // On the daemon's clock a forked job ends when the round after its copies counts them:
    // on a round's end (360 s rounds from the first arrival), never sooner than otherwise.
    let clocked = run(hadare, &["--policy", "hadare", "--fixed-rounds"]);
    assert_eq!(ttd(&clocked) % 360.0, 0.0, "{clocked}");
    assert!(ttd(&clocked) >= ttd(&alone), "{clocked}\n{alone}");

    // Under policy = "hadar" the same jobs run as plain ones.
    let as_plain = run(&plain, &["--fork-jobs", "1,3"]);
    assert_eq!(as_plain["workload"]["forked_by_hadare"], false);
    assert_eq!(ttd(&as_plain), ttd(&run(&plain, &[])));

    // Bad lists are named; without --config there is no policy to fork by.
    let (_, err, code) = hadar(&[
        "simulate",
        "--config",
        hadare,
        "--trace",
        &few_jobs,
        "--cluster",
        &physical,
        "--fork-jobs",
        "2,9",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--fork-jobs") && err.contains("job 9"),
        "{err}"
    );
    let (_, err, code) = hadar(&["simulate", "--fork-jobs", "x"]);
    assert_ne!(code, 0);
    assert!(err.contains("--config"), "{err}");
}
