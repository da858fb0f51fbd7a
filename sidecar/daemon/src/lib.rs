//! `hadar serve`'s round loop: the daemon that schedules a real Slurm cluster with the
//! Hadar core, and its Slurm I/O. What runs beside the loop (metrics, systemd's
//! notifications, the notice socket, check-config, shadow mode, replay) is `hadar-ops`,
//! plugged in through [`observe::RoundObserver`].
//!
//! * [`config`]: its settings in the shared `hadar.toml`.
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
//! * [`daemon`]: the round loop (read, decide, enforce, record) and crash safety.
//! * [`observe`]: what the loop tells those watching it, after each round.
//! * [`read`]: the round's reading of Slurm and the store into a [`snapshot`], once.
//! * [`upkeep`]: what precedes each plan (failed-open jobs, arrays, jobs released by others).
//! * [`decide`]: the round's decision from its snapshot (pure).
//! * [`apply`]: the decision carried out on Slurm, each action an intent first.
//! * [`room`]: the GPUs a round's starts may take, free now (pure).
//! * [`summary`]: the round's summary for `hadar status` (pure).
//! * [`kept`]: each round's snapshot kept for `hadar replay`.
//! * [`fork`]: forked (HadarE) jobs as rounds of heterogeneous copy jobs, consolidated.
//! * [`failopen`]: the heartbeat, `hadar fail-open`, and taking failed-open jobs back.
//! * [`faults`]: named crash points for the fault tests.
//! * [`site`]: the site's rules (limits, reservations, partitions), from Slurm or a file.

pub mod action_log;
pub mod actions;
pub mod apply;
pub mod arrays;
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
pub mod kept;
pub mod key_lines;
pub mod observe;
pub mod progress;
pub mod read;
pub mod reconcile;
pub mod room;
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
