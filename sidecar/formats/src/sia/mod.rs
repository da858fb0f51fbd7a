//! Sia's benchmark (SOSP 2023) as simulator input: its workloads of Philly- and
//! Helios-derived jobs, each played as a rigid job on Sia's profiled GPU clusters, as Sia's
//! simulator plays them for its Gavel baseline.
//!
//! * [`apps`]: the applications and GPU clusters Sia's benchmark knows, and their constants.
//! * [`profile`]: the measurements, read from Sia's profile files.
//! * [`rigid`]: the job model: how a job splits its batch, how long a step takes, how many
//!   it needs.
//!
//! A workload is a CSV of `name,time,application,num_replicas,batch_size` rows; the profiles
//! are Sia's folder of one subfolder per application. Every job becomes a [`Job`] of
//! `num_replicas` workers whose rate on each GPU type makes its time alone there Sia's, and
//! whose restart cost is its application's. Sia's files carry no licence: hadar reads them
//! where the user keeps them and never ships them.

pub mod apps;
mod csv_rows;
pub mod profile;
pub mod rigid;

use crate::error::{FormatError, Location, read_file};
use apps::{App, GpuKind};
use hadar_core::{Cluster, Job, JobId, Node, RateCurve, ThroughputProfile};
use profile::{Placements, Validation};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Sia's workload, ready to simulate.
#[derive(Clone, Debug)]
pub struct SiaWorkload {
    /// The cluster.
    pub cluster: Cluster,
    /// The jobs, in the workload's order (their ids are 0-based row numbers).
    pub jobs: Vec<Job>,
    /// What the reader noticed that the user should know: the GPU types a job cannot use
    /// in Sia's model, and why.
    pub notes: Vec<String>,
}

/// A cluster of Sia's GPU kinds: nodes of each.
#[derive(Clone, Debug, PartialEq)]
pub struct SiaCluster {
    /// Each kind and its node count, in the order given.
    pub nodes: Vec<(&'static GpuKind, u32)>,
}

impl SiaCluster {
    /// Parses `KIND:NODES,...` with Sia's cluster names (`aws:6,rtx:3,dgx-ext:2`, the
    /// default, [`apps::DEFAULT_CLUSTER`]).
    pub fn parse(spec: &str) -> Result<Self, FormatError> {
        let at = || Location::of("--sia-cluster");
        let mut nodes: Vec<(&'static GpuKind, u32)> = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, count) = item.split_once(':').ok_or_else(|| {
                FormatError::invalid(at(), format!("`{item}` should be KIND:NODES, e.g. aws:6"))
            })?;
            let kind = apps::kind(name.trim()).ok_or_else(|| {
                let known: Vec<&str> = apps::KINDS.iter().map(|k| k.sia_name).collect();
                FormatError::invalid(
                    at(),
                    format!(
                        "`{}` is not one of Sia's clusters ({})",
                        name.trim(),
                        known.join(", ")
                    ),
                )
            })?;
            let count: u32 = count
                .trim()
                .parse()
                .ok()
                .filter(|c| (1..=10_000).contains(c))
                .ok_or_else(|| {
                    FormatError::invalid(
                        at(),
                        format!(
                            "the node count of `{name}` must be 1 to 10000, found `{}`",
                            count.trim()
                        ),
                    )
                })?;
            if nodes.iter().any(|(k, _)| k.gpu_type == kind.gpu_type) {
                return Err(FormatError::invalid(
                    at(),
                    format!(
                        "{} GPUs are named twice (dgx and dgx-ext are the same A100 nodes)",
                        kind.gpu_type
                    ),
                ));
            }
            nodes.push((kind, count));
        }
        if nodes.is_empty() {
            return Err(FormatError::invalid(at(), "names no cluster"));
        }
        Ok(SiaCluster { nodes })
    }

    /// The cluster as hadar models it: nodes named `<type>-<i>`.
    pub fn to_cluster(&self) -> Cluster {
        let types: Vec<String> = self
            .nodes
            .iter()
            .map(|(k, _)| k.gpu_type.to_string())
            .collect();
        let mut nodes = Vec::new();
        for (ti, (kind, count)) in self.nodes.iter().enumerate() {
            for i in 0..*count {
                let mut gpus = vec![0; types.len()];
                gpus[ti] = kind.gpus_per_node;
                nodes.push(Node {
                    name: format!("{}-{i}", kind.gpu_type),
                    gpus,
                });
            }
        }
        Cluster::new(types, nodes).expect("Sia's kinds have distinct names and GPUs")
    }
}

/// One row of a workload.
struct Row {
    line: usize,
    name: String,
    arrival_s: f64,
    app: &'static App,
    gpus: u32,
    batch: u32,
}

/// Reads `workload` with the profiles under `profiles` for `cluster`.
pub fn load_sia(
    workload: &Path,
    profiles: &Path,
    cluster: &SiaCluster,
) -> Result<SiaWorkload, FormatError> {
    let origin = workload.display().to_string();
    let rows = read_workload(&read_file(workload)?, &origin)?;
    let mut measured = Measurements::new(profiles);
    let hadar_cluster = cluster.to_cluster();
    let mut jobs = Vec::with_capacity(rows.len());
    let mut notes = BTreeMap::new();
    for (id, row) in rows.iter().enumerate() {
        let at = || Location::of(&origin).line(row.line);
        let validation = measured.validation(row.app, at)?;
        let (init, max) = validation.batch_range();
        if !(init..=max).contains(&row.batch) {
            return Err(FormatError::invalid(
                at().field("batch_size"),
                format!(
                    "{} validated batch sizes {init} to {max} only; found {}",
                    row.app.name, row.batch
                ),
            ));
        }
        let steps = rigid::iterations(validation, row.app, row.batch)
            .map_err(|e| FormatError::invalid(at().field("batch_size"), e.to_string()))?;
        let mut curves = Vec::new();
        let mut why_not = Vec::new();
        for (kind, nodes) in &cluster.nodes {
            let rate = if row.gpus > kind.gpus_per_node * nodes {
                Err(format!(
                    "it needs {} GPUs, more than the cluster's {} {}",
                    row.gpus,
                    kind.gpus_per_node * nodes,
                    kind.gpu_type
                ))
            } else {
                measured.load_placements(row.app, kind, at)?;
                let placements = &measured.placements[&(row.app.name, kind.sia_name)];
                let validation = &measured.validation[row.app.name];
                rigid::isolated_s(placements, validation, row.app, kind, row.gpus, row.batch)
                    .map(|s| steps / s)
                    .map_err(|e| format!("on {}: {e}", kind.gpu_type))
            };
            match rate {
                Ok(r) => {
                    let placements = &measured.placements[&(row.app.name, kind.sia_name)];
                    let validation = &measured.validation[row.app.name];
                    let spread = spread_rates(placements, validation, row, kind, *nodes, steps, r);
                    let copies = copy_rates(placements, validation, row, kind, steps);
                    let points = copies.into_iter().chain([(row.gpus, r)]);
                    curves.push(RateCurve::new(points).with_spread(spread));
                }
                Err(e) => {
                    curves.push(RateCurve::default());
                    why_not.push(e);
                }
            }
        }
        if curves.iter().all(RateCurve::is_empty) {
            return Err(FormatError::invalid(
                at(),
                format!(
                    "job {} can run on no GPU of the cluster: {}",
                    row.name,
                    why_not.join("; ")
                ),
            ));
        }
        for e in why_not {
            let key = format!("{} x{} batch {}: {e}", row.app.name, row.gpus, row.batch);
            *notes.entry(key).or_insert(0usize) += 1;
        }
        jobs.push(Job {
            id: JobId(id as u64),
            kind: format!("{} (batch size {})", row.app.name, row.batch),
            arrival_s: row.arrival_s,
            workers: row.gpus,
            total_steps: steps,
            weight: 1.0,
            throughput: ThroughputProfile::new(curves),
            restart_s: Some(row.app.restart_s),
        });
    }
    Ok(SiaWorkload {
        cluster: hadar_cluster,
        jobs,
        notes: notes
            .into_iter()
            .map(|(what, n)| format!("{n} job(s) of {what}: the job cannot use that type"))
            .collect(),
    })
}

/// The job's rates spread over more nodes of `kind` than packed, up to the cluster's
/// `nodes` of it: at each node count, its time alone with its GPUs as even as they go
/// there ([`rigid::even`]); `(gpus, nodes, rate)` with the packed rate `packed_rate` at the
/// packed node count. Node counts with no measurement are left out: a gang placed so runs
/// at the nearest measured spread's rate ([`hadar_core::RateCurve::at_nodes`]). Empty
/// when the job cannot spread further.
fn spread_rates(
    placements: &Placements,
    validation: &Validation,
    row: &Row,
    kind: &GpuKind,
    nodes: u32,
    steps: f64,
    packed_rate: f64,
) -> Vec<(u32, u32, f64)> {
    let packed_nodes = row.gpus.div_ceil(kind.gpus_per_node);
    let mut points = vec![(row.gpus, packed_nodes, packed_rate)];
    for m in packed_nodes + 1..=nodes.min(row.gpus) {
        let Some(placement) = rigid::even(row.gpus, m, kind.gpus_per_node) else {
            continue;
        };
        if let Ok(s) = rigid::isolated_on(placements, validation, row.app, &placement, row.batch) {
            points.push((row.gpus, m, steps / s));
        }
    }
    if points.len() == 1 {
        Vec::new()
    } else {
        points
    }
}

/// The job's rates with fewer GPUs than its own, on one node of `kind`: what a forked copy
/// (HadarE) runs at. A copy trains the job's own batch, split over its GPUs with more
/// accumulation as Sia's job model does, so its steps count as the job's. `(gpus, rate)`
/// for each count the profiles cover at that batch; rigid policies never read them.
fn copy_rates(
    placements: &Placements,
    validation: &Validation,
    row: &Row,
    kind: &GpuKind,
    steps: f64,
) -> Vec<(u32, f64)> {
    (1..row.gpus.min(kind.gpus_per_node + 1))
        .filter_map(|g| {
            rigid::isolated_s(placements, validation, row.app, kind, g, row.batch)
                .ok()
                .map(|s| (g, steps / s))
        })
        .collect()
}

/// Parses a workload's rows, each checked; `origin` names it in errors.
fn read_workload(text: &str, origin: &str) -> Result<Vec<Row>, FormatError> {
    const COLUMNS: [&str; 5] = ["name", "time", "application", "num_replicas", "batch_size"];
    let mut rows: Vec<Row> = Vec::new();
    for r in csv_rows::Csv::parse(text, origin, &COLUMNS)?.rows {
        let arrival_s = r.number(1)?;
        if let Some(last) = rows.last().filter(|last| last.arrival_s > arrival_s) {
            return Err(r.invalid(
                1,
                format!(
                    "arrival times must not decrease: {arrival_s} comes after {}",
                    last.arrival_s
                ),
            ));
        }
        let app = apps::app(r.text(2)).ok_or_else(|| {
            let known: Vec<&str> = apps::APPS.iter().map(|a| a.name).collect();
            r.invalid(
                2,
                format!(
                    "unknown application `{}` (Sia's are {})",
                    r.text(2),
                    known.join(", ")
                ),
            )
        })?;
        rows.push(Row {
            line: r.line,
            name: r.text(0).to_string(),
            arrival_s,
            app,
            gpus: r.whole(3)?,
            batch: r.whole(4)?,
        });
    }
    Ok(rows)
}

/// The profiles read so far, each file once.
struct Measurements {
    dir: PathBuf,
    validation: BTreeMap<&'static str, Validation>,
    placements: BTreeMap<(&'static str, &'static str), Placements>,
}

impl Measurements {
    fn new(dir: &Path) -> Self {
        Measurements {
            dir: dir.to_path_buf(),
            validation: BTreeMap::new(),
            placements: BTreeMap::new(),
        }
    }

    /// The application's folder, which must exist: a missing one is an error at the
    /// workload line `at` that first needs it.
    fn app_dir(&self, app: &App, at: impl Fn() -> Location) -> Result<PathBuf, FormatError> {
        let dir = self.dir.join(app.name);
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(FormatError::invalid(
                at().field("application"),
                format!(
                    "no profile of {} ({} is not a folder)",
                    app.name,
                    dir.display()
                ),
            ))
        }
    }

    fn validation(
        &mut self,
        app: &'static App,
        at: impl Fn() -> Location,
    ) -> Result<&Validation, FormatError> {
        if !self.validation.contains_key(app.name) {
            let v = Validation::load(&self.app_dir(app, &at)?, app.epochs)?;
            self.validation.insert(app.name, v);
        }
        Ok(&self.validation[app.name])
    }

    /// Reads the application's timings on `kind`, unless read already.
    fn load_placements(
        &mut self,
        app: &'static App,
        kind: &'static GpuKind,
        at: impl Fn() -> Location,
    ) -> Result<(), FormatError> {
        let key = (app.name, kind.sia_name);
        if !self.placements.contains_key(&key) {
            let dir = self.app_dir(app, &at)?;
            let file = dir.join(format!("placements-{}.csv", kind.sia_name));
            if !file.is_file() {
                return Err(FormatError::invalid(
                    at().field("application"),
                    format!(
                        "no profile of {} on {} ({} is missing)",
                        app.name,
                        kind.sia_name,
                        file.display()
                    ),
                ));
            }
            self.placements
                .insert(key, Placements::load(&dir, kind.sia_name)?);
        }
        Ok(())
    }
}
