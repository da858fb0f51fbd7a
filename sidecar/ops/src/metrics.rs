//! The daemon's metrics in Prometheus' exposition format: counted after each round from its
//! report and what it recorded in the store, served over HTTP on its own thread (a slow or
//! stuck scraper never holds up a round) and written as a node_exporter textfile. The
//! metrics and their meaning are listed in `docs/operations.md`.

use hadar_core::WaitReason;
use hadar_daemon::action_log::{ActionDone, ActionKind};
use hadar_daemon::error::DaemonError;
use hadar_daemon::observe::{RoundEnd, RoundObserver};
use hadar_daemon::summary::RoundReport;
use hadar_store::{Phase, Store, StoreError};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// A part of a round whose duration is measured.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RoundPhase {
    /// Reading Slurm's nodes and jobs.
    Read,
    /// The policy's decision.
    Decide,
    /// Carrying out the actions (preemption grace periods included).
    Enforce,
    /// The whole round.
    Total,
}

impl EncodeLabelValue for RoundPhase {
    fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        e.write_str(match self {
            RoundPhase::Read => "read",
            RoundPhase::Decide => "decide",
            RoundPhase::Enforce => "enforce",
            RoundPhase::Total => "total",
        })
    }
}

/// Whether a GPU is held by a running job.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum GpuUse {
    /// Held by a job Slurm shows running (managed or not).
    Busy,
    /// Usable and held by no running job.
    Idle,
}

impl EncodeLabelValue for GpuUse {
    fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        e.write_str(match self {
            GpuUse::Busy => "busy",
            GpuUse::Idle => "idle",
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: RoundPhase,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    gpu_type: String,
    state: GpuUse,
}

/// What an entry of a round's action list was, for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Done {
    Started,
    Preempted,
    ForkRoundStarted,
    SlurmFailed,
    Other,
}

/// What an action counts as: a failure of Slurm's whatever it was, nothing when skipped,
/// else by its kind.
fn classify(done: &ActionDone) -> Done {
    if done.outcome.failed() {
        return Done::SlurmFailed;
    }
    if done.outcome.skipped() {
        return Done::Other;
    }
    match done.action {
        ActionKind::Start => Done::Started,
        ActionKind::Preempt => Done::Preempted,
        ActionKind::ForkStart => Done::ForkRoundStarted,
        _ => Done::Other,
    }
}

/// Round-duration buckets in seconds: 1 ms to about 4 minutes.
fn round_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 10))
}

/// Every metric the daemon exports. Shared (`Arc`) between the round loop, which updates it,
/// the notice listener and the HTTP thread, which reads it; every value is atomic.
pub struct Metrics {
    registry: Registry,
    rounds: Counter,
    round_failures: Counter,
    phase_seconds: Family<PhaseLabels, Histogram, fn() -> Histogram>,
    waiting: Family<ReasonLabels, Gauge>,
    running: Gauge,
    gpus: Family<GpuLabels, Gauge>,
    starts: Counter,
    preemptions: Counter,
    forked_rounds: Counter,
    notices: Counter,
    slurm_failures: Counter,
    slurm_commands: Counter,
    slurm_bytes: Counter,
    last_round: Gauge<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// All metrics at zero, registered under the `hadar_` prefix.
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("hadar"),
            rounds: Counter::default(),
            round_failures: Counter::default(),
            phase_seconds: Family::new_with_constructor(round_buckets),
            waiting: Family::default(),
            running: Gauge::default(),
            gpus: Family::default(),
            starts: Counter::default(),
            preemptions: Counter::default(),
            forked_rounds: Counter::default(),
            notices: Counter::default(),
            slurm_failures: Counter::default(),
            slurm_commands: Counter::default(),
            slurm_bytes: Counter::default(),
            last_round: Gauge::default(),
        };
        let r = &mut m.registry;
        for (name, help, counter) in [
            ("rounds", "Rounds completed", &m.rounds),
            (
                "round_failures",
                "Rounds that failed (Slurm unreadable, store error, invalid plan)",
                &m.round_failures,
            ),
            ("starts", "Managed jobs started on a placement", &m.starts),
            (
                "preemptions",
                "Running jobs signalled to checkpoint and requeued",
                &m.preemptions,
            ),
            (
                "forked_rounds",
                "Rounds of forked (HadarE) jobs whose copies were submitted",
                &m.forked_rounds,
            ),
            (
                "notices",
                "Notices of new jobs received from the plugin",
                &m.notices,
            ),
            (
                "slurm_command_failures",
                "Slurm commands that failed: actions refused and rounds that could not read Slurm",
                &m.slurm_failures,
            ),
            (
                "slurm_commands",
                "Slurm commands completed rounds ran (reads and actions): each is one or more RPCs to slurmctld",
                &m.slurm_commands,
            ),
            (
                "slurm_read_bytes",
                "Bytes of the answers of those Slurm commands",
                &m.slurm_bytes,
            ),
        ] {
            r.register(name, help, counter.clone());
        }
        r.register_with_unit(
            "round_phase",
            "Duration of each phase of a completed round",
            Unit::Seconds,
            m.phase_seconds.clone(),
        );
        r.register(
            "queue_waiting_jobs",
            "Managed jobs the last round left waiting, by the policy's reason",
            m.waiting.clone(),
        );
        r.register(
            "running_jobs",
            "Managed jobs the last round placed",
            m.running.clone(),
        );
        r.register(
            "gpus",
            "GPUs per type at the last round's start: busy (held by a running job) or idle (usable and free)",
            m.gpus.clone(),
        );
        r.register(
            "last_round_completed_timestamp_seconds",
            "Unix time at which the last round completed",
            m.last_round.clone(),
        );
        m
    }

    /// Counts a notice from the plugin.
    pub fn notice(&self) {
        self.notices.inc();
    }

    /// Records a completed round: its report, and what it stored (its summary and decisions).
    pub fn round_done(
        &self,
        report: &RoundReport,
        store: &Store,
        now_unix: f64,
    ) -> Result<(), StoreError> {
        self.rounds.inc();
        self.slurm_commands.inc_by(report.slurm_io.commands);
        self.slurm_bytes.inc_by(report.slurm_io.bytes_read);
        for (phase, ms) in [
            (RoundPhase::Read, report.read_ms),
            (RoundPhase::Decide, report.decision_ms),
            (RoundPhase::Enforce, report.enforce_ms),
            (RoundPhase::Total, report.total_ms),
        ] {
            self.phase_seconds
                .get_or_create(&PhaseLabels { phase })
                .observe(ms / 1000.0);
        }
        for done in &report.actions {
            match classify(done) {
                Done::Started => self.starts.inc(),
                Done::Preempted => self.preemptions.inc(),
                Done::ForkRoundStarted => self.forked_rounds.inc(),
                Done::SlurmFailed => self.slurm_failures.inc(),
                Done::Other => 0,
            };
        }
        self.record_queue(store, report.round)?;
        self.record_gpus(store)?;
        self.last_round.set(now_unix);
        Ok(())
    }

    /// Records a failed round.
    pub fn round_failed(&self, e: &DaemonError) {
        self.round_failures.inc();
        if matches!(e, DaemonError::Slurm(_)) {
            self.slurm_failures.inc();
        }
    }

    fn record_queue(&self, store: &Store, round: u64) -> Result<(), StoreError> {
        let decisions = store.decisions_of_round(round)?;
        self.waiting.clear();
        let mut running = 0;
        for d in decisions {
            if d.runs {
                running += 1;
                continue;
            }
            let reason = waiting_label(d.wait_reason.as_ref());
            self.waiting.get_or_create(&ReasonLabels { reason }).inc();
        }
        self.running.set(running);
        Ok(())
    }

    /// Busy: GPUs held by any job Slurm showed running at the round's start. Idle: the
    /// round's usable GPUs (those of usable nodes not held by unmanaged jobs) less those
    /// held by managed jobs then running (or being preempted, which still hold theirs).
    fn record_gpus(&self, store: &Store) -> Result<(), StoreError> {
        let Some(r) = store.last_round()? else {
            return Ok(());
        };
        let mut managed: BTreeMap<String, u32> = BTreeMap::new();
        for j in store.jobs()? {
            if matches!(j.phase, Phase::Running | Phase::Preempting) {
                for (_, per_type) in j.placement.iter().flatten() {
                    for (t, c) in per_type {
                        *managed.entry(t.clone()).or_default() += c;
                    }
                }
            }
        }
        self.gpus.clear();
        let types: BTreeSet<&String> = r.capacity.keys().chain(r.busy.keys()).collect();
        for t in types {
            let usable = r.capacity.get(t).copied().unwrap_or(0);
            let idle = usable.saturating_sub(managed.get(t).copied().unwrap_or(0));
            let busy = r.busy.get(t).copied().unwrap_or(0);
            for (state, n) in [(GpuUse::Busy, busy), (GpuUse::Idle, idle)] {
                self.gpus
                    .get_or_create(&GpuLabels {
                        gpu_type: t.clone(),
                        state,
                    })
                    .set(i64::from(n));
            }
        }
        Ok(())
    }

    /// The OpenMetrics text (what the HTTP endpoint serves).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The classic Prometheus text format that node_exporter's textfile collector reads: the
    /// OpenMetrics text with counters' families named with their `_total` suffix, and no
    /// `# UNIT` or `# EOF` lines (which that format does not have).
    pub fn render_classic(&self) -> String {
        let open = self.render();
        let counters: Vec<&str> = open
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
            .collect();
        let mut out = String::with_capacity(open.len());
        for line in open.lines() {
            if line.starts_with("# UNIT ") || line == "# EOF" {
                continue;
            }
            let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
                let rest = line.strip_prefix(p)?;
                let (name, tail) = rest.split_once(' ')?;
                counters
                    .contains(&name)
                    .then(|| format!("{p}{name}_total {tail}"))
            });
            let _ = writeln!(out, "{}", renamed.as_deref().unwrap_or(line));
        }
        out
    }

    /// Writes [`Metrics::render_classic`] to `path` atomically (a temporary file in the same
    /// folder, then renamed), so node_exporter never reads half a file.
    pub fn write_textfile(&self, path: &Path) -> std::io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", std::process::id()));
        std::fs::write(&tmp, self.render_classic())?;
        std::fs::rename(&tmp, path)
    }
}

/// Serves `GET /metrics` on `addr` from a thread of its own; returns once listening.
pub fn serve_http(addr: &str, metrics: Arc<Metrics>) -> std::io::Result<std::net::SocketAddr> {
    let server = tiny_http::Server::http(addr).map_err(std::io::Error::other)?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| std::io::Error::other("not an IP address"))?;
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let response = respond(&metrics, request.url());
                let _ = request.respond(response);
            }
        })?;
    Ok(bound)
}

/// A waiting job's `reason` label from its decision's `wait_reason` (the core's
/// [`WaitReason`], tagged by `reason`): the reason's tag, but `blocked_KIND` for a job
/// Slurm would not start yet (`blocked_user_hold`, `blocked_dependency`: the kind of its
/// [`hadar_core::gate::Hold`]); `held_by_daemon` for a job the daemon holds back for
/// another reason (a committed type, an unenforceable placement), which has none.
fn waiting_label(wait_reason: Option<&serde_json::Value>) -> String {
    let Some(r) = wait_reason else {
        return "held_by_daemon".into();
    };
    if let Ok(WaitReason::SlurmHolds { hold }) = serde_json::from_value(r.clone()) {
        let kind = match serde_json::to_value(hold) {
            Ok(serde_json::Value::String(kind)) => kind,
            Ok(serde_json::Value::Object(m)) => m.keys().next().cloned().unwrap_or_default(),
            _ => String::new(),
        };
        return format!("blocked_{kind}");
    }
    match r.get("reason").and_then(|r| r.as_str()) {
        Some(reason) => reason.to_string(),
        None => "held_by_daemon".into(),
    }
}

/// The metrics as the round loop's observer: each round's end recorded, then the
/// node_exporter textfile (if one is configured) written.
pub struct MetricsObserver {
    metrics: Arc<Metrics>,
    textfile: Option<std::path::PathBuf>,
}

impl MetricsObserver {
    /// Records into `metrics` (shared with the HTTP endpoint) and writes `textfile` after
    /// every round.
    pub fn new(metrics: Arc<Metrics>, textfile: Option<std::path::PathBuf>) -> MetricsObserver {
        MetricsObserver { metrics, textfile }
    }
}

impl RoundObserver for MetricsObserver {
    fn round_end(&mut self, end: &RoundEnd<'_>) {
        match end {
            RoundEnd::Done {
                report,
                store,
                now_unix,
            } => {
                if let Err(e) = self.metrics.round_done(report, store, *now_unix) {
                    tracing::warn!("metrics: {e}");
                }
            }
            RoundEnd::Standby => {}
            RoundEnd::Failed(e) => self.metrics.round_failed(e),
        }
        if let Some(path) = &self.textfile
            && let Err(e) = self.metrics.write_textfile(path)
        {
            tracing::warn!("writing the metrics textfile {}: {e}", path.display());
        }
    }
}

fn respond(metrics: &Metrics, url: &str) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    if url != "/metrics" {
        return tiny_http::Response::from_string("not found; try /metrics\n").with_status_code(404);
    }
    let header = tiny_http::Header::from_bytes(
        "Content-Type",
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
    )
    .expect("a valid header");
    tiny_http::Response::from_string(metrics.render()).with_header(header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_daemon::action_log::ActionOutcome;
    use hadar_store::{Decision, Outcome, RoundRow};

    fn decision(job: u64, runs: bool, reason: Option<&str>) -> Decision {
        Decision {
            runs,
            wait_reason: reason.map(|r| serde_json::json!({ "reason": r })),
            ..Decision::new(job, 3)
        }
    }

    #[test]
    fn a_blocked_job_is_counted_by_what_blocks_it() {
        use hadar_core::gate::Hold;
        let label = |hold: Hold| {
            waiting_label(
                serde_json::to_value(WaitReason::SlurmHolds { hold })
                    .ok()
                    .as_ref(),
            )
        };
        assert_eq!(label(Hold::UserHold), "blocked_user_hold");
        assert_eq!(
            label(Hold::Dependency("afterok:3".into())),
            "blocked_dependency"
        );
        assert_eq!(label(Hold::Begin(5)), "blocked_begin");
        assert_eq!(label(Hold::Licenses("matlab:1".into())), "blocked_licenses");
        assert_eq!(
            label(Hold::PartitionClosed("gpu (DOWN)".into())),
            "blocked_partition_closed"
        );
        assert_eq!(
            waiting_label(Some(&serde_json::json!({ "reason": "time_share" }))),
            "time_share"
        );
        assert_eq!(waiting_label(None), "held_by_daemon");
        assert_eq!(
            waiting_label(Some(&serde_json::json!({}))),
            "held_by_daemon"
        );
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn a_round_is_counted_from_its_report_and_the_store() {
        let mut store = Store::in_memory().unwrap();
        let mut row = RoundRow {
            round: 3,
            ..Default::default()
        };
        row.capacity.insert("k80".into(), 4);
        // v100: 1 held by a managed job, 1 by an unmanaged one (not usable: capacity 5).
        row.capacity.insert("v100".into(), 5);
        row.busy.insert("v100".into(), 2);
        let mut managed = hadar_store::JobRow::new(1, "a".into(), String::new(), 1, 1.0, 0.0);
        managed.phase = Phase::Running;
        managed.placement = Some(vec![("n1".into(), vec![("v100".into(), 1)])]);
        store.write(|w| w.put_job(&managed)).unwrap();
        let decisions = [
            decision(1, true, None),
            decision(2, false, Some("does_not_fit")),
            decision(3, false, Some("does_not_fit")),
            decision(4, false, None),
        ];
        store.write(|w| w.put_round(&row, &decisions)).unwrap();
        let report = RoundReport {
            round: 3,
            actions: vec![
                ActionDone::new(1, ActionKind::Start, ActionOutcome::Intent(Outcome::Ok)),
                ActionDone::new(5, ActionKind::Preempt, ActionOutcome::Intent(Outcome::Ok)),
                ActionDone::new(
                    6,
                    ActionKind::Hold,
                    ActionOutcome::Intent(Outcome::Error("scontrol timed out".into())),
                ),
                ActionDone::new(
                    7,
                    ActionKind::ForkStart,
                    ActionOutcome::Done("3 copies".into()),
                ),
                ActionDone::new(
                    8,
                    ActionKind::Start,
                    ActionOutcome::Intent(Outcome::Skipped("not a released pending job".into())),
                ),
            ],
            read_ms: 20.0,
            total_ms: 250.0,
            slurm_io: hadar_slurm::SlurmIo {
                commands: 9,
                bytes_read: 123_456,
                ..Default::default()
            },
            ..Default::default()
        };
        let m = Metrics::new();
        m.notice();
        m.round_done(&report, &store, 1_700_000_000.5).unwrap();
        let t = m.render();
        assert_eq!(value(&t, "hadar_rounds_total"), Some(1.0));
        assert_eq!(value(&t, "hadar_starts_total"), Some(1.0), "{t}");
        assert_eq!(value(&t, "hadar_preemptions_total"), Some(1.0));
        assert_eq!(value(&t, "hadar_forked_rounds_total"), Some(1.0));
        assert_eq!(value(&t, "hadar_slurm_command_failures_total"), Some(1.0));
        assert_eq!(value(&t, "hadar_slurm_commands_total"), Some(9.0));
        assert_eq!(value(&t, "hadar_slurm_read_bytes_total"), Some(123_456.0));
        assert_eq!(value(&t, "hadar_notices_total"), Some(1.0));
        assert_eq!(value(&t, "hadar_running_jobs"), Some(1.0));
        assert_eq!(
            value(&t, "hadar_queue_waiting_jobs{reason=\"does_not_fit\"}"),
            Some(2.0)
        );
        assert_eq!(
            value(&t, "hadar_queue_waiting_jobs{reason=\"held_by_daemon\"}"),
            Some(1.0)
        );
        assert_eq!(
            value(&t, "hadar_gpus{gpu_type=\"v100\",state=\"busy\"}"),
            Some(2.0)
        );
        assert_eq!(
            value(&t, "hadar_gpus{gpu_type=\"v100\",state=\"idle\"}"),
            Some(4.0)
        );
        assert_eq!(
            value(&t, "hadar_gpus{gpu_type=\"k80\",state=\"idle\"}"),
            Some(4.0)
        );
        assert_eq!(
            value(&t, "hadar_last_round_completed_timestamp_seconds"),
            Some(1_700_000_000.5)
        );
        // 250 ms lies in the bucket up to 0.256 s, not in the one up to 0.064 s.
        assert_eq!(
            value(
                &t,
                "hadar_round_phase_seconds_bucket{le=\"0.256\",phase=\"total\"}"
            ),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            value(
                &t,
                "hadar_round_phase_seconds_bucket{le=\"0.064\",phase=\"total\"}"
            ),
            Some(0.0)
        );
        m.round_failed(&DaemonError::InvalidPlan("x".into()));
        assert_eq!(value(&m.render(), "hadar_round_failures_total"), Some(1.0));
    }

    #[test]
    fn the_textfile_is_classic_text_and_replaced_whole() {
        let m = Metrics::new();
        let classic = m.render_classic();
        assert!(classic.contains("# TYPE hadar_rounds_total counter\nhadar_rounds_total 0\n"));
        assert!(classic.contains("# HELP hadar_rounds_total Rounds completed"));
        assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hadar.prom");
        std::fs::write(&path, "old").unwrap();
        m.notice();
        m.write_textfile(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(value(&text, "hadar_notices_total"), Some(1.0));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left");
    }

    #[test]
    fn the_http_endpoint_serves_the_metrics_and_nothing_else() {
        use std::io::{Read, Write};
        let m = Arc::new(Metrics::new());
        m.notice();
        let addr = serve_http("127.0.0.1:0", m.clone()).unwrap();
        let get = |path: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("/metrics");
        assert!(
            ok.starts_with("HTTP/1.0 200") || ok.starts_with("HTTP/1.1 200"),
            "{ok}"
        );
        assert!(ok.contains("application/openmetrics-text"), "{ok}");
        assert!(ok.contains("\nhadar_notices_total 1\n"), "{ok}");
        assert!(get("/").contains(" 404 "));
    }
}
