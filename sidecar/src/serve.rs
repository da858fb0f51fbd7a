//! `hadar serve`, `hadar status` and `hadar explain`.

use crate::Failure;
use crate::cli::{ExplainArgs, FailOpenArgs, Format, ServeArgs, StatusArgs};
use anyhow::anyhow;
use hadar_daemon::daemon::now_unix;
use hadar_daemon::failopen;
use hadar_daemon::{Daemon, DaemonConfig};
use hadar_ops::metrics::{Metrics, MetricsObserver};
use hadar_ops::shadow;
use hadar_slurm::{Slurm, SlurmConfig};
use hadar_store::{ForkRound, JobRow, Phase, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn load_config(path: &Path) -> Result<DaemonConfig, Failure> {
    DaemonConfig::load(path).map_err(Failure::input)
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn serve(a: ServeArgs) -> Result<(), Failure> {
    let mut config = load_config(&a.config)?;
    config.sidecar.shadow |= a.shadow;
    if let Some(point) = hadar_daemon::faults::arm_from_env().map_err(Failure::input)? {
        tracing::warn!("fault injection armed: the daemon will kill itself at {point}");
    }
    let slurm = Slurm::new(SlurmConfig {
        conf: config.slurm_conf.clone(),
        bin_dir: config.sidecar.slurm_bin_dir.clone(),
        timeout: Duration::from_secs_f64(config.sidecar.command_timeout_seconds),
        full_read_every: Duration::from_secs_f64(config.sidecar.full_read_seconds),
        site_read_every: Duration::from_secs_f64(config.sidecar.site_read_seconds),
    });
    if let Some(dir) = config
        .sidecar
        .state
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::runtime(anyhow!("creating {}: {e}", dir.display())))?;
    }
    if !config.sidecar.state.exists() {
        tracing::warn!(
            "no state database at {}: starting a new one. Every managed job is rebuilt from Slurm (held, queued and running jobs all come back, each with its recorded request); what only the database held is lost: learned throughput rates, progress and service history of earlier rounds, and past decisions",
            config.sidecar.state.display()
        );
    }
    let mut store = Store::open(&config.sidecar.state).map_err(Failure::runtime)?;
    if !config.sidecar.shadow {
        store
            .set_meta(shadow::MODE_KEY, shadow::ACTING)
            .map_err(Failure::runtime)?;
    }
    // SAFETY: handlers only store to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
    }
    let metrics = start_metrics(&config)?;
    let (wake_tx, wake_rx) = std::sync::mpsc::channel::<()>();
    listen_for_notices(
        &config.sidecar.socket,
        config.slurm_conf.as_deref(),
        wake_tx,
        metrics.clone(),
    );
    match slurm.slurm_release() {
        Ok(r) => tracing::info!(
            "talking to Slurm {r} (reading its {})",
            match r.read_form() {
                hadar_slurm::ReadForm::Json => "JSON",
                hadar_slurm::ReadForm::Text => "scontrol text",
            }
        ),
        Err(e) => {
            tracing::warn!("cannot tell the Slurm release yet ({e}); asking again each round")
        }
    }
    if config.sidecar.shadow {
        return serve_shadow(slurm, store, config, &wake_rx);
    }
    let textfile = config.sidecar.metrics_textfile.clone();
    let forker = (config.sidecar.policy.forks()).then(|| {
        let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("hadar"));
        hadar_daemon::fork::Forker::new(Box::new(slurm.clone()), &config, me)
    });
    let mut daemon = Daemon::new(
        slurm,
        store,
        config,
        Box::new(hadar_daemon::spec::JobSpec::from_record),
        now_unix(),
    )
    .map_err(Failure::runtime)?;
    if let Some(f) = forker {
        daemon = daemon.with_forking(f);
    }
    if let Some(m) = metrics {
        daemon = daemon.with_observer(Box::new(MetricsObserver::new(m, textfile)));
    }
    daemon = daemon.with_observer(Box::new(hadar_ops::sd_notify::Notifier::from_env()));
    tracing::info!("hadar serve: started");
    daemon.run(&STOP, &wake_rx, &now_unix);
    tracing::info!("hadar serve: stopped");
    Ok(())
}

/// Runs the daemon in shadow mode until SIGTERM or SIGINT: it records what it would do and
/// acts on nothing.
fn serve_shadow(
    slurm: Slurm,
    store: Store,
    config: DaemonConfig,
    wake: &std::sync::mpsc::Receiver<()>,
) -> Result<(), Failure> {
    let mut daemon = shadow::Shadow::new(slurm, store, config, now_unix())
        .map_err(Failure::runtime)?
        .with_notifier(hadar_ops::sd_notify::Notifier::from_env());
    tracing::info!(
        "hadar serve: started in SHADOW mode: it records what it would do each round and acts on nothing (no release, hold, update, requeue or cancel)"
    );
    daemon.run(&STOP, wake, &now_unix);
    tracing::info!("hadar serve: stopped");
    Ok(())
}

/// The daemon's metrics when `metrics_listen` or `metrics_textfile` asks for them, served
/// over HTTP from now on when `metrics_listen` is set (an address that cannot be bound stops
/// the daemon: the administrator asked for it).
fn start_metrics(config: &DaemonConfig) -> Result<Option<Arc<Metrics>>, Failure> {
    let s = &config.sidecar;
    if s.metrics_listen.is_none() && s.metrics_textfile.is_none() {
        return Ok(None);
    }
    let metrics = Arc::new(Metrics::new());
    if let Some(addr) = &s.metrics_listen {
        let bound = hadar_ops::metrics::serve_http(addr, metrics.clone()).map_err(|e| {
            Failure::runtime(anyhow!(
                "cannot serve metrics on {addr} (sidecar.metrics_listen): {e}"
            ))
        })?;
        tracing::info!("serving metrics on http://{bound}/metrics");
    }
    Ok(Some(metrics))
}

/// Listens on the plugin's notice socket; each notice from slurmctld wakes the round loop,
/// and each connection refused (another user, junk) is logged. A socket that cannot be set
/// up safely is logged and the daemon runs on its round timer alone.
fn listen_for_notices(
    path: &Path,
    slurm_conf: Option<&Path>,
    wake: std::sync::mpsc::Sender<()>,
    metrics: Option<Arc<Metrics>>,
) {
    use hadar_ops::notices;
    // slurm.conf as the Slurm commands find it: the configured one, else $SLURM_CONF, else
    // Slurm's default path.
    let conf_path = slurm_conf
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"));
    let slurm_user = match std::fs::read_to_string(&conf_path) {
        Ok(text) => notices::slurm_user_uid(&text),
        Err(e) => {
            tracing::warn!(
                "cannot read {} for SlurmUser ({e}); only root may notify",
                conf_path.display()
            );
            None
        }
    };
    let listener = match notices::bind(path, slurm_user) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("cannot listen for notices: {e}; new jobs wait for the next round");
            return;
        }
    };
    let allowed = notices::allowed_uids(slurm_user);
    tracing::info!(socket = %path.display(), ?allowed, "listening for the plugin's notices");
    std::thread::spawn(move || {
        notices::serve(
            listener,
            &allowed,
            |_| {
                if let Some(m) = &metrics {
                    m.notice();
                }
                let _ = wake.send(());
            },
            |refused| tracing::warn!("notice socket: {refused}"),
        )
    });
}

/// The state database and heartbeat paths from `--state` or `--config` (a bare `--state`
/// has the default heartbeat beside it).
fn state_paths(
    config: &Option<PathBuf>,
    state: &Option<PathBuf>,
) -> Result<(PathBuf, PathBuf), Failure> {
    let sidecar = match (state, config) {
        (Some(s), _) => hadar_daemon::config::SidecarConfig {
            state: s.clone(),
            ..Default::default()
        },
        (None, Some(c)) => load_config(c)?.sidecar,
        (None, None) => load_config(Path::new("/etc/hadar/hadar.toml"))?.sidecar,
    };
    Ok((sidecar.state.clone(), sidecar.heartbeat_path()))
}

/// Whether the cluster is failed open, and why, in words (`None`: it is not).
fn fail_open_words(heartbeat: &Path) -> Option<(String, failopen::FailOpenState)> {
    let st = failopen::read_state(heartbeat);
    let at = st.failed_open_at_unix?;
    let back = match failopen::read_heartbeat(heartbeat) {
        failopen::HeartbeatRead::Present(hb) if hb.at_unix > at => Some(hb),
        _ => None,
    };
    let ago = now_unix() - at;
    let ids: Vec<String> = st.released.iter().map(u64::to_string).collect();
    let mut text = match back {
        None => format!(
            "FAILED OPEN {ago:.0} s ago: {}; managed jobs run under Slurm's own scheduling with their own GPU requests (released: {})",
            st.reason
                .as_deref()
                .unwrap_or("the daemon stopped completing rounds"),
            if ids.is_empty() {
                "none".into()
            } else {
                ids.join(", ")
            }
        ),
        Some(hb) => format!(
            "failed open {ago:.0} s ago ({}); the daemon is back (round {}) and is taking the jobs back",
            st.reason.as_deref().unwrap_or("no rounds"),
            hb.round
        ),
    };
    if !st.waiting.is_empty() {
        let w: Vec<String> = st.waiting.iter().map(|(j, _)| j.to_string()).collect();
        text.push_str(&format!(
            "; forked jobs waiting for the daemon: {}",
            w.join(", ")
        ));
    }
    Some((text, st))
}

/// `hadar fail-open`: one check of the heartbeat, and the hand-over when it is stale.
pub fn fail_open(a: FailOpenArgs) -> Result<(), Failure> {
    let config = load_config(&a.config)?;
    let slurm = Slurm::new(SlurmConfig {
        conf: config.slurm_conf.clone(),
        bin_dir: config.sidecar.slurm_bin_dir.clone(),
        timeout: Duration::from_secs_f64(config.sidecar.command_timeout_seconds),
        ..Default::default()
    });
    let report = failopen::run(&config, &slurm, &now_unix, a.dry_run).map_err(Failure::runtime)?;
    if a.format == Format::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Failure::runtime)?
        );
    } else {
        println!("{}", report.health);
        if report.failed_open {
            let ids = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
            let verb = if a.dry_run {
                "would release"
            } else {
                "released"
            };
            println!("{verb}: {}", ids(&report.released));
            for (j, why) in &report.waiting {
                println!("left held: {j}: {why}");
            }
            for (j, e) in &report.errors {
                println!("failed (tried again next run): {j}: {e}");
            }
        }
    }
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(Failure::runtime(anyhow!(
            "{} job(s) could not be failed open",
            report.errors.len()
        )))
    }
}

fn open_state(config: &Option<PathBuf>, state: &Option<PathBuf>) -> Result<Store, Failure> {
    let (path, _) = state_paths(config, state)?;
    if !path.exists() {
        return Err(Failure::input(anyhow!(
            "no state database at {}: is `hadar serve` running with this configuration?",
            path.display()
        )));
    }
    Store::open_read_only(&path).map_err(Failure::runtime)
}

/// Writes the report of a serve run (`hadar report`).
pub fn report(a: crate::cli::ReportArgs) -> Result<(), Failure> {
    let store = open_state(&a.config, &a.state)?;
    if shadow::is_shadow(&store) {
        return shadow_report(&store, &a.out);
    }
    let run = crate::report::serve_run(&store).map_err(Failure::runtime)?;
    let files = hadar_report::write_report(&a.out, &[run])
        .map_err(anyhow::Error::from)
        .map_err(Failure::runtime)?;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}

/// The report of a shadow run: Slurm's run beside Hadar's predicted one (CSV, plots), the
/// comparison in `shadow.csv`, and printed as a table.
fn shadow_report(store: &Store, out: &Path) -> Result<(), Failure> {
    let (slurm, hadar, c) = crate::report::shadow_comparison(store).map_err(Failure::runtime)?;
    let mut files = hadar_report::write_report(out, &[slurm, hadar])
        .map_err(anyhow::Error::from)
        .map_err(Failure::runtime)?;
    let csv = out.join("shadow.csv");
    hadar_report::write_shadow(&csv, &c)
        .map_err(anyhow::Error::from)
        .map_err(Failure::runtime)?;
    files.push(csv);
    print!("{}", shadow_table(&c));
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}

/// The comparison as a table for people: a row per job, then the makespans and mean JCTs.
fn shadow_table(c: &hadar_report::ShadowComparison) -> String {
    let mut t = crate::table::Table::new(&[
        "JOB",
        "NAME",
        "GPUS",
        "SLURM RAN ON",
        "RUNTIME S",
        "SLURM JCT S",
        "HADAR JCT S",
        "RATIO",
    ]);
    let num = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
    let ratio = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
    for mut row in c.cells(["makespan", "mean JCT"], num, ratio) {
        row[1] = hadar_request::excerpt_of(&row[1], 40);
        t.row(row.to_vec());
    }
    format!(
        "shadow run: {} job(s) Slurm ran, beside Hadar's predicted JCT (simulated; work = runtime x table rate on the type it ran on)\n{}",
        c.rows.len(),
        t.render()
    )
}

/// A forked job's tracker and rounds, for `status` and `explain`.
fn fork_json(store: &Store, id: u64) -> Result<serde_json::Value, Failure> {
    let Some(f) = store.fork_job(id).map_err(Failure::runtime)? else {
        return Ok(serde_json::Value::Null);
    };
    let rounds = store.fork_rounds(id).map_err(Failure::runtime)?;
    let open = rounds.iter().rev().find(|r| r.state.is_open());
    Ok(serde_json::json!({
        "state": f.state, "steps_done": f.steps_done, "total_steps": f.total_steps,
        "percent": f.percent(), "next_round": f.next_round, "checkpoint": f.checkpoint,
        "message": f.message,
        "round": open.map(|r| r.round), "copies": open.map(|r| r.copies.len()).unwrap_or(0),
        "comment": hadar_daemon::fork::comment(&f, open),
        "gpu_seconds": rounds.iter().map(ForkRound::gpu_seconds).sum::<f64>(),
        "rounds": rounds,
    }))
}

fn fork_text(store: &Store, id: u64) -> Option<String> {
    let f = store.fork_job(id).ok()??;
    let open = store.open_fork_round(id).ok()?;
    Some(match open {
        Some(r) => format!(
            "forked: round {}, {} copies on {}, {:.0}%",
            r.round,
            r.copies.len(),
            hadar_daemon::explain::placement_words(&hadar_daemon::fork::copies_gpus(&r.copies)),
            f.percent().floor()
        ),
        None => format!("forked: {}, {:.0}%", f.state.as_str(), f.percent().floor()),
    })
}

fn job_json(r: &JobRow) -> serde_json::Value {
    serde_json::json!({
        "id": r.id, "name": r.name, "phase": r.phase, "workers": r.workers,
        "steps_done": r.steps_done, "total_steps": r.total_steps, "rate": r.last_rate,
        "placement": r.placement, "arrival_s": r.arrival_s, "first_start_s": r.first_start_s,
        "finished_s": r.finished_s, "final_state": r.final_state, "starts": r.starts,
        "preemptions": r.preemptions, "run_s": r.run_s, "record": r.record,
        "array_task": r.array_task,
    })
}

/// The job id `text` names: a job id, or an array element as Slurm names it (`12_3`),
/// whose split-off job has an id of its own.
fn job_id_of(store: &Store, text: &str) -> Result<u64, Failure> {
    let valid = text
        .split_once('_')
        .is_some_and(|(a, i)| a.parse::<u64>().is_ok() && i.parse::<u32>().is_ok());
    if !valid {
        return Err(Failure::input(anyhow!(
            "JOBID `{}`: expected a job id (123) or an array element (123_4)",
            hadar_request::excerpt_of(text, 40)
        )));
    }
    let rows = store.jobs().map_err(Failure::runtime)?;
    rows.iter()
        .find(|r| r.array_task.as_deref() == Some(text))
        .map(|r| r.id)
        .ok_or_else(|| {
            Failure::input(anyhow!(
                "array element {text} is not a job hadar manages (or has not been split off yet)"
            ))
        })
}

fn placement_text(r: &JobRow) -> String {
    r.placement
        .as_ref()
        .map(hadar_daemon::explain::placement_words)
        .unwrap_or_else(|| "none".into())
}

/// Prints the daemon's last round, queue and running placements.
pub fn status(a: StatusArgs) -> Result<(), Failure> {
    let (_, heartbeat) = state_paths(&a.config, &a.state)?;
    let failed_open = fail_open_words(&heartbeat);
    if a.format == Format::Table
        && let Some((text, _)) = &failed_open
    {
        // First, and before the database is opened: a corrupt database may be why.
        println!("{text}");
    }
    let store = open_state(&a.config, &a.state)?;
    let round = store.last_round().map_err(Failure::runtime)?;
    let jobs = store.jobs().map_err(Failure::runtime)?;
    let active: Vec<&JobRow> = jobs
        .iter()
        .filter(|j| j.phase != Phase::Finished || a.all)
        .collect();
    if a.format == Format::Json {
        let mut rows = Vec::new();
        for j in &active {
            let mut v = job_json(j);
            let fork = fork_json(&store, j.id)?;
            if !fork.is_null() {
                v["fork"] = fork;
            }
            rows.push(v);
        }
        let v = serde_json::json!({
            "mode": if shadow::is_shadow(&store) { shadow::SHADOW } else { shadow::ACTING },
            "round": round,
            "jobs": rows,
            "failed_open": failed_open.map(|(text, st)| serde_json::json!({ "text": text, "state": st })),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(Failure::runtime)?
        );
        return Ok(());
    }
    if shadow::is_shadow(&store) {
        println!(
            "mode: SHADOW: hadar records what it would do and acts on nothing; Slurm schedules every job (`hadar explain JOB` says what hadar would do, `hadar report --state DB` compares)"
        );
    }
    if let Ok(Some(l)) = store.lease() {
        let left = l.expires_unix - now_unix();
        if left >= 0.0 {
            println!(
                "leader: {} (term {}), lease for {left:.0} s more",
                l.holder, l.term
            );
        } else {
            println!(
                "leader: none; the lease of {} (term {}) expired {:.0} s ago",
                l.holder, l.term, -left
            );
        }
    }
    print!(
        "{}",
        crate::status::render(round.as_ref(), &active, a.nodes, |j| {
            fork_text(&store, j.id).unwrap_or_else(|| placement_text(j))
        })
    );
    Ok(())
}

/// Explains one job's last decision.
pub fn explain(a: ExplainArgs) -> Result<(), Failure> {
    let (_, heartbeat) = state_paths(&a.config, &a.state)?;
    let st = failopen::read_state(&heartbeat);
    // A job id needs no database before the fail-open words (a corrupt one may be why).
    let id = match a.job.parse::<u64>() {
        Ok(id) => id,
        Err(_) => job_id_of(&open_state(&a.config, &a.state)?, &a.job)?,
    };
    if a.format == Format::Table && st.released.contains(&id) {
        println!(
            "job {} was failed open (released to Slurm with its own GPU request): {}",
            a.job,
            st.reason
                .as_deref()
                .unwrap_or("the daemon stopped completing rounds")
        );
    }
    let store = open_state(&a.config, &a.state)?;
    let job = store.job(id).map_err(Failure::runtime)?.ok_or_else(|| {
        Failure::input(anyhow!(
            "job {} is not a job hadar manages (or has not been seen yet)",
            a.job
        ))
    })?;
    let decision = store.decision(id).map_err(Failure::runtime)?;
    if a.format == Format::Json {
        let mut v = serde_json::json!({ "job": job_json(&job), "decision": decision });
        let fork = fork_json(&store, job.id)?;
        if !fork.is_null() {
            v["fork"] = fork;
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(Failure::runtime)?
        );
        return Ok(());
    }
    let label = match &job.array_task {
        Some(task) => format!("{} (array element {task})", job.id),
        None => job.id.to_string(),
    };
    println!(
        "job {} ({}): {}, {} GPU(s), {:.0} of {:.0} steps done",
        label,
        hadar_request::excerpt_of(&job.name, 200),
        job.phase.as_str(),
        job.workers,
        job.steps_done,
        job.total_steps
    );
    if job.phase == Phase::Finished {
        println!(
            "it has left the queue ({}).",
            job.final_state.as_deref().unwrap_or("unknown")
        );
        return Ok(());
    }
    match decision {
        Some(d) => println!("in round {} it {}", d.round, d.text),
        None => println!("no round has decided about it yet"),
    }
    if job.preemptions > 0 {
        println!(
            "it has been preempted {} time(s) and started {} time(s).",
            job.preemptions, job.starts
        );
    }
    Ok(())
}
