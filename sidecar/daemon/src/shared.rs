//! The tables of `hadar.toml` the daemon shares with the job_submit plugin, read by the
//! plugin's own reader (`hadar_request::Config`), so that both programs accept and refuse
//! exactly the same `[slurm]` and `[plugin]` tables.

use hadar_request::ConfigError;
use std::path::PathBuf;

/// What the daemon uses from `[slurm]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlurmTables {
    /// `[slurm].managed_partitions`.
    pub managed_partitions: Vec<String>,
    /// `[slurm].slurm_conf`.
    pub slurm_conf: Option<PathBuf>,
}

impl SlurmTables {
    /// Reads and checks `[slurm]` and `[plugin]` as the plugin does.
    pub fn parse(path: &str, text: &str) -> Result<SlurmTables, ConfigError> {
        let c = hadar_request::Config::parse(path, text)?;
        Ok(SlurmTables {
            managed_partitions: c.slurm.managed_partitions,
            slurm_conf: c.slurm.slurm_conf,
        })
    }
}
