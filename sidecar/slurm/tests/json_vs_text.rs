//! Slurm's JSON and text answers, captured from real test clusters at the same moment (each
//! release's folder under `tests/data/`, commands run with `TZ=UTC` as the adapter runs them),
//! read into the same nodes and jobs; and bad JSON refused with a message naming the fault.

use hadar_slurm::{job, json, node};
use std::path::{Path, PathBuf};

fn data(release: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(release)
}

fn read(release: &str, file: &str) -> String {
    let path = data(release).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn releases() -> Vec<String> {
    let mut r: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    r.sort();
    r
}

#[test]
fn jobs_read_the_same_from_json_and_text() {
    for release in releases() {
        let (from_text, refused) = job::parse_jobs(&read(&release, "jobs.txt"));
        assert!(refused.is_empty(), "{release}: {refused:?}");
        let from_json = json::parse_jobs(&read(&release, "jobs.json")).unwrap();
        assert!(!from_json.is_empty(), "{release}: no jobs in the fixture");
        assert_eq!(from_json.len(), from_text.len(), "{release}");
        for (j, t) in from_json.iter().zip(&from_text) {
            assert_eq!(
                j, t,
                "{release}: job {} differs between JSON and text",
                t.id
            );
        }
    }
}

/// The node choices a user makes (`--exclude`, `--constraint`) read the same from both forms:
/// the first captured job of each release, with the empty fields filled as Slurm shows them.
#[test]
fn excluded_nodes_and_features_read_the_same_from_json_and_text() {
    for release in releases() {
        let text = read(&release, "jobs.txt")
            .replacen("ExcNodeList=(null)", "ExcNodeList=n[1-2]", 1)
            .replacen("Features=(null)", "Features=ib&big", 1);
        let json = read(&release, "jobs.json")
            .replacen(
                "\"excluded_nodes\": \"\"",
                "\"excluded_nodes\": \"n[1-2]\"",
                1,
            )
            .replacen("\"features\": \"\"", "\"features\": \"ib&big\"", 1);
        let from_text = job::parse_jobs(&text).0;
        let from_json = json::parse_jobs(&json).unwrap();
        for jobs in [&from_text, &from_json] {
            assert_eq!(jobs[0].exc_nodes, ["n1", "n2"], "{release}");
            assert_eq!(jobs[0].features.as_deref(), Some("ib&big"), "{release}");
            assert!(
                jobs[1..]
                    .iter()
                    .all(|j| j.exc_nodes.is_empty() && j.features.is_none())
            );
        }
        assert_eq!(from_json, from_text, "{release}");
    }
}

#[test]
fn nodes_read_the_same_from_json_and_text() {
    for release in releases() {
        let from_text = node::parse_nodes(&read(&release, "nodes.txt")).unwrap();
        let from_json = json::parse_nodes(&read(&release, "nodes.json")).unwrap();
        assert_eq!(from_json, from_text, "{release}");
        assert!(from_json.iter().any(|n| !n.gpus.is_empty()), "{release}");
        // An idle node has every CPU (CPUEfctv=8) free, a busy one fewer; memory is not
        // consumable on the test cluster (CR_Core): all of RealMemory=4000 is free.
        for n in &from_json {
            let idle = n.state == hadar_slurm::NodeState::Idle;
            assert_eq!(idle, n.free.cpus == Some(8), "{release}: {n:?}");
            assert_eq!(n.free.mem_mb, Some(4000), "{release}: {n:?}");
        }
    }
}

#[test]
fn a_nodes_free_cpus_and_memory_are_what_no_job_holds() {
    for release in releases() {
        let text = read(&release, "nodes.txt")
            .replacen("CPUAlloc=0", "CPUAlloc=6", 1)
            .replacen("AllocMem=0", "AllocMem=1000", 1);
        let from_text = node::parse_nodes(&text).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&read(&release, "nodes.json")).unwrap();
        v["nodes"][0]["alloc_cpus"] = 6.into();
        v["nodes"][0]["alloc_memory"] = 1000.into();
        let from_json = json::parse_nodes(&v.to_string()).unwrap();
        for nodes in [&from_text, &from_json] {
            assert_eq!(nodes[0].free.cpus, Some(2), "{release}");
            assert_eq!(nodes[0].free.mem_mb, Some(3000), "{release}");
            assert_eq!(nodes[1].free.cpus, Some(8), "{release}");
        }
    }
}

fn release_with_jobs() -> String {
    releases().pop().expect("a captured release")
}

#[test]
fn an_unknown_data_parser_is_refused_by_name() {
    let text = read(&release_with_jobs(), "jobs.json");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let known = v["meta"]["plugin"]["data_parser"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        json::KNOWN_DATA_PARSERS.iter().any(|k| known.ends_with(k)),
        "{known}"
    );
    v["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.99".into();
    let e = json::parse_jobs(&v.to_string()).unwrap_err().to_string();
    assert!(
        e.contains("data_parser v0.0.99 is not one hadar reads"),
        "{e}"
    );
    v["meta"]["plugin"]["data_parser"] = serde_json::Value::Null;
    let e = json::parse_jobs(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("names no data_parser version"), "{e}");
}

#[test]
fn truncated_empty_and_non_json_answers_are_named() {
    let text = read(&release_with_jobs(), "jobs.json");
    let e = json::parse_jobs(&text[..text.len() / 2])
        .unwrap_err()
        .to_string();
    assert!(e.contains("ends early") && e.contains("truncated"), "{e}");
    let e = json::parse_jobs("").unwrap_err().to_string();
    assert!(e.contains("empty, not JSON"), "{e}");
    let e = json::parse_jobs("slurm_load_jobs error: Unable to contact slurm controller")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not JSON") && e.contains("slurm_load_jobs error"),
        "{e}"
    );
    let e =
        json::parse_nodes("{\"meta\": {\"plugin\": {\"data_parser\": \"data_parser/v0.0.42\"}}}")
            .unwrap_err()
            .to_string();
    assert!(e.contains("nodes"), "{e}");
}

#[test]
fn an_answer_carrying_slurm_errors_is_refused() {
    let e = json::parse_jobs(
        r#"{"jobs": [], "meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}},
            "errors": [{"error": "Unable to contact slurm controller", "error_number": 1007}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("Unable to contact slurm controller"), "{e}");
}

#[test]
fn comments_that_look_like_records_stay_comments() {
    let text = read(&release_with_jobs(), "jobs.json");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let forged = "x\nJobId=999 JobName=forged\n   JobState=RUNNING Reason=None";
    v["jobs"][0]["comment"] = serde_json::Value::String(forged.into());
    let jobs = json::parse_jobs(&v.to_string()).unwrap();
    assert!(jobs.iter().all(|j| j.id != 999));
    assert_eq!(jobs[0].comment.as_deref(), Some(forged));
}
