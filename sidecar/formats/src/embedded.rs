//! The default workload compiled into the binary, so that `hadar simulate` with no
//! arguments runs something meaningful: Gavel's isolated throughputs for V100, P100 and K80,
//! a 40-job multi-GPU trace made with Gavel's generator, and Gavel's 4+4+4 GPU cluster (one
//! GPU per node). See `data/README.md` for where each comes from.

use crate::error::FormatError;
use crate::{ThroughputTable, parse_cluster_spec, parse_trace};
use hadar_core::{Cluster, Job};

/// The throughput table, in Gavel's format.
pub const THROUGHPUTS_JSON: &str = include_str!("../data/gavel-isolated-throughputs.json");
/// The trace, in Gavel's format.
pub const TRACE: &str = include_str!("../data/default.trace");
/// The cluster, in the short form.
pub const CLUSTER_SPEC: &str = "v100:4,p100:4,k80:4";
/// GPUs per node of the default cluster.
pub const GPUS_PER_NODE: u32 = 1;

/// The embedded throughput table.
pub fn throughputs() -> Result<ThroughputTable, FormatError> {
    ThroughputTable::parse_gavel_json(THROUGHPUTS_JSON, "<embedded throughputs>")
}

/// The embedded cluster.
pub fn cluster() -> Result<Cluster, FormatError> {
    parse_cluster_spec(CLUSTER_SPEC, GPUS_PER_NODE)
}

/// The embedded trace, read against `table` and `cluster`.
pub fn trace(table: &ThroughputTable, cluster: &Cluster) -> Result<Vec<Job>, FormatError> {
    parse_trace(TRACE, "<embedded trace>", table, cluster)
}

#[cfg(test)]
mod tests {
    #[test]
    fn embedded_inputs_parse() {
        let table = super::throughputs().unwrap();
        let cluster = super::cluster().unwrap();
        let jobs = super::trace(&table, &cluster).unwrap();
        assert_eq!(jobs.len(), 40);
        assert_eq!(cluster.total_gpus(), 12);
        assert!(jobs.iter().any(|j| j.workers > 1));
    }
}
