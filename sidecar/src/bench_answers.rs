//! Slurm's answers for the benchmarks: a captured `scontrol show job` answer (JSON and text)
//! grown to any number of jobs.

/// Answers captured on the 26.05 test cluster (`tests/slurm_release.rs` writes them).
const CAPTURED_JOBS_JSON: &str = include_str!("../slurm/tests/data/26.05/jobs.json");
const CAPTURED_JOBS_TEXT: &str = include_str!("../slurm/tests/data/26.05/jobs.txt");

/// The captured answers grown to `jobs` jobs: the captured jobs copied in turn, each copy
/// under a new id (the text copy's records renumbered the same way).
pub(crate) fn scaled_answers(jobs: u32) -> anyhow::Result<(String, String)> {
    let mut answer: serde_json::Value = serde_json::from_str(CAPTURED_JOBS_JSON)?;
    let captured = answer["jobs"]
        .as_array()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("the captured answer has no jobs"))?;
    let records: Vec<&str> = CAPTURED_JOBS_TEXT
        .split("\n\n")
        .filter(|r| r.starts_with("JobId="))
        .collect();
    anyhow::ensure!(
        records.len() == captured.len(),
        "the captured answers differ"
    );
    let mut grown = Vec::with_capacity(jobs as usize);
    let mut text = String::new();
    for i in 0..jobs as usize {
        let k = i % captured.len();
        let id = 100_000 + i as u64;
        let mut job = captured[k].clone();
        job["job_id"] = id.into();
        grown.push(job);
        let old = captured[k]["job_id"].as_u64().unwrap_or(0);
        text.push_str(&records[k].replacen(&format!("JobId={old} "), &format!("JobId={id} "), 1));
        text.push_str("\n\n");
    }
    answer["jobs"] = serde_json::Value::Array(grown);
    Ok((serde_json::to_string_pretty(&answer)?, text))
}
