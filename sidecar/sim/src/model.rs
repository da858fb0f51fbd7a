//! The constraints of a real cluster that the simulator applies to every policy: what the
//! daemon lives with on Slurm. All are off by default, as in Gavel's simulator; the restart
//! (checkpoint and reload) cost is [`crate::SimConfig::restart_s`].

use hadar_core::passes::TargetFacts;
use hadar_core::{Cluster, GpuType, JobState};

/// A cluster's constraints, as the simulator models them.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterModel {
    /// Seconds a job loses each time it starts on new GPUs (first start, resume or move)
    /// before its first step: Slurm's release, prolog and launch.
    pub start_latency_s: f64,
    /// Seconds a forked job loses at the start of every round it runs: its copies are jobs
    /// started anew each round. When set, it is all a forked round loses: a copy job starts
    /// from the last checkpoint on whatever GPUs it gets, so neither the restart cost nor
    /// the start latency is added when the copies land elsewhere.
    pub copy_startup_s: f64,
    /// A job's first start costs its restart too (its own, [`hadar_core::Job::restart_s`],
    /// or the workload's), as Sia's simulator charges every start: its measured
    /// checkpoint-restore times include launching the job. Off: only a move or a resume
    /// pays it, and a first start pays [`ClusterModel::start_latency_s`] alone.
    pub first_start_restarts: bool,
    /// A started job keeps the GPU types of its first placement for its life (Slurm 22.05
    /// keeps the types of a typed request): policies see it only on those types.
    pub keeps_types: bool,
    /// Seconds from a job's submission to the moment the round it starts reads the queue
    /// (the plugin's notice waking the daemon, the daemon's read of Slurm). A round started
    /// by an arrival (the first one, or one after the cluster stood idle, or a woken one)
    /// begins this long after it, and sees every job that arrived by then: in a burst of
    /// submissions it sees only those that came before its read.
    pub wake_read_s: f64,
    /// Rounds woken by arrivals, as the daemon's are (its `MIN_WOKEN_GAP`): when above 0,
    /// a job arriving during a round ends that round early, and the next round begins at
    /// the later of the arrival plus [`ClusterModel::wake_read_s`] and the round's start
    /// plus this gap. 0 (the default, as in Gavel): an arrival waits for the round's end.
    pub wake_gap_s: f64,
    /// Rounds on the daemon's clock: a round lasts its whole length (or until an arrival
    /// wakes the next) even when every job in it stops sooner, and a forked job ends at the
    /// end of the round its last copies ran in, when the daemon's next round counts their
    /// steps. Off (as in Gavel): a round ends when its last job stops, and a job ends at its
    /// last step.
    pub fixed_rounds: bool,
    /// The share of a forked job's summed copy steps that counts as its progress when it
    /// ran as two or more copies (consolidating copies is worth less than one job running
    /// all their steps: docs/hadare-quality.md). 1 (the default): all of them; one copy is
    /// the job itself and always counts whole.
    pub fork_efficiency: f64,
}

impl Default for ClusterModel {
    fn default() -> Self {
        ClusterModel {
            start_latency_s: 0.0,
            copy_startup_s: 0.0,
            first_start_restarts: false,
            keeps_types: false,
            wake_read_s: 0.0,
            wake_gap_s: 0.0,
            fixed_rounds: false,
            fork_efficiency: 1.0,
        }
    }
}

impl ClusterModel {
    /// The progress of `placement` running at `summed` steps/s
    /// ([`hadar_core::policies::hadare::forked_progress`] for a forked one; a gang's is its
    /// rate).
    pub fn progress(&self, placement: &hadar_core::Placement, summed: f64) -> f64 {
        match placement.kind() {
            hadar_core::PlacementKind::Forked => hadar_core::policies::hadare::forked_progress(
                summed,
                placement.parts().len(),
                self.fork_efficiency,
            ),
            hadar_core::PlacementKind::Gang => summed,
        }
    }
}

impl ClusterModel {
    /// Checks the figures against the round length: each must be a number of seconds at
    /// least 0 and at most a round (together they may exceed one: what a round cannot
    /// hold is paid in the job's next rounds), and a copy's start-up under a round (else a
    /// forked job would never train).
    pub fn validate(&self, round_s: f64, restart_s: f64) -> Result<(), String> {
        for (name, v) in [
            ("restart cost", restart_s),
            ("start latency", self.start_latency_s),
            ("copy start-up", self.copy_startup_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} must be at least 0 seconds, got {v}"));
            }
            if v > round_s {
                return Err(format!(
                    "{name} ({v} s) must be at most a round ({round_s} s)"
                ));
            }
        }
        for (name, v) in [
            ("wake read", self.wake_read_s),
            ("wake gap", self.wake_gap_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} must be at least 0 seconds, got {v}"));
            }
        }
        if !(self.fork_efficiency > 0.0 && self.fork_efficiency <= 1.0) {
            return Err(format!(
                "fork efficiency must be above 0 and at most 1, got {}",
                self.fork_efficiency
            ));
        }
        if self.copy_startup_s > 0.0 && self.copy_startup_s >= round_s {
            return Err(format!(
                "copy start-up ({} s) must be shorter than a round ({round_s} s)",
                self.copy_startup_s
            ));
        }
        Ok(())
    }

    /// How long the round beginning at `now` lasts when planned for `round_s`: the whole
    /// round, unless woken rounds are on and `next_arrival` (the first job not yet seen)
    /// wakes the next one sooner.
    pub fn round_length(&self, round_s: f64, now: f64, next_arrival: Option<f64>) -> f64 {
        match next_arrival {
            Some(a) if self.wake_gap_s > 0.0 => {
                let woken = (a + self.wake_read_s).max(now + self.wake_gap_s);
                (woken - now).min(round_s)
            }
            _ => round_s,
        }
    }

    /// Seconds a job loses at the start of its round: the restart cost when `restarted`, the
    /// start latency when it `starts` on GPUs it did not hold, the copies' start-up when
    /// `forked` (only that when the copies' start-up is set); never the whole round.
    pub fn overhead_s(
        &self,
        restart_s: f64,
        restarted: bool,
        starts: bool,
        forked: bool,
        round_s: f64,
    ) -> f64 {
        if forked && self.copy_startup_s > 0.0 {
            return self.copy_startup_s.min(round_s);
        }
        let mut s = 0.0;
        if restarted {
            s += restart_s;
        }
        if starts {
            s += self.start_latency_s;
        }
        if forked {
            s += self.copy_startup_s;
        }
        s.min(round_s)
    }

    /// What a policy sees of a job held to `held` types: its throughput on those types only.
    pub fn as_seen(
        &self,
        cluster: &Cluster,
        state: &JobState,
        held: Option<&[GpuType]>,
    ) -> JobState {
        let mut s = state.clone();
        if let Some(held) = held.filter(|_| self.keeps_types) {
            let names: Vec<String> = held
                .iter()
                .map(|t| cluster.type_name(*t).to_string())
                .collect();
            hadar_core::passes::restrict_types(cluster, &mut s, &names);
        }
        s
    }

    /// The round as a policy sees it under this model: each job's state as seen
    /// ([`ClusterModel::as_seen`]), and what the target says about the jobs for the passes
    /// that apply its rules ([`hadar_core::Policy::plan_on`]). A job with a placement runs
    /// and holds it; under `keeps_types` a job that has started is held to the types of its
    /// first placement and its request names them, as Slurm 22.05 holds a typed request
    /// (what the daemon tells the same passes: [`hadar_core::passes::JobFacts`]). `jobs` are
    /// the active jobs in arrival order, each with the types of its first placement.
    pub fn round_view<'a>(
        &self,
        cluster: &Cluster,
        jobs: impl IntoIterator<Item = (&'a JobState, Option<&'a [GpuType]>)>,
    ) -> (Vec<JobState>, TargetFacts) {
        let mut held_names = Vec::new();
        let states: Vec<JobState> = jobs
            .into_iter()
            .map(|(state, held)| {
                if let Some(h) = held.filter(|_| self.keeps_types) {
                    let names = h.iter().map(|t| cluster.type_name(*t).to_string());
                    held_names.push((state.id(), names.collect::<Vec<_>>()));
                }
                self.as_seen(cluster, state, held)
            })
            .collect();
        let mut facts = TargetFacts::from_input(cluster, &states);
        for (id, names) in held_names {
            if let Some(f) = facts.jobs.get_mut(&id) {
                f.held_types = Some(names);
                f.typed = true;
            }
        }
        (states, facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arrival_wakes_the_next_round_no_sooner_than_the_gap() {
        let off = ClusterModel::default();
        assert_eq!(off.round_length(3.0, 10.0, Some(10.5)), 3.0);
        let woken = ClusterModel {
            wake_read_s: 0.1,
            wake_gap_s: 2.0,
            ..ClusterModel::default()
        };
        // Soon after the round's start: the gap holds the next round back.
        assert_eq!(woken.round_length(3.0, 10.0, Some(10.5)), 2.0);
        // Later: the arrival's round reads the queue `wake_read_s` after it.
        assert!((woken.round_length(3.0, 10.0, Some(12.5)) - 2.6).abs() < 1e-9);
        // Past the round's end, or none to come: the whole round.
        assert_eq!(woken.round_length(3.0, 10.0, Some(14.0)), 3.0);
        assert_eq!(woken.round_length(3.0, 10.0, None), 3.0);
        let bad = ClusterModel {
            wake_gap_s: -1.0,
            ..woken
        };
        assert!(bad.validate(3.0, 0.0).unwrap_err().contains("wake gap"));
    }

    #[test]
    fn overheads_add_up_and_never_exceed_a_round() {
        let m = ClusterModel {
            start_latency_s: 5.0,
            copy_startup_s: 7.0,
            ..ClusterModel::default()
        };
        assert_eq!(m.overhead_s(10.0, false, false, false, 60.0), 0.0);
        assert_eq!(m.overhead_s(10.0, true, true, false, 60.0), 15.0);
        assert_eq!(m.overhead_s(10.0, false, false, true, 60.0), 7.0);
        // A forked round's copies start anew anyway: moving them costs nothing more.
        assert_eq!(m.overhead_s(10.0, true, true, true, 60.0), 7.0);
        assert_eq!(m.overhead_s(100.0, true, true, false, 60.0), 60.0);
        let no_copies = ClusterModel {
            copy_startup_s: 0.0,
            ..m.clone()
        };
        assert_eq!(no_copies.overhead_s(10.0, true, true, true, 60.0), 15.0);
        assert!(m.validate(60.0, 10.0).is_ok());
        // Together over a round is fine (paid over several rounds); one alone is not.
        assert!(m.validate(15.0, 10.0).is_ok());
        assert!(m.validate(9.0, 10.0).unwrap_err().contains("restart cost"));
        assert!(m.validate(7.0, 0.0).unwrap_err().contains("copy start-up"));
        let bad = ClusterModel {
            start_latency_s: -1.0,
            ..m
        };
        assert!(
            bad.validate(60.0, 0.0)
                .unwrap_err()
                .contains("start latency")
        );
    }
}
