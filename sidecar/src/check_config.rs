//! `hadar check-config`: reads the file and the live cluster (through `hadar_slurm`), runs
//! the checks of `hadar_ops::check`, and prints the GPU types and the findings.

use crate::Failure;
use crate::cli::CheckConfigArgs;
use crate::table::Table;
use anyhow::anyhow;
use hadar_daemon::DaemonConfig;
use hadar_ops::check::{self, Live, Report, Severity};
use hadar_slurm::{Slurm, SlurmConfig};
use std::time::Duration;

/// Checks the file; exit status 1 when it has a problem.
pub fn run(a: CheckConfigArgs) -> Result<(), Failure> {
    let shown = a.config.display().to_string();
    let text = std::fs::read_to_string(&a.config)
        .map_err(|e| Failure::input(anyhow!("cannot read {shown}: {e}")))?;
    let slurm = slurm_for(DaemonConfig::parse(&shown, &text).ok());
    // Without Slurm the file's own problems are still worth reporting; the report then
    // names the checks it could not make.
    let (nodes, unreachable) = match slurm.nodes() {
        Ok(nodes) => (nodes, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let live = match &unreachable {
        None => Live::Nodes(&nodes),
        Some(why) => Live::Unreachable(why),
    };
    let report = check::check(&shown, &text, live, &check::LocalFs);
    let against = match unreachable {
        None => format!(
            "against Slurm {}: {} nodes, {} GPU types",
            slurm
                .slurm_release()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "(release unknown)".into()),
            nodes.len(),
            report.types.len()
        ),
        Some(_) => "without the live cluster (Slurm did not answer)".to_string(),
    };
    print!("{}", render(&shown, &against, &report));
    if report.has_problems() {
        return Err(Failure::runtime(anyhow!(
            "{shown} has problems (above); hadar would not work as configured"
        )));
    }
    Ok(())
}

/// The Slurm client the daemon would use (its `slurm_conf` and `slurm_bin_dir`), or the
/// defaults when the file does not parse.
pub(crate) fn slurm_for(config: Option<DaemonConfig>) -> Slurm {
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
        ..Default::default()
    })
}

/// The report as printed: the cluster, its GPU types and their rating, then the findings.
fn render(shown: &str, against: &str, report: &Report) -> String {
    let mut out = format!("{shown} {against}\n\n");
    let mut t = Table::new(&["GPU type", "GPUs", "nodes", "rated as"]);
    for ty in &report.types {
        t.row(vec![
            hadar_request::excerpt_of(&ty.name, 64),
            ty.gpus.to_string(),
            ty.nodes.to_string(),
            ty.rating.words(),
        ]);
    }
    if !report.types.is_empty() {
        out += &t.render();
        out.push('\n');
    }
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
