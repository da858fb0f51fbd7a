//! The tables of `hadar.toml` the daemon shares with the job_submit plugin.

use crate::config::ConfigError;
use serde::Deserialize;
use std::path::PathBuf;

/// What the daemon uses from `[slurm]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlurmTables {
    /// `[slurm].managed_partitions`.
    pub managed_partitions: Vec<String>,
    /// `[slurm].slurm_conf`.
    pub slurm_conf: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Slurm {
    #[serde(default)]
    managed_partitions: Vec<String>,
    default_partition: Option<String>,
    slurm_conf: Option<PathBuf>,
}

#[derive(Deserialize)]
struct Top {
    #[serde(default)]
    slurm: Slurm,
}

impl SlurmTables {
    /// Reads `[slurm]` (refusing unknown keys there).
    pub fn parse(path: &str, text: &str) -> Result<SlurmTables, ConfigError> {
        let top: Top = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_string(),
            reason: e.to_string().lines().filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join(" "),
        })?;
        let _ = top.slurm.default_partition;
        Ok(SlurmTables { managed_partitions: top.slurm.managed_partitions, slurm_conf: top.slurm.slurm_conf })
    }
}
