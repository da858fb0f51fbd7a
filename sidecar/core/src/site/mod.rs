//! A site's own rules, as pure passes over a round: the weight a job carries from the site's
//! multifactor priority ([`priority`]), the QOS, association and partition limits a plan
//! must stay within ([`limits`]), and the time limits a placement must let a job meet
//! ([`time_limit`]). The daemon reads the site's figures from Slurm and calls these; the
//! simulator can call them on a trace's figures. No IO here.

pub mod limits;
pub mod priority;
pub mod time_limit;

pub use limits::{Bound, Limit, Scope, SiteJob};
pub use priority::{Factors, PriorityInputs, PriorityWeights};
