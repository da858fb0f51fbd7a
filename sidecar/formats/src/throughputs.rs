//! Gavel's throughput table (`simulation_throughputs.json`), read as it is.
//!
//! The file maps GPU type -> `"('<job type>', <scale factor>)"` -> `{"null": rate, ...}`.
//! Only the isolated rate (`"null"`, the job alone on its GPUs) is used: hadar never packs two
//! jobs on one GPU. Types named `*_unconsolidated` are skipped, as Gavel's simulator does. A
//! rate of zero, or no entry, means the job cannot run on that type with that many workers.

use crate::error::{FormatError, Location, line_of, read_file};
use hadar_core::estimate::GpuCatalog;
use hadar_core::{Cluster, RateCurve, ThroughputProfile};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Isolated steps/s per job type, GPU type and worker count.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThroughputTable {
    /// job type -> GPU type (lower case) -> (workers, steps/s) points.
    rates: BTreeMap<String, BTreeMap<String, Vec<(u32, f64)>>>,
    gpu_types: Vec<String>,
    /// The GPUs the estimator knows, for the types the table has no column for: the built-in
    /// datasheets, plus a site's `[gpu_types]` ([`ThroughputTable::with_catalog`]). Not kept
    /// with the table: whoever reads one back gives it its catalog again.
    #[serde(skip)]
    catalog: std::sync::Arc<GpuCatalog>,
}

impl ThroughputTable {
    /// The table rating the types it has no column for with `catalog` (a site's GPU type
    /// names, `[gpu_types]`, as well as the built-in datasheets).
    pub fn with_catalog(mut self, catalog: GpuCatalog) -> Self {
        self.catalog = std::sync::Arc::new(catalog);
        self
    }

    /// The GPU catalog the table estimates with.
    pub fn catalog(&self) -> &GpuCatalog {
        &self.catalog
    }

    /// Reads a table from a file.
    pub fn load(path: &Path) -> Result<Self, FormatError> {
        let text = read_file(path)?;
        Self::parse_gavel_json(&text, &path.display().to_string())
    }

    /// Parses Gavel's JSON format; `origin` names the input in errors.
    pub fn parse_gavel_json(text: &str, origin: &str) -> Result<Self, FormatError> {
        let root: Value = serde_json::from_str(text).map_err(|e| {
            FormatError::invalid(
                Location::of(origin).line(e.line()),
                format!("not valid JSON: {e}"),
            )
        })?;
        let Value::Object(types) = root else {
            return Err(FormatError::invalid(
                Location::of(origin).line(1),
                "expected an object mapping GPU types to job tables",
            ));
        };
        let mut table = ThroughputTable::default();
        for (gpu_type, jobs) in types {
            if gpu_type.ends_with("_unconsolidated") {
                continue;
            }
            let at_type = || {
                Location::of(origin)
                    .line(find_line(text, &gpu_type))
                    .field(gpu_type.clone())
            };
            let Value::Object(jobs) = jobs else {
                return Err(FormatError::invalid(
                    at_type(),
                    "expected an object of job entries",
                ));
            };
            let gpu = gpu_type.to_ascii_lowercase();
            if !table.gpu_types.contains(&gpu) {
                table.gpu_types.push(gpu.clone());
            }
            for (key, entry) in jobs {
                let at = || {
                    Location::of(origin)
                        .line(find_line(text, &key))
                        .field(key.clone())
                };
                let (job_type, workers) = parse_key(&key).ok_or_else(|| {
                    FormatError::invalid(
                        at(),
                        "expected a key of the form \"('<job type>', <workers>)\"",
                    )
                })?;
                let Some(isolated) = entry.get("null") else {
                    continue; // only co-location entries: no isolated rate, cannot run alone
                };
                let rate = isolated.as_f64().ok_or_else(|| {
                    FormatError::invalid(
                        at(),
                        format!("the \"null\" rate must be a number, found {isolated}"),
                    )
                })?;
                if !rate.is_finite() || rate < 0.0 {
                    return Err(FormatError::invalid(
                        at(),
                        format!("rate {rate} is negative or not finite"),
                    ));
                }
                table
                    .rates
                    .entry(job_type)
                    .or_default()
                    .entry(gpu.clone())
                    .or_default()
                    .push((workers, rate));
            }
        }
        if table.rates.is_empty() {
            return Err(FormatError::invalid(
                Location::of(origin),
                "the table has no job types",
            ));
        }
        Ok(table)
    }

    /// The job types, sorted.
    pub fn job_types(&self) -> impl Iterator<Item = &str> {
        self.rates.keys().map(String::as_str)
    }

    /// The GPU types the table covers, sorted by name.
    pub fn gpu_types(&self) -> &[String] {
        &self.gpu_types
    }

    /// True when the table knows the job type.
    pub fn knows(&self, job_type: &str) -> bool {
        self.rates.contains_key(job_type)
    }

    /// The table's column for a cluster's GPU type name: the same name in any case, else the
    /// canonical name the estimator's datasheet table gives it when the table has that column
    /// (a gres.conf written by `AutoDetect=nvml` says `tesla_v100-sxm2-16gb` for Gavel's
    /// `v100`; see `GpuCatalog::lookup`).
    pub fn column(&self, gpu_type: &str) -> Option<&str> {
        let find = |name: &str| {
            self.gpu_types
                .iter()
                .find(|g| g.eq_ignore_ascii_case(name))
                .map(String::as_str)
        };
        find(gpu_type.trim()).or_else(|| find(&self.catalog.lookup(gpu_type)?.name))
    }

    /// The isolated rate of `job_type` with `workers` workers of `gpu_type`, if listed.
    pub fn rate(&self, job_type: &str, gpu_type: &str, workers: u32) -> Option<f64> {
        self.points(job_type, gpu_type)
            .iter()
            .find(|(w, _)| *w == workers)
            .map(|(_, r)| *r)
    }

    /// Every listed `(workers, steps/s)` point of a job type on a GPU type (zero rates
    /// included: they mean the job cannot run so), in file order.
    pub fn points(&self, job_type: &str, gpu_type: &str) -> &[(u32, f64)] {
        let Some(by_type) = self.rates.get(job_type) else {
            return &[];
        };
        self.column(gpu_type)
            .and_then(|c| by_type.get(c))
            .map_or(&[], Vec::as_slice)
    }

    /// This table without its column for `gpu_type`: what a site that never measured that
    /// type would have, for judging [`Self::estimated_rate`] against the held-out column.
    pub fn without_gpu_type(&self, gpu_type: &str) -> Self {
        let drop = gpu_type.to_ascii_lowercase();
        ThroughputTable {
            rates: self
                .rates
                .iter()
                .map(|(job, by_type)| {
                    let mut by_type = by_type.clone();
                    by_type.remove(&drop);
                    (job.clone(), by_type)
                })
                .collect(),
            gpu_types: self
                .gpu_types
                .iter()
                .filter(|g| **g != drop)
                .cloned()
                .collect(),
            catalog: self.catalog.clone(),
        }
    }

    /// True when the table has a column for `gpu_type` (see [`Self::column`]).
    pub fn measures(&self, gpu_type: &str) -> bool {
        self.column(gpu_type).is_some()
    }

    /// The rate of `job_type` with `workers` workers of `gpu_type`: the listed one, else the
    /// largest listed smaller worker count's scaled linearly (an optimistic guess the job's
    /// own reports correct). `None` when neither is listed.
    pub fn rate_or_scaled(&self, job_type: &str, gpu_type: &str, workers: u32) -> Option<f64> {
        if let Some(r) = self.rate(job_type, gpu_type, workers) {
            return Some(r);
        }
        (1..workers).rev().find_map(|m| {
            self.rate(job_type, gpu_type, m)
                .map(|r| r * workers as f64 / m as f64)
        })
    }

    /// Steps/s of a gang of `job_type` on `gpus` (type and count per part): a gang over
    /// several types runs at its slowest type's rate for the whole worker count, as the
    /// simulator's jobs do ([`hadar_core::Job`]). `Err` names the first type with no positive
    /// rate ([`Self::rate_or_scaled`]) for that worker count.
    pub fn gang_rate(&self, job_type: &str, gpus: &[(String, u32)]) -> Result<f64, String> {
        let workers: u32 = gpus.iter().map(|(_, c)| c).sum();
        let mut rate = f64::INFINITY;
        for (t, _) in gpus {
            let r = self
                .rate_or_scaled(job_type, t, workers)
                .filter(|r| *r > 0.0)
                .ok_or_else(|| t.clone())?;
            rate = rate.min(r);
        }
        Ok(rate)
    }

    /// Steps/s of `job_type` with `workers` workers on `gpu_type`, a GPU type the table has
    /// no column for (an A100, an H100): the estimator's rate
    /// ([`hadar_core::estimate`]: the job type's traits and the GPU's datasheet), times the
    /// geometric mean of measured / estimated over the types the table did measure for this
    /// job and worker count, so that the estimator's error on this job carries over instead
    /// of adding up. `None` when the estimator does not know the job type (only Gavel's job
    /// types have traits) or the GPU, or the job does not fit in the GPU's memory.
    pub fn estimated_rate(&self, job_type: &str, gpu_type: &str, workers: u32) -> Option<f64> {
        use hadar_core::estimate::{ModelConstants, estimate_rate, gavel_job};
        let traits = gavel_job(job_type)?;
        let k = ModelConstants::default();
        let estimate = |g: &str| {
            let spec = self.catalog.lookup(g)?;
            estimate_rate(&traits, spec, workers, &k)
        };
        let target = estimate(gpu_type)?;
        let logs: Vec<f64> = self
            .gpu_types
            .iter()
            .filter_map(|m| {
                let measured = self
                    .rate_or_scaled(job_type, m, workers)
                    .filter(|r| *r > 0.0)?;
                Some((measured / estimate(m)?).ln())
            })
            .collect();
        let calibration = if logs.is_empty() {
            1.0
        } else {
            (logs.iter().sum::<f64>() / logs.len() as f64).exp()
        };
        Some(target * calibration).filter(|r| r.is_finite() && *r > 0.0)
    }

    /// What the table says of `job_type` with `workers` workers of `gpu_type`, as a prior
    /// before the job has run there. On a type the table has a column for ([`Self::column`]:
    /// its name in any case, or the name Slurm's GPU auto-detection gives the same GPU, as the
    /// simulator reads it), its measured rate, or the largest smaller measured worker count's scaled
    /// linearly ([`Self::rate_or_scaled`]); a zero or missing rate there means the job cannot
    /// run so. On any other type, the estimated rate ([`Self::estimated_rate`]), or none.
    pub fn prior(&self, job_type: &str, gpu_type: &str, workers: u32) -> TableRate {
        let measured_type = self.measures(gpu_type);
        let (rate, kind): (_, fn(f64) -> TableRate) = if measured_type {
            (
                self.rate_or_scaled(job_type, gpu_type, workers),
                TableRate::Measured,
            )
        } else {
            (
                self.estimated_rate(job_type, gpu_type, workers),
                TableRate::Estimated,
            )
        };
        rate.filter(|r| *r > 0.0).map_or(TableRate::CannotRun, kind)
    }

    /// The GPU types of `cluster` this table has no column for, split into those the
    /// estimator's datasheet table knows (rates there are estimated, see
    /// [`Self::estimated_rate`]) and those it does not (no job of the table can use them).
    pub fn unmeasured_types(&self, cluster: &Cluster) -> (Vec<String>, Vec<String>) {
        cluster
            .type_names()
            .iter()
            .filter(|t| !self.measures(t))
            .cloned()
            .partition(|t| self.catalog.lookup(t).is_some())
    }

    /// The job type's profile on a cluster's GPU types. On a type the table measured, its
    /// points (a zero rate: the job cannot run so); on a type it has no column for, the
    /// estimated rate ([`Self::estimated_rate`]) at each worker count the table lists for
    /// the job, or an empty curve (the job cannot use it) when there is no estimate. `None`
    /// when the job type is unknown.
    pub fn profile(&self, job_type: &str, cluster: &Cluster) -> Option<ThroughputProfile> {
        let by_type = self.rates.get(job_type)?;
        let mut counts: Vec<u32> = by_type.values().flatten().map(|(w, _)| *w).collect();
        counts.sort_unstable();
        counts.dedup();
        let curves = cluster
            .type_names()
            .iter()
            .map(|t| match self.column(t).and_then(|c| by_type.get(c)) {
                Some(pts) => RateCurve::new(pts.iter().copied()),
                None if self.measures(t) => RateCurve::default(),
                None => RateCurve::new(
                    counts
                        .iter()
                        .filter_map(|&w| Some((w, self.estimated_rate(job_type, t, w)?))),
                ),
            })
            .collect();
        Some(ThroughputProfile::new(curves))
    }
}

/// A job type's rate on one GPU type, as [`ThroughputTable::prior`] gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TableRate {
    /// Measured by the table (or scaled from a smaller measured worker count), steps/s.
    Measured(f64),
    /// Estimated for a GPU type the table has no column for, steps/s.
    Estimated(f64),
    /// The job cannot run so: a zero or missing rate on a measured type, or no estimate.
    CannotRun,
}

/// Parses `('<job type>', <workers>)`.
fn parse_key(key: &str) -> Option<(String, u32)> {
    let inner = key.trim().strip_prefix('(')?.strip_suffix(')')?;
    let comma = inner.rfind(',')?;
    let (name, workers) = (inner[..comma].trim(), inner[comma + 1..].trim());
    let name = name
        .strip_prefix('\'')
        .and_then(|n| n.strip_suffix('\''))
        .or_else(|| name.strip_prefix('"').and_then(|n| n.strip_suffix('"')))?;
    let workers: u32 = workers.parse().ok().filter(|&w| w > 0)?;
    Some((name.to_string(), workers))
}

/// The line where `key` first appears as a JSON string, for error messages.
fn find_line(text: &str, key: &str) -> usize {
    let quoted = serde_json::to_string(key).unwrap_or_default();
    text.find(&quoted).map(|p| line_of(text, p)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"{
  "v100": {"('A', 1)": {"null": 2.0, "('B', 1)": [1.0, 1.0]}, "('A', 2)": {"null": 3.5}},
  "k80": {"('A', 1)": {"null": 0.0}},
  "v100_unconsolidated": {"('A', 1)": {"null": 99.0}}
}"#;

    #[test]
    fn reads_isolated_rates_and_skips_unconsolidated() {
        let t = ThroughputTable::parse_gavel_json(SMALL, "t.json").unwrap();
        assert_eq!(t.rate("A", "v100", 1), Some(2.0));
        assert_eq!(t.rate("A", "V100", 2), Some(3.5));
        assert_eq!(t.rate("A", "k80", 1), Some(0.0));
        assert_eq!(t.gpu_types(), &["k80".to_string(), "v100".to_string()]);
        let c = Cluster::from_type_counts(
            &[("k80".into(), 1), ("v100".into(), 1), ("a100".into(), 1)],
            1,
        )
        .unwrap();
        let p = t.profile("A", &c).unwrap();
        assert!(
            p.curve(hadar_core::GpuType(0)).is_empty(),
            "zero rate: cannot run on k80"
        );
        assert_eq!(p.rate(hadar_core::GpuType(1), 2), Some(3.5));
        assert!(
            p.curve(hadar_core::GpuType(2)).is_empty(),
            "a100 not in the table, and job type A has no traits to estimate from"
        );
    }

    /// Gavel's job types on GPUs Gavel did not measure: estimated at every worker count the
    /// table lists, faster on an A100 than the measured V100; a GPU no datasheet describes
    /// stays unusable.
    #[test]
    fn unmeasured_gpu_types_are_estimated_for_gavel_job_types() {
        let t = crate::embedded::throughputs().unwrap();
        let c = Cluster::from_type_counts(
            &[("v100".into(), 8), ("a100".into(), 8), ("x100".into(), 8)],
            8,
        )
        .unwrap();
        assert_eq!(
            t.unmeasured_types(&c),
            (vec!["a100".to_string()], vec!["x100".to_string()])
        );
        let job = "ResNet-50 (batch size 64)";
        let p = t.profile(job, &c).unwrap();
        let (v100, a100) = (
            p.curve(hadar_core::GpuType(0)),
            p.curve(hadar_core::GpuType(1)),
        );
        assert!(!v100.is_empty());
        assert_eq!(
            a100.points().iter().map(|(w, _)| *w).collect::<Vec<_>>(),
            v100.points().iter().map(|(w, _)| *w).collect::<Vec<_>>()
        );
        for ((w, on_a100), (_, on_v100)) in a100.points().iter().zip(v100.points()) {
            assert!(
                on_a100 > on_v100,
                "{w} workers: a100 {on_a100} v100 {on_v100}"
            );
        }
        assert!(p.curve(hadar_core::GpuType(2)).is_empty());
        // A job type without traits gets no estimate.
        assert_eq!(t.estimated_rate("no such job", "a100", 1), None);
    }

    /// GPU names as `AutoDetect=nvml` writes them into gres.conf read Gavel's columns.
    #[test]
    fn nvml_gpu_names_find_the_measured_column() {
        let t = crate::embedded::throughputs().unwrap();
        let job = "ResNet-50 (batch size 64)";
        assert_eq!(t.column("tesla_v100-sxm2-16gb"), Some("v100"));
        assert_eq!(t.column("Tesla_K80"), Some("k80"));
        assert_eq!(t.column("nvidia_a100-sxm4-80gb"), None, "no A100 column");
        assert_eq!(
            t.rate(job, "tesla_v100-sxm2-16gb", 1),
            t.rate(job, "v100", 1)
        );
        assert!(t.measures("tesla_p100-pcie-16gb"));
        // A V100-32GB is a different part from Gavel's 16 GB V100: estimated, not measured.
        assert!(!t.measures("tesla_v100-sxm2-32gb"));
    }

    /// Measured types give the table's rate (scaled for an unlisted worker count), a zero
    /// rate or an unknown job type cannot run; unmeasured types are estimated.
    #[test]
    fn priors_are_measured_scaled_estimated_or_none() {
        let t = crate::embedded::throughputs().unwrap();
        let job = "ResNet-18 (batch size 64)";
        let two = t.rate(job, "v100", 2).unwrap();
        assert_eq!(t.prior(job, "V100", 2), TableRate::Measured(two));
        assert_eq!(
            t.prior(job, "v100", 3),
            TableRate::Measured(two * 3.0 / 2.0)
        );
        assert_eq!(
            t.prior(job, "a100", 2),
            TableRate::Estimated(t.estimated_rate(job, "a100", 2).unwrap())
        );
        assert_eq!(t.prior(job, "x100", 2), TableRate::CannotRun);
        // The name Slurm's auto-detection gives a V100 reads the V100 column, as in the
        // simulator.
        assert_eq!(
            t.prior(job, "tesla_v100-sxm2-16gb", 2),
            TableRate::Measured(two)
        );
        assert_eq!(t.prior("no such job", "v100", 1), TableRate::CannotRun);
        let small = ThroughputTable::parse_gavel_json(SMALL, "t.json").unwrap();
        assert_eq!(
            small.prior("A", "k80", 1),
            TableRate::CannotRun,
            "zero rate"
        );
        assert_eq!(small.prior("A", "v100", 4), TableRate::Measured(7.0));
    }

    /// A gang runs at its slowest part's rate for the whole worker count; a part on a type
    /// the job cannot run on is named.
    #[test]
    fn a_gang_runs_at_its_slowest_types_rate() {
        let t = crate::embedded::throughputs().unwrap();
        let job = "ResNet-18 (batch size 64)";
        let gpus = |parts: &[(&str, u32)]| -> Vec<(String, u32)> {
            parts.iter().map(|(t, c)| (t.to_string(), *c)).collect()
        };
        let v100 = t.rate(job, "v100", 2).unwrap();
        let k80 = t.rate(job, "k80", 2).unwrap();
        assert_eq!(t.gang_rate(job, &gpus(&[("v100", 2)])), Ok(v100));
        assert_eq!(
            t.gang_rate(job, &gpus(&[("v100", 1), ("k80", 1)])),
            Ok(v100.min(k80))
        );
        let small = ThroughputTable::parse_gavel_json(SMALL, "t.json").unwrap();
        assert_eq!(
            small.gang_rate("A", &gpus(&[("v100", 1), ("k80", 1)])),
            Err("k80".to_string())
        );
    }

    #[test]
    fn bad_key_names_line_and_key() {
        let text = "{\n \"v100\": {\n  \"A-1\": {\"null\": 1}\n }\n}";
        let e = ThroughputTable::parse_gavel_json(text, "t.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.json:3: field `A-1`:"), "{e}");
    }

    #[test]
    fn bad_json_names_line() {
        let e = ThroughputTable::parse_gavel_json("{\n\"v100\": [,\n}", "t.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.json:2:"), "{e}");
    }

    #[test]
    fn keys_with_parentheses_in_names_parse() {
        assert_eq!(
            parse_key("('ResNet-18 (batch size 32)', 4)"),
            Some(("ResNet-18 (batch size 32)".into(), 4))
        );
        assert_eq!(parse_key("('x', 0)"), None);
        assert_eq!(parse_key("x"), None);
    }
}
