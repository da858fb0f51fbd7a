//! `hadar serve`'s metrics on a real Slurm: the test cluster of the shared harness (four
//! slurmd with fake V100/P100/K80 GPUs) with some GPUs held by jobs hadar does not manage;
//! the daemon serves its metrics over HTTP and writes the node_exporter textfile while it
//! starts one job and keeps another waiting. The values scraped are checked against what
//! Slurm shows (GPUs held per type, jobs pending) and what the test did (submissions,
//! starts). The daemon runs as systemd would run it (notify socket, watchdog, journald
//! stream), and what it told systemd and how it logged are checked too. `harness = false`: arguments are name filters, `--skip NAME`, `--list`.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{NODES, Options, Scenario, Testbed, run_scenarios};
use serve::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

const SCENARIOS: &[Scenario] = &[(
    "metrics_follow_a_start_a_waiting_job_and_foreign_gpus",
    metrics_follow_a_start_a_waiting_job_and_foreign_gpus,
)];

fn main() -> ExitCode {
    let options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("metrics-testbed"));
    run_scenarios(SCENARIOS, options, wait_queue_empty)
}

/// Samples of an exposition, by series (`name{labels}`).
fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The address the daemon logged it serves metrics on (it binds port 0: the system picks).
fn metrics_address(bed: &Testbed) -> Option<String> {
    let log = std::fs::read_to_string(bed.path("log/hadar-serve.log")).ok()?;
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("serving metrics on http://"))?;
    let url = line.split("http://").nth(1)?;
    Some(url.split('/').next()?.to_string())
}

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the metrics endpoint");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

fn get(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    m.get(series).copied().unwrap_or(0.0)
}

/// GPUs per type that running jobs hold, as Slurm shows them.
fn held_per_type(bed: &Testbed, jobs: &[u32]) -> BTreeMap<String, u32> {
    let mut held = BTreeMap::new();
    for id in jobs {
        for (_, t, c) in allocation(bed, *id) {
            *held.entry(t).or_insert(0) += c;
        }
    }
    held
}

fn metrics_follow_a_start_a_waiting_job_and_foreign_gpus(bed: &mut Testbed) {
    // Free: n1's 4 V100 and 2 of n2's P100. A 4-GPU job fits on n1 only; a second waits.
    let fillers = occupy(
        bed,
        &[
            ("n2", "gpu:p100:2"),
            ("n3", "gpu:k80:4"),
            ("n4", "gpu:v100:2,gpu:k80:2"),
        ],
    );
    let textfile = bed.path("metrics/hadar.prom");
    std::fs::create_dir_all(textfile.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&textfile);
    let (notify_path, heard, stream) = as_systemd(bed);
    let mut serve = Serve::start_configured(
        bed,
        "metrics",
        &format!(
            "metrics_listen = \"127.0.0.1:0\"\nmetrics_textfile = \"{}\"\n",
            textfile.display()
        ),
        &[
            ("NOTIFY_SOCKET", notify_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
            ("JOURNAL_STREAM", &stream),
        ],
    );
    let mut addr = None;
    wait_until("the daemon serves metrics", 30, || {
        addr = metrics_address(bed);
        addr.is_some()
    });
    let addr = addr.unwrap();
    let before = parse(&scrape(&addr));
    assert_eq!(get(&before, "hadar_starts_total"), 0.0);

    let first = submit(
        bed,
        &["--gpus=4", &output_args(bed)],
        &script("resnet50-b64", 1_000_000, ""),
    );
    wait_state(bed, first, &["RUNNING"], 30);
    let second = submit(
        bed,
        &["--gpus=4", &output_args(bed)],
        &script("resnet50-b64", 1_000_000, ""),
    );
    let mut held = held_per_type(bed, &[&fillers[..], &[first]].concat());
    // A round that started after the second job was submitted and the first one was running.
    let waiting = |m: &BTreeMap<String, f64>| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with("hadar_queue_waiting_jobs{"))
            .map(|(_, v)| v)
            .sum()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    let m = loop {
        let m = parse(&scrape(&addr));
        let seen = get(&m, "hadar_gpus{gpu_type=\"v100\",state=\"busy\"}")
            == f64::from(held["v100"])
            && get(&m, "hadar_running_jobs") == 1.0
            && waiting(&m) == 1.0;
        if seen || std::time::Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(
        get(&m, "hadar_running_jobs"),
        1.0,
        "{m:#?}\n{}",
        daemon_log(bed)
    );
    assert_eq!(waiting(&m), 1.0, "{m:#?}\n{}", daemon_log(bed));
    held = held_per_type(bed, &[&fillers[..], &[first]].concat());
    let pending = bed
        .client("squeue", &["-h", "-t", "PD", "-o", "%i"])
        .unwrap_or_default();
    assert_eq!(pending.trim(), second.to_string(), "the second job waits");
    assert_one_start_and_busy_gpus(&m, &before, &held);
    assert_textfile(&textfile, get(&m, "hadar_rounds_total"));

    // Both jobs gone: the next rounds see an empty queue and the first job's GPUs idle.
    for id in [second, first] {
        let _ = bed.client("scancel", &[&id.to_string()]);
    }
    wait_until("the queue metric empties", 40, || {
        let m = parse(&scrape(&addr));
        m.keys()
            .all(|k| !k.starts_with("hadar_queue_waiting_jobs{"))
            && get(&m, "hadar_running_jobs") == 0.0
            && get(&m, "hadar_gpus{gpu_type=\"v100\",state=\"idle\"}") == 4.0
    });
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(serve.pid() as i32, libc::SIGTERM) };
    assert!(
        serve.wait_exit(30).is_some_and(|s| s.success()),
        "the daemon stops on SIGTERM"
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_systemd_heard_the_life(bed, &heard.lock().unwrap());
    for f in fillers {
        let _ = bed.client("scancel", &[&f.to_string()]);
    }
}

/// As systemd would start the daemon: a notify socket whose messages a thread collects, and
/// stderr on journald's stream (here the log file, named by its device and inode). Returns
/// the socket's path, the messages heard, and the stream's `JOURNAL_STREAM` value.
fn as_systemd(bed: &Testbed) -> (PathBuf, Arc<Mutex<Vec<String>>>, String) {
    let notify_path = bed.path("run/notify.sock");
    let _ = std::fs::remove_file(&notify_path);
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let heard = Arc::new(Mutex::new(Vec::<String>::new()));
    let into = heard.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n) = notify.recv(&mut buf) {
            let note = String::from_utf8_lossy(&buf[..n]).into_owned();
            into.lock().unwrap().push(note);
        }
    });
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(bed.path("log/hadar-serve.log"))
        .unwrap()
        .metadata()
        .unwrap();
    let stream = format!("{}:{}", log.dev(), log.ino());
    (notify_path, heard, stream)
}

/// A scrape `m` of a round with one job started (since `before`) and one waiting: GPUs busy
/// per type as Slurm holds them (`held`), the counters, and the rounds' timing series.
fn assert_one_start_and_busy_gpus(
    m: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
    held: &BTreeMap<String, u32>,
) {
    for (t, capacity) in capacity_per_type() {
        let busy = held.get(&t).copied().unwrap_or(0);
        let series = |s: &str| format!("hadar_gpus{{gpu_type=\"{t}\",state=\"{s}\"}}");
        assert_eq!(get(m, &series("busy")), f64::from(busy), "{t}: {m:?}");
        assert_eq!(
            get(m, &series("idle")),
            f64::from(capacity - busy),
            "{t}: {m:?}"
        );
    }
    assert_eq!(get(m, "hadar_starts_total"), 1.0, "{m:?}");
    assert_eq!(get(m, "hadar_preemptions_total"), 0.0);
    assert_eq!(get(m, "hadar_slurm_command_failures_total"), 0.0);
    assert_eq!(get(m, "hadar_round_failures_total"), 0.0);
    assert!(
        get(m, "hadar_notices_total") >= 2.0,
        "one notice per submission: {m:?}"
    );
    let rounds = get(m, "hadar_rounds_total");
    assert!(rounds > get(before, "hadar_rounds_total"), "{m:?}");
    assert_eq!(
        get(m, "hadar_round_phase_seconds_count{phase=\"total\"}"),
        rounds,
        "every round's duration is observed"
    );
    let last = get(m, "hadar_last_round_completed_timestamp_seconds");
    let now = hadar_daemon::daemon::now_unix();
    assert!(
        last <= now && last > now - 10.0,
        "last round at {last}, now {now}"
    );
}

/// The textfile: classic text (counters' families carry `_total`), written each round, at
/// most one round behind the scrape that saw `rounds`.
fn assert_textfile(textfile: &Path, rounds: f64) {
    let text = std::fs::read_to_string(textfile).expect("the textfile is written");
    assert!(
        text.contains("# TYPE hadar_starts_total counter\n"),
        "{text}"
    );
    let f = parse(&text);
    assert_eq!(get(&f, "hadar_starts_total"), 1.0);
    assert!(get(&f, "hadar_rounds_total") >= rounds - 1.0);
}

/// systemd heard READY=1 first, watchdog pings while the loop turned, STOPPING=1 on SIGTERM;
/// the log lines carry journald's level prefix and no timestamp.
fn assert_systemd_heard_the_life(bed: &Testbed, notes: &[String]) {
    assert_eq!(
        notes.first().map(String::as_str),
        Some("READY=1"),
        "{notes:?}"
    );
    assert_eq!(
        notes.last().map(String::as_str),
        Some("STOPPING=1"),
        "{notes:?}"
    );
    assert!(
        notes.iter().filter(|n| *n == "WATCHDOG=1").count() >= 2,
        "{notes:?}"
    );
    let log = std::fs::read_to_string(bed.path("log/hadar-serve.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.contains("serving metrics on http://"))
        .unwrap();
    let ours = &lines[start..];
    assert!(
        ours[0].starts_with("<6>serving metrics on http://"),
        "{}",
        ours[0]
    );
    assert!(
        ours.iter().any(|l| l.starts_with("<6>round done round=")),
        "{log}"
    );
    assert!(ours.iter().all(|l| l.starts_with('<')), "{log}");
}

fn capacity_per_type() -> BTreeMap<String, u32> {
    let mut cap = BTreeMap::new();
    for (_, gpus) in NODES {
        for (t, n) in gpus {
            *cap.entry(t.to_string()).or_insert(0) += n;
        }
    }
    cap
}
