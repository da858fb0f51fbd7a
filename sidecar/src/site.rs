//! `hadar site capture`, and the site file `hadar simulate --site` reads.

use crate::Failure;
use crate::cli::SiteCaptureArgs;
use anyhow::{Context, anyhow};
use hadar_daemon::DaemonConfig;
use hadar_daemon::site::file::SiteFile;
use hadar_daemon::site::simulated::SimulatedSite;
use std::path::Path;

/// Reads the site's figures from Slurm and writes them as a site file.
pub fn capture(a: SiteCaptureArgs) -> Result<(), Failure> {
    let config = match &a.config {
        Some(path) => Some(DaemonConfig::load(path).map_err(Failure::input)?),
        None => {
            let default = Path::new("/etc/hadar/hadar.toml");
            match default.exists() {
                true => Some(DaemonConfig::load(default).map_err(Failure::input)?),
                false => None,
            }
        }
    };
    let slurm = crate::check_config::slurm_for(config);
    let figures = slurm
        .site_figures()
        .context("reading the site's rules from Slurm")
        .map_err(Failure::runtime)?;
    let now = hadar_daemon::daemon::now_unix().floor() as i64;
    let text = SiteFile::captured(figures, now)
        .to_toml()
        .map_err(|e| Failure::runtime(anyhow!("writing the site as TOML: {e}")))?;
    if a.out.as_os_str() == "-" {
        return crate::output::emit(&text);
    }
    std::fs::write(&a.out, text)
        .with_context(|| format!("writing {}", a.out.display()))
        .map_err(Failure::runtime)
}

/// The site of `path` for the simulated jobs `ids` (the `[[job]]` tables' indices are
/// positions in it), priority weighing by `strength`.
pub fn load(path: &Path, ids: &[u64], strength: f64) -> Result<SimulatedSite, Failure> {
    let origin = path.display().to_string();
    let file = SiteFile::load(path).map_err(Failure::input)?;
    let by_index = file
        .identities(ids.len(), &origin)
        .map_err(Failure::input)?;
    let jobs = by_index
        .into_iter()
        .map(|(i, account)| (ids[i as usize], account))
        .collect();
    let epoch = file.captured_unix.unwrap_or(0) as f64;
    Ok(SimulatedSite::new(file.slurm, jobs, epoch, strength))
}
