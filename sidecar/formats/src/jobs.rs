//! Jobs files: the queue `hadar dry-run` plans a round for, in TOML or JSON.
//!
//! One entry per job, as `[[job]]` tables in TOML or a `"jobs"` array in JSON (a bare JSON
//! array of jobs is accepted too):
//!
//! ```toml
//! now_s = 3600.0        # optional: the round boundary (default: the latest arrival)
//! round_s = 360.0       # optional: round length (default 360)
//! restart_s = 30.0      # optional: seconds lost when a running job moves (default 0)
//!
//! [[job]]
//! id = 1
//! gpus = 4                                   # workers, all placed or none
//! job_type = "ResNet-50 (batch size 64)"     # a job type of the throughput table, or:
//! # throughput = { v100 = 40.0, k80 = 12.0 } # steps/s with all `gpus` workers on a type
//! remaining_steps = 40000
//! total_steps = 80000                        # optional (default: remaining_steps)
//! arrival_s = 0                              # optional (default 0)
//! weight = 1.0                               # optional priority (default 1)
//! running = [{ node = "v100-0", type = "v100", gpus = 4 }]   # optional: where it runs now
//! ```
//!
//! Errors name the file, the line (TOML), the job and the field.

use crate::ThroughputTable;
use crate::error::{FormatError, Location, line_of, read_file};
use hadar_core::{
    Cluster, FreeCapacity, Job, JobId, JobState, Part, Placement, RateCurve, ThroughputProfile,
};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The embedded example queue of `hadar dry-run`.
pub const EXAMPLE_JOBS_TOML: &str = include_str!("../data/dry-run-jobs.toml");
/// The cluster the example queue is written for, in the short form.
pub const EXAMPLE_CLUSTER_SPEC: &str = "v100:8,p100:8,k80:8";
/// GPUs per node of the example cluster.
pub const EXAMPLE_GPUS_PER_NODE: u32 = 4;

/// A parsed jobs file: the active jobs of one round and the round's timing.
#[derive(Clone, Debug)]
pub struct JobsFile {
    /// The jobs, in arrival order (ties by id), as a policy expects them.
    pub jobs: Vec<JobState>,
    /// The round boundary, seconds since the workload started.
    pub now_s: f64,
    /// The round length in seconds.
    pub round_s: f64,
    /// Seconds a running job loses when its placement changes.
    pub restart_s: f64,
}

/// The syntax of a jobs file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobsSyntax {
    /// TOML with `[[job]]` tables.
    Toml,
    /// JSON with a `"jobs"` array, or a bare array.
    Json,
}

impl JobsSyntax {
    /// JSON for `.json` files or text starting with `{` or `[`; TOML otherwise.
    pub fn detect(path: Option<&Path>, text: &str) -> Self {
        if path
            .and_then(|p| p.extension())
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            return JobsSyntax::Json;
        }
        if path
            .and_then(|p| p.extension())
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
        {
            return JobsSyntax::Toml;
        }
        match text.trim_start().chars().next() {
            Some('{') | Some('[') => JobsSyntax::Json,
            _ => JobsSyntax::Toml,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    now_s: Option<f64>,
    round_s: Option<f64>,
    restart_s: Option<f64>,
    #[serde(alias = "jobs", default)]
    job: Vec<RawJob>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawJson {
    File(RawFile),
    Bare(Vec<RawJob>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    id: u64,
    gpus: i64,
    job_type: Option<String>,
    throughput: Option<BTreeMap<String, f64>>,
    remaining_steps: f64,
    total_steps: Option<f64>,
    arrival_s: Option<f64>,
    weight: Option<f64>,
    running: Option<Vec<RawPart>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPart {
    node: String,
    #[serde(rename = "type")]
    gpu_type: String,
    gpus: i64,
}

/// Reads a jobs file from disk (syntax from the extension or the content).
pub fn load_jobs(
    path: &Path,
    table: &ThroughputTable,
    cluster: &Cluster,
) -> Result<JobsFile, FormatError> {
    let text = read_file(path)?;
    let syntax = JobsSyntax::detect(Some(path), &text);
    parse_jobs(&text, &path.display().to_string(), syntax, table, cluster)
}

/// Parses a jobs file; `origin` names it in errors.
pub fn parse_jobs(
    text: &str,
    origin: &str,
    syntax: JobsSyntax,
    table: &ThroughputTable,
    cluster: &Cluster,
) -> Result<JobsFile, FormatError> {
    let raw = match syntax {
        JobsSyntax::Toml => toml::from_str::<RawFile>(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
            FormatError::invalid(
                Location::of(origin).line(line),
                e.message().trim().to_string(),
            )
        })?,
        JobsSyntax::Json => match serde_json::from_str::<RawJson>(text) {
            Ok(RawJson::File(f)) => f,
            Ok(RawJson::Bare(job)) => RawFile {
                now_s: None,
                round_s: None,
                restart_s: None,
                job,
            },
            Err(_) => {
                // The untagged enum hides the real message: parse again as the object form,
                // whose error names the line and the field.
                let e = serde_json::from_str::<RawFile>(text).err().map_or_else(
                    || "expected an object with a `jobs` array, or an array of jobs".to_string(),
                    |e| e.to_string(),
                );
                return Err(FormatError::invalid(Location::of(origin), e));
            }
        },
    };
    let ctx = Ctx {
        text,
        origin,
        syntax,
    };
    build(&ctx, raw, table, cluster)
}

struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
    syntax: JobsSyntax,
}

impl Ctx<'_> {
    /// Where job number `k` (0-based, in file order) sets `field`: in TOML, the line of
    /// the field inside the job's table (or of the table's header); in JSON, the file.
    fn at(&self, k: Option<usize>, field: &str) -> Location {
        let loc = Location::of(self.origin).field(field);
        if self.syntax != JobsSyntax::Toml {
            return loc;
        }
        let Some(k) = k else {
            return match find_key_line(self.text, 0, field) {
                Some(l) => loc.line(l),
                None => loc,
            };
        };
        let mut headers = 0;
        let mut offset = 0;
        for line in self.text.split_inclusive('\n') {
            let t = line.trim_start();
            if t.starts_with("[[job]]") || t.starts_with("[[jobs]]") {
                if headers == k {
                    let head = line_of(self.text, offset);
                    let key = field.split('.').next().unwrap_or(field);
                    return loc
                        .line(find_key_line(self.text, offset + line.len(), key).unwrap_or(head));
                }
                headers += 1;
            }
            offset += line.len();
        }
        loc
    }

    fn invalid(&self, k: Option<usize>, field: &str, message: String) -> FormatError {
        FormatError::invalid(self.at(k, field), message)
    }
}

/// The line of `key = ...` at or after byte `from`, before the next table header.
fn find_key_line(text: &str, from: usize, key: &str) -> Option<usize> {
    let mut offset = from;
    for line in text[from.min(text.len())..].split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with('[') && from > 0 {
            return None;
        }
        if let Some(rest) = t.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some(line_of(text, offset));
        }
        offset += line.len();
    }
    None
}

fn build(
    ctx: &Ctx<'_>,
    raw: RawFile,
    table: &ThroughputTable,
    cluster: &Cluster,
) -> Result<JobsFile, FormatError> {
    if raw.job.is_empty() {
        return Err(FormatError::invalid(
            Location::of(ctx.origin),
            "no jobs: add [[job]] tables (TOML) or a \"jobs\" array (JSON)",
        ));
    }
    let (round_s, restart_s) = timing(ctx, &raw)?;
    let mut seen = HashSet::new();
    let mut running_load = FreeCapacity::of(cluster);
    let mut jobs = Vec::with_capacity(raw.job.len());
    for (k, rj) in raw.job.into_iter().enumerate() {
        let job = JobCtx { ctx, k, id: rj.id };
        if !seen.insert(rj.id) {
            return Err(job.bad("id", "this id is used by an earlier job too".into()));
        }
        jobs.push(job.state(rj, table, cluster, &mut running_load)?);
    }
    let latest = jobs.iter().map(|j| j.job.arrival_s).fold(0.0, f64::max);
    let now_s = raw.now_s.unwrap_or(latest);
    if !(now_s.is_finite() && now_s >= latest) {
        return Err(ctx.invalid(
            None,
            "now_s",
            format!("must be at or after the latest arrival ({latest} s), found {now_s}"),
        ));
    }
    jobs.sort_by(|a, b| a.job.arrival_order(&b.job));
    Ok(JobsFile {
        jobs,
        now_s,
        round_s,
        restart_s,
    })
}

/// The file's round length and restart cost, checked against each other.
fn timing(ctx: &Ctx<'_>, raw: &RawFile) -> Result<(f64, f64), FormatError> {
    let round_s = raw.round_s.unwrap_or(360.0);
    if !(round_s.is_finite() && round_s > 0.0) {
        return Err(ctx.invalid(
            None,
            "round_s",
            format!("must be a positive number of seconds, found {round_s}"),
        ));
    }
    let restart_s = raw.restart_s.unwrap_or(0.0);
    if !(restart_s.is_finite() && (0.0..=round_s).contains(&restart_s)) {
        return Err(ctx.invalid(
            None,
            "restart_s",
            format!("must be at least 0 and at most round_s ({round_s}), found {restart_s}"),
        ));
    }
    Ok((round_s, restart_s))
}

/// One job entry being read: where it is in the file, for its errors.
struct JobCtx<'a> {
    ctx: &'a Ctx<'a>,
    /// The entry's position in the file, 0-based.
    k: usize,
    id: u64,
}

impl JobCtx<'_> {
    fn bad(&self, field: &str, message: String) -> FormatError {
        self.ctx
            .invalid(Some(self.k), field, format!("job {}: {message}", self.id))
    }

    /// The job's state for the round: its checked fields, rates and running placement (whose
    /// GPUs are taken from `running_load`, so running jobs cannot overlap).
    fn state(
        &self,
        rj: RawJob,
        table: &ThroughputTable,
        cluster: &Cluster,
        running_load: &mut FreeCapacity,
    ) -> Result<JobState, FormatError> {
        if !(1..=1_000_000).contains(&rj.gpus) {
            return Err(self.bad(
                "gpus",
                format!("must be between 1 and 1000000, found {}", rj.gpus),
            ));
        }
        let workers = rj.gpus as u32;
        if !(rj.remaining_steps.is_finite() && rj.remaining_steps > 0.0) {
            return Err(self.bad(
                "remaining_steps",
                format!("must be a positive number, found {}", rj.remaining_steps),
            ));
        }
        let total_steps = rj.total_steps.unwrap_or(rj.remaining_steps);
        if !(total_steps.is_finite() && total_steps >= rj.remaining_steps) {
            return Err(self.bad(
                "total_steps",
                format!(
                    "must be at least remaining_steps ({}), found {total_steps}",
                    rj.remaining_steps
                ),
            ));
        }
        let arrival_s = rj.arrival_s.unwrap_or(0.0);
        if !(arrival_s.is_finite() && arrival_s >= 0.0) {
            return Err(self.bad(
                "arrival_s",
                format!("must be a time of at least 0 seconds, found {arrival_s}"),
            ));
        }
        let weight = rj.weight.unwrap_or(1.0);
        if !(weight.is_finite() && weight > 0.0) {
            return Err(self.bad(
                "weight",
                format!("must be a positive number, found {weight}"),
            ));
        }
        let (kind, throughput) = self.rates(&rj, workers, table, cluster)?;
        let placement = match &rj.running {
            None => None,
            Some(parts) => Some(self.running(parts, workers, cluster, running_load)?),
        };
        let job = Job {
            restart_s: None,
            id: JobId(self.id),
            kind,
            arrival_s,
            workers,
            total_steps,
            weight,
            throughput,
        };
        let mut state = JobState::arrived(Arc::new(job), cluster.type_count());
        state.remaining_steps = rj.remaining_steps;
        state.placement = placement;
        Ok(state)
    }

    /// The job's kind and rates: a job type of the table, or its own per-type `throughput`.
    fn rates(
        &self,
        rj: &RawJob,
        workers: u32,
        table: &ThroughputTable,
        cluster: &Cluster,
    ) -> Result<(String, ThroughputProfile), FormatError> {
        match (&rj.job_type, &rj.throughput) {
            (Some(_), Some(_)) => Err(self.bad(
                "throughput",
                "give either `job_type` or `throughput`, not both".into(),
            )),
            (None, None) => Err(self.bad(
                "job_type",
                "missing: give a `job_type` of the throughput table or per-type `throughput`"
                    .into(),
            )),
            (Some(name), None) => {
                let profile = table.profile(name, cluster).ok_or_else(|| {
                    let known: Vec<&str> = table.job_types().collect();
                    self.bad(
                        "job_type",
                        format!("unknown job type `{name}`; known: {}", known.join(", ")),
                    )
                })?;
                Ok((name.clone(), profile))
            }
            (None, Some(map)) => {
                let mut curves = vec![RateCurve::default(); cluster.type_count()];
                for (t, rate) in map {
                    let field = format!("throughput.{t}");
                    let ti = cluster.type_by_name(t).ok_or_else(|| {
                        self.bad(
                            &field,
                            format!(
                                "GPU type `{t}` is not in the cluster (types: {})",
                                cluster.type_names().join(", ")
                            ),
                        )
                    })?;
                    if !(rate.is_finite() && *rate >= 0.0) {
                        return Err(self.bad(
                            &field,
                            format!(
                                "must be steps/s of at least 0 (0: cannot run there), found {rate}"
                            ),
                        ));
                    }
                    curves[ti.index()] = RateCurve::new([(workers, *rate)]);
                }
                Ok(("custom".to_string(), ThroughputProfile::new(curves)))
            }
        }
    }

    /// Where the job runs now: its parts, checked against the cluster, its worker count and
    /// the GPUs earlier running jobs hold.
    fn running(
        &self,
        parts: &[RawPart],
        workers: u32,
        cluster: &Cluster,
        running_load: &mut FreeCapacity,
    ) -> Result<Placement, FormatError> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let node = cluster.node_by_name(&p.node).ok_or_else(|| {
                self.bad(
                    "running",
                    format!("node `{}` is not in the cluster", p.node),
                )
            })?;
            let gpu_type = cluster.type_by_name(&p.gpu_type).ok_or_else(|| {
                self.bad(
                    "running",
                    format!("GPU type `{}` is not in the cluster", p.gpu_type),
                )
            })?;
            if !(1..=1_000_000).contains(&p.gpus) {
                return Err(self.bad(
                    "running",
                    format!("a part's gpus must be at least 1, found {}", p.gpus),
                ));
            }
            out.push(Part {
                node,
                gpu_type,
                gpus: p.gpus as u32,
            });
        }
        let placement = Placement::gang(out);
        if placement.gpus() != workers {
            return Err(self.bad(
                "running",
                format!(
                    "the parts hold {} GPUs but the job has {workers} workers",
                    placement.gpus()
                ),
            ));
        }
        running_load.take_placement(&placement).map_err(|e| {
            self.bad(
                "running",
                format!(
                    "node `{}` has {} GPUs of type `{}` left after earlier running jobs, {} asked for",
                    cluster.node(e.node).name,
                    e.free,
                    cluster.type_name(e.gpu_type),
                    e.wanted
                ),
            )
        })?;
        Ok(placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{embedded, parse_cluster_spec};

    fn cluster() -> Cluster {
        parse_cluster_spec(EXAMPLE_CLUSTER_SPEC, EXAMPLE_GPUS_PER_NODE).unwrap()
    }

    fn toml_err(text: &str) -> String {
        let table = embedded::throughputs().unwrap();
        parse_jobs(text, "jobs.toml", JobsSyntax::Toml, &table, &cluster())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_embedded_example_parses() {
        let table = embedded::throughputs().unwrap();
        let f = parse_jobs(
            EXAMPLE_JOBS_TOML,
            "<example>",
            JobsSyntax::Toml,
            &table,
            &cluster(),
        )
        .unwrap();
        assert_eq!(f.jobs.len(), 8);
        assert_eq!((f.now_s, f.round_s, f.restart_s), (3600.0, 360.0, 30.0));
        let first = &f.jobs[0];
        assert_eq!(first.id(), JobId(1));
        assert_eq!(first.placement.as_ref().map(|p| p.gpus()), Some(4));
        assert!(first.job.rate_on(hadar_core::GpuType(0)).is_some());
    }

    #[test]
    fn json_object_and_bare_array_agree() {
        let table = embedded::throughputs().unwrap();
        let obj = r#"{"restart_s": 10, "jobs": [{"id": 3, "gpus": 2, "throughput": {"v100": 5, "k80": 1}, "remaining_steps": 100}]}"#;
        let arr = r#"[{"id": 3, "gpus": 2, "throughput": {"v100": 5, "k80": 1}, "remaining_steps": 100}]"#;
        let a = parse_jobs(
            obj,
            "a.json",
            JobsSyntax::detect(None, obj),
            &table,
            &cluster(),
        )
        .unwrap();
        let b = parse_jobs(
            arr,
            "b.json",
            JobsSyntax::detect(None, arr),
            &table,
            &cluster(),
        )
        .unwrap();
        assert_eq!(a.restart_s, 10.0);
        assert_eq!(a.jobs[0].job.throughput, b.jobs[0].job.throughput);
        assert_eq!(a.jobs[0].job.rate_on(hadar_core::GpuType(2)), Some(1.0));
    }

    #[test]
    fn errors_name_line_job_and_field() {
        let e =
            toml_err("[[job]]\nid = 4\ngpus = 0\nthroughput = { v100 = 1 }\nremaining_steps = 5\n");
        assert_eq!(
            e,
            "jobs.toml:3: field `gpus`: job 4: must be between 1 and 1000000, found 0"
        );
        let e =
            toml_err("[[job]]\nid = 4\ngpus = 1\nthroughput = { a100 = 1 }\nremaining_steps = 5\n");
        assert_eq!(
            e,
            "jobs.toml:4: field `throughput.a100`: job 4: GPU type `a100` is not in the cluster (types: v100, p100, k80)"
        );
        let e = toml_err("[[job]]\nid = 1\ngpus = 1\njob_type = \"Nope\"\nremaining_steps = 5\n");
        assert!(
            e.starts_with(
                "jobs.toml:4: field `job_type`: job 1: unknown job type `Nope`; known: A3C"
            ),
            "{e}"
        );
        let e = toml_err(
            "[[job]]\nid = 1\ngpus = 1\nthroughput = { v100 = 1 }\nremaining_steps = 5\n\n[[job]]\nid = 1\ngpus = 1\nthroughput = { v100 = 1 }\nremaining_steps = 5\n",
        );
        assert_eq!(
            e,
            "jobs.toml:8: field `id`: job 1: this id is used by an earlier job too"
        );
        let e = toml_err(
            "[[job]]\nid = 2\ngpus = 2\nthroughput = { v100 = 1 }\nremaining_steps = 5\nrunning = [{ node = \"v100-0\", type = \"v100\", gpus = 1 }]\n",
        );
        assert_eq!(
            e,
            "jobs.toml:6: field `running`: job 2: the parts hold 1 GPUs but the job has 2 workers"
        );
        let e = toml_err("[[job]]\nid = 2\ngpus = 2\nremaining_steps = 5\n");
        assert!(
            e.starts_with("jobs.toml:1: field `job_type`: job 2: missing"),
            "{e}"
        );
        let e = toml_err("[[job]]\nid = 2\ngpu = 2\n");
        assert!(e.starts_with("jobs.toml:3: unknown field `gpu`"), "{e}");
    }

    #[test]
    fn running_jobs_may_not_overcommit_a_node() {
        let one = "running = [{ node = \"v100-0\", type = \"v100\", gpus = 3 }]\n";
        let text = format!(
            "[[job]]\nid = 1\ngpus = 3\nthroughput = {{ v100 = 1 }}\nremaining_steps = 5\n{one}\n[[job]]\nid = 2\ngpus = 3\nthroughput = {{ v100 = 1 }}\nremaining_steps = 5\n{one}"
        );
        assert_eq!(
            toml_err(&text),
            "jobs.toml:13: field `running`: job 2: node `v100-0` has 1 GPUs of type `v100` left after earlier running jobs, 3 asked for"
        );
    }

    #[test]
    fn json_errors_name_job_and_field() {
        let table = embedded::throughputs().unwrap();
        let text = r#"{"jobs": [{"id": 9, "gpus": 1, "throughput": {"v100": -2}, "remaining_steps": 100}]}"#;
        let e = parse_jobs(text, "q.json", JobsSyntax::Json, &table, &cluster())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "q.json: field `throughput.v100`: job 9: must be steps/s of at least 0 (0: cannot run there), found -2"
        );
        let text = r#"{"jobs": [{"id": 9, "gpus": "two"}]}"#;
        let e = parse_jobs(text, "q.json", JobsSyntax::Json, &table, &cluster())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("q.json: invalid type: string \"two\""), "{e}");
        assert!(e.contains("line 1"), "{e}");
    }
}
