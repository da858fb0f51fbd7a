//! What a Hadar-managed Slurm job asks for, shared by the `job_submit/hadar` plugin (which
//! reads and validates a submission and records it in the job) and the sidecar daemon (which
//! reads the record back).
//!
//! - [`directive`]: `#HADAR` script lines and the `--comment="hadar: ..."` form.
//! - [`gpu`]: GPU requests from Slurm's TRES fields (`--gres`, `--gpus`, `--gpus-per-node`).
//! - [`inventory`]: the cluster's GPUs per node, from slurm.conf.
//! - [`constraint`]: the `--constraint` expressions hadar reads itself.
//! - [`decide`]: the whole decision for one submission.
//! - [`record`]: the versioned one-line record kept in the job's admin comment.
//! - [`notify`]: the one-line notice the plugin sends the sidecar.
//! - [`config`]: the shared `hadar.toml`.
//!
//! Pure: no Slurm calls, no sockets, no clock; file reading only in [`config::Config::load`].

pub mod config;
pub mod constraint;
pub mod directive;
pub mod gpu;
pub mod inventory;
pub mod manage;
pub mod notify;
pub mod record;

pub use config::{Config, ConfigError, ConfigLocation};
pub use directive::{
    DirectiveError, Directives, JobDirectives, ModelTraits, OptChoice, Outer, ThroughputHint,
};
pub use gpu::{GpuCount, GpuRequest, GpuRequestError, Scope, TresFields};
pub use inventory::{Inventory, InventoryError, NodeGpus};
pub use manage::{Decision, Managed, NodeChoice, RequestError, Submission, Unmanaged, decide};
pub use notify::{Notice, NoticeError};
pub use record::{FailOpenMark, Record, RecordError};

/// The longest piece of user text an error message quotes, in characters.
pub const EXCERPT_CHARS: usize = 48;

/// User text as an error message quotes it: at most [`EXCERPT_CHARS`] characters (then `...`),
/// with control characters escaped, so that a hostile or oversized value can neither flood
/// slurmctld's log and the user's terminal nor forge extra log lines.
pub fn excerpt(text: &str) -> String {
    excerpt_of(text, EXCERPT_CHARS)
}

/// `text` on one line of about `max` characters at most (then `...`; an escape may overrun
/// by a few), control characters (line breaks included) escaped. Every reader of user or
/// file input in hadar quotes input through this in its errors.
pub fn excerpt_of(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut shown_chars = 0;
    for c in text.chars() {
        if shown_chars >= max {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            let escaped: String = c.escape_default().collect();
            shown_chars += escaped.chars().count();
            out.push_str(&escaped);
        } else {
            shown_chars += 1;
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn excerpts_are_short_and_single_line() {
        assert_eq!(super::excerpt("steps=12k"), "steps=12k");
        assert_eq!(
            super::excerpt("a\nJobId=1\u{1b}[2J"),
            "a\\nJobId=1\\u{1b}[2J"
        );
        let long = super::excerpt(&"x".repeat(1000));
        assert_eq!(long.len(), super::EXCERPT_CHARS + 3);
        assert!(long.ends_with("..."));
    }
}
