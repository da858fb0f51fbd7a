//! Consolidation where the data is: a forked job's round is averaged by its own copy job,
//! on a compute node, as the job's user, inside Slurm; the daemon never reads or writes the
//! spool.
//!
//! The copy job's batch script (written by [`crate::fork`]) creates the round's folder,
//! runs the copies, then runs `hadar fork-consolidate ROUND.json`, which reads the copies'
//! results, averages the successful copies' checkpoints (weighted by their steps, with the
//! round's outer step), appends the round to the job's `tracker.jsonl`, and prints a
//! [`RoundReport`]; the script puts that report in the copy job's own `Comment`
//! (`scontrol update JobId=$SLURM_JOB_ID Comment=...`). The daemon reads the comment with the
//! job's other fields once the copy job has ended, and counts the round from it.
//!
//! Format (one word, so `scontrol show job` prints it unambiguously):
//! `hadar-round:v1;avg=ok|failed;c0=ok:STEPS:SECONDS:EXIT;c1=fail:0::EXIT;...`, or
//! `hadar-round:v1;error=WORD` when the script could not run the round at all.

use hadar_core::JobId;
use hadar_core::placement::PlacementKind;
use hadar_core::tracker::{CopyRecord, TrackerRecord};
use hadar_store::{ForkCopy, ForkRound};
use std::path::Path;

/// The tag a round report starts with.
pub const TAG: &str = "hadar-round:v1";

/// What one copy of a round did, as its copy job reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyReport {
    /// The copy succeeded (its runner said so and its checkpoint exists).
    pub ok: bool,
    /// Steps it did (0 for a failed copy).
    pub steps: f64,
    /// Seconds its program ran, when known.
    pub seconds: Option<f64>,
    /// Its program's exit code, when known.
    pub exit_code: Option<i32>,
}

/// What a round's copy job reports about the round.
#[derive(Clone, Debug, PartialEq)]
pub enum RoundReport {
    /// The copies ran; `averaged` says whether their checkpoints were averaged.
    Ran {
        /// The averaged checkpoint was written.
        averaged: bool,
        /// One entry per copy, in the round's order.
        copies: Vec<CopyReport>,
    },
    /// The round could not run (a one-word reason).
    Error(String),
}

impl RoundReport {
    /// The report as the comment text.
    pub fn encode(&self) -> String {
        match self {
            RoundReport::Error(why) => format!("{TAG};error={}", one_word(why)),
            RoundReport::Ran { averaged, copies } => {
                let mut s = format!("{TAG};avg={}", if *averaged { "ok" } else { "failed" });
                for (k, c) in copies.iter().enumerate() {
                    s.push_str(&format!(
                        ";c{k}={}:{}:{}:{}",
                        if c.ok { "ok" } else { "fail" },
                        c.steps,
                        c.seconds.map(|t| t.to_string()).unwrap_or_default(),
                        c.exit_code.map(|e| e.to_string()).unwrap_or_default(),
                    ));
                }
                s
            }
        }
    }

    /// Reads a comment; `None` when it is not a well-formed report (the daemon then treats
    /// the round as unreported).
    pub fn decode(comment: &str) -> Option<RoundReport> {
        let mut fields = comment.trim().split(';');
        if fields.next() != Some(TAG) {
            return None;
        }
        let first = fields.next()?;
        if let Some(why) = first.strip_prefix("error=") {
            return fields
                .next()
                .is_none()
                .then(|| RoundReport::Error(why.to_string()));
        }
        let averaged = match first {
            "avg=ok" => true,
            "avg=failed" => false,
            _ => return None,
        };
        let mut copies = Vec::new();
        for (k, f) in fields.enumerate() {
            let v = f.strip_prefix(&format!("c{k}="))?;
            let parts: Vec<&str> = v.split(':').collect();
            let [ok, steps, secs, exit] = parts.as_slice() else {
                return None;
            };
            let ok = match *ok {
                "ok" => true,
                "fail" => false,
                _ => return None,
            };
            let steps: f64 = steps
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)?;
            let seconds = match *secs {
                "" => None,
                t => Some(
                    t.parse::<f64>()
                        .ok()
                        .filter(|t| t.is_finite() && *t > 0.0)?,
                ),
            };
            let exit_code = match *exit {
                "" => None,
                e => Some(e.parse().ok()?),
            };
            copies.push(CopyReport {
                ok,
                steps,
                seconds,
                exit_code,
            });
        }
        Some(RoundReport::Ran { averaged, copies })
    }
}

fn one_word(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect()
}

/// What the copy job's consolidation step is given: the round as the daemon planned it and
/// what the tracker line needs (written into the round's folder as `round.json`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RoundPlan {
    /// The round.
    pub round: ForkRound,
    /// The daemon's epoch (unix seconds): `started_s` and `ended_s` count from it.
    pub epoch: f64,
    /// The job's steps before this round.
    pub steps_done: f64,
    /// The job's total steps.
    pub total_steps: f64,
}

/// The fork runner's one-line result (see `wrappers/README.md`).
#[derive(Clone, Debug, serde::Deserialize)]
struct RunnerResult {
    steps: f64,
    /// Absent from results of runners older than this field.
    #[serde(default)]
    seconds: Option<f64>,
    exit_code: i32,
    ok: bool,
    #[serde(default)]
    error: String,
}

/// Reads each copy's result file and checkpoint (on the compute node) and fills the copies'
/// outcome; returns the failed copies' errors.
pub fn collect(round: &mut ForkRound) -> Vec<String> {
    let mut errors = Vec::new();
    for c in round.copies.iter_mut() {
        let result = std::fs::read_to_string(&c.result)
            .ok()
            .and_then(|t| serde_json::from_str::<RunnerResult>(t.trim()).ok());
        match result {
            Some(r) if r.ok && Path::new(&c.checkpoint).is_file() => {
                c.ok = Some(true);
                c.steps = Some(r.steps.max(0.0));
                c.seconds = r.seconds.filter(|t| t.is_finite() && *t > 0.0);
                c.exit_code = Some(r.exit_code);
            }
            Some(r) => {
                fail(c, Some(r.exit_code));
                errors.push(format!("copy on {}: {}", c.node, r.error));
            }
            None => {
                fail(c, None);
                errors.push(format!(
                    "copy on {}: no result (killed or never started)",
                    c.node
                ));
            }
        }
    }
    errors
}

fn fail(c: &mut ForkCopy, exit_code: Option<i32>) {
    c.ok = Some(false);
    c.steps = Some(0.0);
    c.exit_code = exit_code;
}

/// The report of a collected round.
pub fn report(round: &ForkRound, averaged: bool) -> RoundReport {
    RoundReport::Ran {
        averaged,
        copies: round
            .copies
            .iter()
            .map(|c| CopyReport {
                ok: c.ok == Some(true),
                steps: c.steps.unwrap_or(0.0),
                seconds: c.seconds,
                exit_code: c.exit_code,
            })
            .collect(),
    }
}

/// Applies a report's copies to the daemon's round; false when the report does not match
/// the round (another number of copies).
pub fn apply(round: &mut ForkRound, copies: &[CopyReport]) -> bool {
    if copies.len() != round.copies.len() {
        return false;
    }
    for (c, r) in round.copies.iter_mut().zip(copies) {
        c.ok = Some(r.ok);
        c.steps = Some(if r.ok { r.steps } else { 0.0 });
        c.seconds = r.seconds;
        c.exit_code = r.exit_code;
    }
    true
}

/// Appends a consolidated round to the job's `tracker.jsonl` in the Job Tracker's JSON-lines
/// form (as `hadar simulate --trace-out` writes it), with each successful copy's checkpoint,
/// so that `hadar average --weights-from tracker.jsonl --job J --round R` repeats the
/// consolidation. Written once per round (a rerun copy job finds its line). The daemon's
/// store stays the authority; the file is a convenience for users.
pub fn append_tracker_line(path: &Path, round: &ForkRound, remaining: f64) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(text) = std::fs::read_to_string(path) {
        let seen = text.lines().any(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .is_ok_and(|v| v["round"].as_u64() == Some(round.round))
        });
        if seen {
            return Ok(());
        }
    }
    let line = tracker_line(round, remaining);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{line}")
}

/// A consolidated round as a Job Tracker line: the simulator's [`TrackerRecord`] (its
/// successful copies, with their steps and weights), and what only the daemon's rounds
/// have: the policy, each copy's checkpoint, the consolidated checkpoint and the outer step.
pub fn tracker_line(round: &ForkRound, remaining: f64) -> serde_json::Value {
    let good: Vec<&hadar_store::ForkCopy> =
        round.copies.iter().filter(|c| c.ok == Some(true)).collect();
    let record = TrackerRecord {
        round: round.round,
        job: JobId(round.job),
        start_s: round.started_s,
        end_s: round.ended_s.unwrap_or(f64::NAN),
        kind: PlacementKind::Forked,
        copies: good
            .iter()
            .map(|c| CopyRecord {
                node: c.node.clone(),
                gpu_type: c.gpu_type.clone(),
                gpus: c.gpus,
                steps: c.steps,
                weight: c.weight,
            })
            .collect(),
        aggregated_steps: round.copies.iter().filter_map(|c| c.steps).sum::<f64>(),
        remaining_steps: remaining,
    };
    let mut line = serde_json::to_value(&record).unwrap_or_default();
    if round.ended_s.is_none() {
        line["end_s"] = serde_json::Value::Null;
    }
    if let Some(copies) = line["copies"].as_array_mut() {
        for (v, c) in copies.iter_mut().zip(&good) {
            // The line has always named every field, null when unknown.
            v["steps"] = serde_json::json!(c.steps);
            v["weight"] = serde_json::json!(c.weight);
            v["checkpoint"] = serde_json::json!(c.checkpoint);
        }
    }
    line["policy"] = serde_json::json!("hadare");
    line["consolidated"] = serde_json::json!(round.consolidated);
    line["outer"] = serde_json::json!(round.outer.as_ref().map(|o| serde_json::json!({
        "method": "nesterov", "lr": o.lr, "momentum": o.momentum,
        "start": round.start_from, "momentum_from": o.momentum_from, "momentum_state": o.momentum_out,
    })));
    line
}

/// Base64 (standard alphabet, padded, lines of 76), for embedding files in a batch script
/// where no line of theirs can be read as a directive.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for (n, chunk) in bytes.chunks(3).enumerate() {
        if n > 0 && n % 19 == 0 {
            out.push('\n');
        }
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((v >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The tracker line as it was built by hand before [`tracker_line`] used the
    /// simulator's record: the two must be the same bytes.
    fn hand_built_line(round: &ForkRound, remaining: f64) -> serde_json::Value {
        let copies: Vec<serde_json::Value> = round
            .copies
            .iter()
            .filter(|c| c.ok == Some(true))
            .map(|c| {
                serde_json::json!({
                    "node": c.node, "gpu_type": c.gpu_type, "gpus": c.gpus,
                    "steps": c.steps, "weight": c.weight, "checkpoint": c.checkpoint,
                })
            })
            .collect();
        serde_json::json!({
            "round": round.round, "job": round.job, "kind": "forked", "policy": "hadare",
            "start_s": round.started_s, "end_s": round.ended_s,
            "copies": copies,
            "aggregated_steps": round.copies.iter().filter_map(|c| c.steps).sum::<f64>(),
            "remaining_steps": remaining,
            "consolidated": round.consolidated,
            "outer": round.outer.as_ref().map(|o| serde_json::json!({
                "method": "nesterov", "lr": o.lr, "momentum": o.momentum,
                "start": round.start_from, "momentum_from": o.momentum_from, "momentum_state": o.momentum_out,
            })),
        })
    }

    #[test]
    fn the_tracker_line_keeps_its_format() {
        let copy = |node: &str, ok: bool, steps: Option<f64>, weight: Option<f64>| ForkCopy {
            node: node.into(),
            gpu_type: "v100".into(),
            gpus: 2,
            budget: 50,
            checkpoint: format!("/spool/7/{node}.safetensors"),
            result: format!("/spool/7/{node}.json"),
            steps,
            ok: Some(ok),
            exit_code: None,
            weight,
            seconds: Some(30.5),
            inner_state_from: None,
        };
        let mut round = ForkRound {
            job: 7,
            round: 3,
            state: hadar_store::RoundState::Running,
            copy_job: Some(12),
            copy_job_name: "hadar-fork-7-3".into(),
            copies: vec![
                copy("a", true, Some(120.0), Some(0.75)),
                copy("b", false, Some(0.0), None),
                copy("c", true, Some(40.0), None),
            ],
            start_from: Some("/spool/7/round-2.safetensors".into()),
            consolidated: "/spool/7/round-3.safetensors".into(),
            deadline_unix: 1_000,
            started_s: 12.25,
            ended_s: Some(70.5),
            steps: 0.0,
            message: None,
            outer: None,
            copy_seconds: None,
        };
        for outer in [
            None,
            Some(hadar_store::OuterStep {
                lr: 0.7,
                momentum: 0.9,
                momentum_from: None,
                momentum_out: Some("/spool/7/v-3.safetensors".into()),
            }),
        ] {
            round.outer = outer;
            for ended in [Some(70.5), None] {
                round.ended_s = ended;
                assert_eq!(
                    tracker_line(&round, 840.0).to_string(),
                    hand_built_line(&round, 840.0).to_string()
                );
            }
        }
        let line = tracker_line(&round, 840.0);
        assert_eq!(line["copies"].as_array().map(Vec::len), Some(2));
        assert_eq!(line["aggregated_steps"], 160.0);
    }

    #[test]
    fn reports_round_trip_and_junk_is_refused() {
        let r = RoundReport::Ran {
            averaged: true,
            copies: vec![
                CopyReport {
                    ok: true,
                    steps: 120.0,
                    seconds: Some(6.5),
                    exit_code: Some(0),
                },
                CopyReport {
                    ok: false,
                    steps: 0.0,
                    seconds: None,
                    exit_code: None,
                },
            ],
        };
        let text = r.encode();
        assert_eq!(text, "hadar-round:v1;avg=ok;c0=ok:120:6.5:0;c1=fail:0::");
        assert!(!text.contains(' '));
        assert_eq!(RoundReport::decode(&text), Some(r));
        let e = RoundReport::Error("the spool folder is not mine".into());
        assert_eq!(
            RoundReport::decode(&e.encode()),
            Some(RoundReport::Error("the-spool-folder-is-not-mine".into()))
        );
        for junk in [
            "",
            "hello",
            "hadar-round:v1",
            "hadar-round:v1;avg=maybe",
            "hadar-round:v1;avg=ok;c1=ok:1::",
            "hadar-round:v1;avg=ok;c0=ok:-1::",
            "hadar-round:v1;avg=ok;c0=ok:nan::",
            "hadar-round:v1;avg=ok;c0=ok:1:",
            "hadar-progress:v1 steps=1 rate=2",
        ] {
            assert_eq!(RoundReport::decode(junk), None, "{junk}");
        }
    }

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        let long = base64(&[0u8; 100]);
        assert!(long.lines().all(|l| l.len() <= 76), "{long}");
    }

    proptest! {
        #[test]
        fn decode_never_panics(s in "(hadar-round:v1;)?[a-z=0-9.:;-]{0,60}") {
            let _ = RoundReport::decode(&s);
        }
    }
}
