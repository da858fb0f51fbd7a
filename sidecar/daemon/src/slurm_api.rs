//! The one interface through which the daemon reaches Slurm ([`SlurmApi`]), implemented by
//! the Slurm adapter ([`hadar_slurm::Slurm`]) and by test doubles; and the clock the daemon
//! reads.

use hadar_slurm::job::Refused;
use hadar_slurm::{GpuSpec, NodeInfo, Slurm, SlurmError, SlurmJob};

/// What the daemon needs from Slurm; implemented by [`Slurm`] and by test doubles.
pub trait SlurmApi {
    /// All nodes.
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError>;
    /// All jobs, and refused records.
    fn jobs(&self) -> Result<(Vec<SlurmJob>, Refused), SlurmError>;
    /// One job.
    fn job(&self, id: u64) -> Result<Option<SlurmJob>, SlurmError>;
    /// Gives a pending job its GPUs.
    fn set_placement(&self, id: u64, spec: &GpuSpec) -> Result<(), SlurmError>;
    /// Makes a job eligible now.
    fn start_now(&self, id: u64) -> Result<(), SlurmError>;
    /// Gives the pending job `current` (as the round read it) its GPUs, makes it eligible
    /// now and, with `comment`, sets its `Comment`; [`Slurm`] does all of it in one update.
    fn place_and_start(
        &self,
        current: &SlurmJob,
        spec: &GpuSpec,
        comment: Option<&str>,
    ) -> Result<(), SlurmError> {
        self.set_placement(current.id, spec)?;
        self.start_now(current.id)?;
        match comment {
            Some(text) => self.set_comment(current.id, text),
            None => Ok(()),
        }
    }
    /// Releases a held job.
    fn release(&self, id: u64) -> Result<(), SlurmError>;
    /// Releases the held jobs `ids`; the jobs whose release failed, with why. [`Slurm`]
    /// names many jobs in one command.
    fn release_many(&self, ids: &[u64]) -> Result<Vec<(u64, String)>, SlurmError> {
        Ok(ids
            .iter()
            .filter_map(|id| self.release(*id).err().map(|e| (*id, e.to_string())))
            .collect())
    }
    /// Holds a pending job.
    fn hold(&self, id: u64) -> Result<(), SlurmError>;
    /// Signals a job.
    fn signal(&self, id: u64, signal: &str) -> Result<(), SlurmError>;
    /// Requeues a job held.
    fn requeue_hold(&self, id: u64) -> Result<(), SlurmError>;
    /// Signals the jobs `ids`; the jobs it could not signal, with why. [`Slurm`] names many
    /// jobs in one command.
    fn signal_many(&self, ids: &[u64], signal: &str) -> Result<Vec<(u64, String)>, SlurmError> {
        Ok(ids
            .iter()
            .filter_map(|id| self.signal(*id, signal).err().map(|e| (*id, e.to_string())))
            .collect())
    }
    /// Requeues the jobs `ids` held; the jobs it could not requeue, with why. [`Slurm`] names
    /// many jobs in one command.
    fn requeue_hold_many(&self, ids: &[u64]) -> Result<Vec<(u64, String)>, SlurmError> {
        Ok(ids
            .iter()
            .filter_map(|id| self.requeue_hold(*id).err().map(|e| (*id, e.to_string())))
            .collect())
    }
    /// Sets a job's admin comment (the record; used to take back a failed-open job).
    fn set_admin_comment(&self, id: u64, text: &str) -> Result<(), SlurmError>;
    /// Removes a pending job's GPU request, as the plugin does at submission.
    fn clear_gpu_request(&self, id: u64) -> Result<(), SlurmError>;
    /// The Slurm release answering, when known (for the log and `hadar status`).
    fn slurm_release(&self) -> Option<String> {
        None
    }
    /// Splits a pending array element off into a job record of its own
    /// ([`Slurm::split_array_element`]); test doubles have no arrays.
    fn split_array_element(
        &self,
        _array_id: u64,
        _task: u32,
        _admin_comment: &str,
    ) -> Result<(), SlurmError> {
        Ok(())
    }
    /// Sets a waiting job's `Comment` (why it waits, for `squeue`); test doubles ignore it.
    fn set_comment(&self, _id: u64, _text: &str) -> Result<(), SlurmError> {
        Ok(())
    }
    /// Sets the `Comment` of each of the waiting jobs `ids` to `text`; [`Slurm`] names many
    /// jobs in one command.
    fn set_comments(&self, ids: &[u64], text: &str) -> Result<(), SlurmError> {
        ids.iter().try_for_each(|id| self.set_comment(*id, text))
    }
    /// Whether updating a pending job's GPU types replaces them (24.11 and later) rather than
    /// adding to them for the job's life (22.05, and the default).
    fn retypes_pending_jobs(&self) -> bool {
        false
    }
    /// The site's priority settings, job accounts and limits ([`crate::site`]); none by
    /// default.
    /// The commands run so far and the bytes they answered (zero for a double that does not
    /// count them): what each round costs slurmctld, in the round's report.
    fn io(&self) -> hadar_slurm::SlurmIo {
        hadar_slurm::SlurmIo::default()
    }

    fn site_figures(&self) -> Result<hadar_slurm::site::SiteFigures, SlurmError> {
        Ok(Default::default())
    }
    /// The site's `scontrol show config` settings alone (shadow mode reads `JobRequeue`);
    /// Slurm's defaults by default.
    fn site_config(&self) -> Result<hadar_slurm::site::SiteConfig, SlurmError> {
        Ok(Default::default())
    }
}

impl SlurmApi for Slurm {
    fn io(&self) -> hadar_slurm::SlurmIo {
        Slurm::io(self)
    }
    fn site_figures(&self) -> Result<hadar_slurm::site::SiteFigures, SlurmError> {
        Slurm::site_figures(self)
    }
    fn site_config(&self) -> Result<hadar_slurm::site::SiteConfig, SlurmError> {
        Slurm::site_config(self)
    }
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        Slurm::nodes(self)
    }
    fn set_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        Slurm::set_comment(self, id, text)
    }
    fn set_comments(&self, ids: &[u64], text: &str) -> Result<(), SlurmError> {
        Slurm::set_comments(self, ids, text)
    }
    fn jobs(&self) -> Result<(Vec<SlurmJob>, Refused), SlurmError> {
        Slurm::jobs(self)
    }
    fn job(&self, id: u64) -> Result<Option<SlurmJob>, SlurmError> {
        Slurm::job(self, id)
    }
    fn set_placement(&self, id: u64, spec: &GpuSpec) -> Result<(), SlurmError> {
        Slurm::set_placement(self, id, spec)
    }
    fn start_now(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::start_now(self, id)
    }
    fn place_and_start(
        &self,
        current: &SlurmJob,
        spec: &GpuSpec,
        comment: Option<&str>,
    ) -> Result<(), SlurmError> {
        Slurm::place_and_start(self, current, spec, comment)
    }
    fn release(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::release(self, id)
    }
    fn release_many(&self, ids: &[u64]) -> Result<Vec<(u64, String)>, SlurmError> {
        Slurm::release_many(self, ids)
    }
    fn signal_many(&self, ids: &[u64], signal: &str) -> Result<Vec<(u64, String)>, SlurmError> {
        Slurm::signal_many(self, ids, signal)
    }
    fn requeue_hold_many(&self, ids: &[u64]) -> Result<Vec<(u64, String)>, SlurmError> {
        Slurm::requeue_hold_many(self, ids)
    }
    fn hold(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::hold(self, id)
    }
    fn signal(&self, id: u64, signal: &str) -> Result<(), SlurmError> {
        Slurm::signal(self, id, signal)
    }
    fn requeue_hold(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::requeue_hold(self, id)
    }
    fn set_admin_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        Slurm::set_admin_comment(self, id, text)
    }
    fn clear_gpu_request(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::clear_gpu_request(self, id)
    }
    fn slurm_release(&self) -> Option<String> {
        Slurm::slurm_release(self).ok().map(|r| r.to_string())
    }
    fn split_array_element(
        &self,
        array_id: u64,
        task: u32,
        admin_comment: &str,
    ) -> Result<(), SlurmError> {
        Slurm::split_array_element(self, array_id, task, admin_comment)
    }
    fn retypes_pending_jobs(&self) -> bool {
        Slurm::slurm_release(self).is_ok_and(|r| r.retypes_pending_jobs())
    }
}

/// Seconds since 1970 by the system clock.
pub fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
