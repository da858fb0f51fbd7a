//! `hadar serve`: the daemon that schedules a real Slurm cluster with the Hadar core.
//!
//! * [`config`]: its settings in the shared `hadar.toml`.
//! * [`check`]: `hadar check-config`, the file checked against the live cluster.
//! * [`spec`]: a managed job's size, length and throughput priors.
//! * [`progress`]: the progress channel (the job's own Slurm comment).
//! * [`view`]: the cluster as the policy sees it, and placement name translation.
//! * [`exclusive`]: `--exclusive` jobs kept to whole nodes of their own (pure).
//! * [`facts`]: what Slurm says about jobs and nodes, as the served policy's passes read it.
//! * [`reconcile`]: the store brought in line with Slurm (pure).
//! * [`arrays`]: job arrays' pending elements split off into managed jobs of their own (pure).
//! * [`eligible`]: waiting jobs Slurm itself would not start yet, and why (pure).
//! * [`dependency`]: whether a job's dependency is already met by the jobs in sight (pure).
//! * [`actions`]: the plan turned into actions (pure).
//! * [`explain`]: decisions in words.
//! * [`notices`]: the plugin's notice socket, reachable only by slurmctld's user.
//! * [`daemon`]: the round loop (read, decide, enforce, record) and crash safety.
//! * [`snapshot`]: the round's reading of Slurm and the store, once, after its upkeep.
//! * [`upkeep`]: what precedes each plan (failed-open jobs, arrays, jobs released by others).
//! * [`decide`]: the round's decision from its snapshot (pure).
//! * [`enforce`]: the decision carried out on Slurm, each action an intent first.
//! * [`record`]: the round's summary for `hadar status` (pure).
//! * [`replay`]: each round's snapshot kept, and its decision computed again (`hadar replay`).
//! * [`fork`]: forked (HadarE) jobs as rounds of heterogeneous copy jobs, consolidated.
//! * [`failopen`]: the heartbeat, `hadar fail-open`, and taking failed-open jobs back.
//! * [`faults`]: named crash points for the fault tests.
//! * [`metrics`]: Prometheus metrics over HTTP and as a node_exporter textfile.
//! * [`shadow`]: shadow mode, recording what Hadar would do and acting on nothing.
//! * [`sd_notify`]: systemd's readiness, watchdog and stopping notifications.

pub mod action_log;
pub mod actions;
pub mod apply;
pub mod arrays;
pub mod check;
pub mod config;
pub mod daemon;
pub mod decide;
pub mod dependency;
pub mod eligible;
pub mod error;
pub mod exclusive;
pub mod explain;
pub mod facts;
pub mod failopen;
pub mod faults;
pub mod fork;
pub mod fork_consolidate;
pub(crate) mod key_lines;
pub mod metrics;
pub mod notices;
pub mod progress;
pub mod read;
pub mod reconcile;
pub mod replay;
pub mod sd_notify;
pub mod shadow;
pub mod shared;
pub mod site;
pub mod site_limits;
pub mod slurm_api;
pub mod snapshot;
pub mod spec;
pub mod summary;
pub mod unmovable;
pub mod upkeep;
pub mod view;

pub use config::DaemonConfig;
pub use daemon::{Daemon, DaemonError, Decoder, RoundReport, SlurmApi};
