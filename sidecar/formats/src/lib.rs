//! Readers for hadar's inputs, each failing with an error that names the file, the line and
//! the field at fault, so a user can fix the input without guessing.
//!
//! * [`accounts`]: accounts for a simulated trace (fair-share and QOS per job).
//! * [`cluster`]: a cluster from a TOML file or a short form such as `v100:16,p100:16`.
//! * [`throughputs`]: Gavel's `simulation_throughputs.json`, read as it is, and every lookup
//!   of a job type's rate in it ([`ThroughputTable`]).
//! * [`job_types`]: the table's job types by the names users write (`resnet50-b64`).
//! * [`trace`]: Gavel's 10-column `.trace` files, read as they are.
//! * [`jobs`]: the queue of a `hadar dry-run`, in TOML or JSON.
//! * [`sia`]: Sia's benchmark workloads and profiles, as rigid jobs on its GPU clusters.
//! * [`embedded`]: the default workload compiled into the binary.

pub mod accounts;
pub mod cluster;
pub mod embedded;
pub mod error;
pub mod job_types;
pub mod jobs;
pub mod sia;
pub mod synthetic;
pub mod throughputs;
pub mod trace;

pub use accounts::{AccountsFile, load_accounts, parse_accounts};
pub use cluster::{load_cluster, parse_cluster_spec, parse_cluster_toml};
pub use error::{FormatError, Location};
pub use job_types::short_name;
pub use jobs::{JobsFile, JobsSyntax, load_jobs, parse_jobs};
pub use sia::{SiaCluster, SiaWorkload, load_sia};
pub use throughputs::{TableRate, ThroughputTable};
pub use trace::{load_trace, parse_trace};
