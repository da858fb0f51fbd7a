//! What a Hadar-managed Slurm job asks for, shared by the `job_submit/hadar` plugin (which
//! reads and validates a submission and records it in the job) and the sidecar daemon (which
//! reads the record back).
//!
//! - [`directive`]: `#HADAR` script lines and the `--comment="hadar: ..."` form.
//! - [`gpu`]: GPU requests from Slurm's TRES fields (`--gres`, `--gpus`, `--gpus-per-node`).
//! - [`inventory`]: the cluster's GPUs per node, from slurm.conf.
//! - [`decide`]: the whole decision for one submission.
//! - [`record`]: the versioned one-line record kept in the job's admin comment.
//! - [`notify`]: the one-line notice the plugin sends the sidecar.
//! - [`config`]: the shared `hadar.toml`.
//!
//! Pure: no Slurm calls, no sockets, no clock; file reading only in [`config::Config::load`].

pub mod config;
pub mod decide;
pub mod directive;
pub mod gpu;
pub mod inventory;
pub mod notify;
pub mod record;

pub use config::{Config, ConfigError};
pub use decide::{Decision, Managed, RequestError, Submission, Unmanaged, decide};
pub use directive::{DirectiveError, Directives, JobDirectives, OptChoice, ThroughputHint};
pub use gpu::{GpuCount, GpuRequest, GpuRequestError, Scope, TresFields};
pub use inventory::{Inventory, InventoryError, NodeGpus};
pub use notify::{Notice, NoticeError};
pub use record::{Record, RecordError};
