//! `hadar check-config`: reads the file and the live cluster (through `hadar_slurm`), runs
//! the checks of `hadar_daemon::check`, and prints the GPU types and the findings.

use crate::Failure;
use crate::cli::CheckConfigArgs;
use crate::table::Table;
use anyhow::anyhow;
use hadar_daemon::DaemonConfig;
use hadar_daemon::check::{self, Report, Severity};
use hadar_slurm::{NodeInfo, Slurm, SlurmConfig};
use std::time::Duration;

/// Checks the file; exit status 1 when it has a problem.
pub fn run(a: CheckConfigArgs) -> Result<(), Failure> {
    let shown = a.config.display().to_string();
    let text = std::fs::read_to_string(&a.config)
        .map_err(|e| Failure::input(anyhow!("cannot read {shown}: {e}")))?;
    let slurm = slurm_for(DaemonConfig::parse(&shown, &text).ok());
    let nodes = live_nodes(&slurm)?;
    let report = check::check(&shown, &text, &nodes, &check::LocalFs);
    let release = slurm
        .slurm_release()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "(release unknown)".into());
    print!("{}", render(&shown, &release, &nodes, &report));
    if report.has_problems() {
        return Err(Failure::runtime(anyhow!(
            "{shown} has problems (above); hadar would not work as configured"
        )));
    }
    Ok(())
}

/// The Slurm client the daemon would use (its `slurm_conf` and `slurm_bin_dir`), or the
/// defaults when the file does not parse.
fn slurm_for(config: Option<DaemonConfig>) -> Slurm {
    let (conf, bin_dir, timeout) = match config {
        Some(c) => (
            c.slurm_conf,
            c.sidecar.slurm_bin_dir,
            c.sidecar.command_timeout_seconds,
        ),
        None => (None, None, 20.0),
    };
    Slurm::new(SlurmConfig {
        conf,
        bin_dir,
        timeout: Duration::from_secs_f64(timeout),
    })
}

fn live_nodes(slurm: &Slurm) -> Result<Vec<NodeInfo>, Failure> {
    slurm.nodes().map_err(|e| {
        Failure::runtime(anyhow!(
            "cannot read the live cluster's nodes ({e}); check-config needs Slurm"
        ))
    })
}

/// The report as printed: the cluster, its GPU types and their rating, then the findings.
fn render(shown: &str, release: &str, nodes: &[NodeInfo], report: &Report) -> String {
    let mut out = format!(
        "{shown} against Slurm {release}: {} nodes, {} GPU types\n\n",
        nodes.len(),
        report.types.len()
    );
    let mut t = Table::new(&["GPU type", "GPUs", "nodes", "rated as"]);
    for ty in &report.types {
        t.row(vec![
            hadar_request::excerpt_of(&ty.name, 64),
            ty.gpus.to_string(),
            ty.nodes.to_string(),
            ty.rating.words(),
        ]);
    }
    out += &t.render();
    out.push('\n');
    for f in &report.findings {
        let at = f
            .line
            .map(|l| format!("{shown}:{l}"))
            .unwrap_or(shown.into());
        let kind = match f.severity {
            Severity::Problem => "problem",
            Severity::Warning => "warning",
        };
        let key = if f.key.is_empty() {
            String::new()
        } else {
            format!("{}: ", f.key)
        };
        out += &format!("{at}: {kind}: {key}{}\n", f.message);
    }
    let count = |s| report.findings.iter().filter(|f| f.severity == s).count();
    out += &format!(
        "{} problem(s), {} warning(s)\n",
        count(Severity::Problem),
        count(Severity::Warning)
    );
    out
}
