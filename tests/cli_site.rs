//! `hadar simulate --site` and `hadar dry-run --site` end to end: a site file's rules change
//! the plan as the daemon's would, and a bad file is refused naming what is wrong and where.
//! (`hadar site capture` needs a live Slurm: `tests/site_policy_slurm.rs`.)

#[path = "support/cli.rs"]
mod cli;

use cli::hadar;
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let (out, err, code) = hadar(&all);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn example() -> String {
    format!(
        "{}/tests/data/site-example.toml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The example's QOS `small` lets its six jobs (0-5) hold 4 GPUs in all: under every policy
/// no round gives them more (without the site, some round does), every job still completes,
/// and the output names the file.
#[test]
fn simulate_plans_every_policy_within_the_sites_limits() {
    let site = example();
    let dir = tempfile::tempdir().unwrap();
    for (with_site, most) in [(true, 4), (false, u64::MAX)] {
        let trace = dir.path().join(format!("tracker-{with_site}.jsonl"));
        let mut args = vec![
            "simulate",
            "--policy",
            "hadar,gavel,served",
            "--trace-out",
            trace.to_str().unwrap(),
        ];
        if with_site {
            args.extend(["--site", &site]);
        }
        let v = json(&args);
        for r in v["results"].as_array().unwrap() {
            assert_eq!(r["jobs_completed"], r["jobs"], "{r}");
        }
        let site_field = if with_site {
            Value::from(site.as_str())
        } else {
            Value::Null
        };
        assert_eq!(v["workload"]["site"], site_field);
        // GPUs QOS small's jobs hold, per policy and round.
        let mut held: std::collections::BTreeMap<(String, u64), u64> = Default::default();
        for line in std::fs::read_to_string(&trace).unwrap().lines() {
            let l: Value = serde_json::from_str(line).unwrap();
            if l["job"].as_u64().unwrap() <= 5 {
                let gpus: u64 = l["copies"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["gpus"].as_u64().unwrap())
                    .sum();
                let key = (
                    l["policy"].as_str().unwrap().to_string(),
                    l["round"].as_u64().unwrap(),
                );
                *held.entry(key).or_default() += gpus;
            }
        }
        let peak = held.values().copied().max().unwrap_or(0);
        if with_site {
            assert!(peak <= most, "QOS small held {peak} GPUs in a round");
        } else {
            assert!(
                peak > 4,
                "without the site the jobs would hold more than 4: {peak}"
            );
        }
    }
    let (out, _, code) = hadar(&["simulate", "--policy", "hadar", "--site", &site]);
    assert_eq!(code, 0);
    assert!(
        out.contains("site:    ") && out.contains("8 jobs named"),
        "{out}"
    );
}

/// dry-run: the jobs of QOS `small` beyond its 4 GPUs wait for it, and say so.
#[test]
fn dry_run_says_which_limit_keeps_a_job_waiting() {
    let site = example();
    let v = json(&["dry-run", "--site", &site]);
    assert_eq!(v["site"], site.as_str());
    let jobs = v["jobs"].as_array().unwrap();
    let limited: Vec<&Value> = jobs
        .iter()
        .filter(|j| {
            j["wait"]["limit"]
                .as_str()
                .is_some_and(|w| w.contains("QOS small GrpTRES=gres/gpu=4"))
        })
        .collect();
    assert!(!limited.is_empty(), "{v}");
    let running_small: u64 = jobs
        .iter()
        .take(6)
        .filter(|j| j["decision"] != "wait")
        .map(|j| j["gpus"].as_u64().unwrap())
        .sum();
    assert!(
        running_small <= 4,
        "QOS small holds {running_small} GPUs: {v}"
    );
}

/// A mistyped key, a job past the last and a job named twice are each refused with the file
/// and the place named; nothing is simulated.
#[test]
fn a_bad_site_file_is_refused_naming_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[slurm.config]\nweight_fairshar = 1\n",
            vec!["weight_fairshar"],
        ),
        (
            "[[job]]\njobs = \"0-99\"\nuser = \"a\"\naccount = \"b\"\n",
            vec!["job[0].jobs", "past the last job (39)"],
        ),
        (
            "[[job]]\njobs = \"0-3\"\nuser = \"a\"\naccount = \"b\"\n[[job]]\njobs = \"3\"\nuser = \"c\"\naccount = \"d\"\n",
            vec!["job[1].jobs", "job 3"],
        ),
        (
            "[[job]]\njobs = \"0\"\nuser = \"a\"\naccount = \"b\"\ntime_limit_s = -5\n",
            vec!["job[0].time_limit_s", "positive"],
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("site{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let (out, err, code) = hadar(&["simulate", "--site", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(&format!("site{i}.toml")), "{err}");
        for w in want {
            assert!(err.contains(w), "{w}: {err}");
        }
    }
}
