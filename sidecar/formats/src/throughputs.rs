//! Gavel's throughput table (`simulation_throughputs.json`), read as it is.
//!
//! The file maps GPU type -> `"('<job type>', <scale factor>)"` -> `{"null": rate, ...}`.
//! Only the isolated rate (`"null"`, the job alone on its GPUs) is used: hadar never packs two
//! jobs on one GPU. Types named `*_unconsolidated` are skipped, as Gavel's simulator does. A
//! rate of zero, or no entry, means the job cannot run on that type with that many workers.

use crate::error::{FormatError, Location, line_of, read_file};
use hadar_core::{Cluster, RateCurve, ThroughputProfile};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Isolated steps/s per job type, GPU type and worker count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThroughputTable {
    /// job type -> GPU type (lower case) -> (workers, steps/s) points.
    rates: BTreeMap<String, BTreeMap<String, Vec<(u32, f64)>>>,
    gpu_types: Vec<String>,
}

impl ThroughputTable {
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

    /// The isolated rate of `job_type` with `workers` workers of `gpu_type`, if listed.
    pub fn rate(&self, job_type: &str, gpu_type: &str, workers: u32) -> Option<f64> {
        self.rates
            .get(job_type)?
            .get(&gpu_type.to_ascii_lowercase())?
            .iter()
            .find(|(w, _)| *w == workers)
            .map(|(_, r)| *r)
    }

    /// Every listed `(workers, steps/s)` point of a job type on a GPU type (zero rates
    /// included: they mean the job cannot run so), in file order.
    pub fn points(&self, job_type: &str, gpu_type: &str) -> &[(u32, f64)] {
        self.rates
            .get(job_type)
            .and_then(|by_type| by_type.get(&gpu_type.to_ascii_lowercase()))
            .map_or(&[], Vec::as_slice)
    }

    /// The job type's profile on a cluster's GPU types (types the table lacks give an empty
    /// curve: the job cannot use them). `None` when the job type is unknown.
    pub fn profile(&self, job_type: &str, cluster: &Cluster) -> Option<ThroughputProfile> {
        let by_type = self.rates.get(job_type)?;
        let curves = cluster
            .type_names()
            .iter()
            .map(|t| {
                by_type
                    .get(&t.to_ascii_lowercase())
                    .map(|pts| RateCurve::new(pts.iter().copied()))
                    .unwrap_or_default()
            })
            .collect();
        Some(ThroughputProfile::new(curves))
    }
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
            "a100 not in table"
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
