//! The tail plan: with a few jobs left, all of them urgent, who runs on which type.
//!
//! The makespan guard's fluid LP lets a 4-worker gang run on two free GPUs for twice as
//! long; a round cannot. In the middle of a run that error is small, since many jobs of
//! every size fill the GPUs between them. In the tail, where a few gangs are left and all
//! of them set the end, it is what the end slips by. Here every way the jobs left can run
//! together, each on one GPU type with all its workers (a configuration), is a variable,
//! the time it runs; the LP finds the least total time that does every job's work. Any
//! order of the configurations ends at the same time, and the round runs the one the LP
//! gives the most time, as Gavel's rounds follow its allocation's largest shares. Solved
//! again each round, so a round's overrun is made up in the next. Pure: no clock, no IO.

use crate::lp::LinearProgram;

/// The most configurations the tail plan enumerates before it gives the round back to the
/// usual passes: a bound on its cost on clusters with many GPU types.
pub const MAX_CONFIGURATIONS: usize = 20_000;

/// One job of the tail: its workers, its gang rate on each GPU type (0 where it cannot
/// run) and the steps it has left.
pub(super) struct TailJob<'a> {
    pub workers: u32,
    pub rates: &'a [f64],
    pub remaining_steps: f64,
}

/// The jobs to run this round, each as `(job index, GPU type)`: the configuration of the
/// LP's optimum with the most time. `None` when there are too many configurations, a job
/// can run in none, or the LP fails; the round then goes to the usual passes.
pub(super) fn choose(capacity: &[u32], jobs: &[TailJob<'_>]) -> Option<Vec<(usize, usize)>> {
    let configurations = maximal_configurations(capacity, jobs)?;
    let mut lp = LinearProgram::new();
    let time: Vec<_> = configurations.iter().map(|_| lp.add_nonneg()).collect();
    for (j, job) in jobs.iter().enumerate() {
        let progress: Vec<_> = configurations
            .iter()
            .zip(&time)
            .filter_map(|(c, &d)| {
                c.iter()
                    .find(|(k, _)| *k == j)
                    .map(|&(_, t)| (d, job.rates[t]))
            })
            .collect();
        if progress.is_empty() {
            return None;
        }
        lp.at_least(progress, job.remaining_steps.max(0.0));
    }
    lp.minimize(time.iter().map(|&d| (d, 1.0)));
    let solution = lp.solve().ok()?;
    let longest = time
        .iter()
        .enumerate()
        .max_by(|a, b| solution.value(*a.1).total_cmp(&solution.value(*b.1)))?
        .0;
    configurations.into_iter().nth(longest)
}

/// Every set of jobs that runs at once on whole types and leaves no GPUs another of the
/// jobs could use; `None` past [`MAX_CONFIGURATIONS`] configurations enumerated, maximal
/// or not.
fn maximal_configurations(
    capacity: &[u32],
    jobs: &[TailJob<'_>],
) -> Option<Vec<Vec<(usize, usize)>>> {
    let mut walk = Walk {
        jobs,
        left: capacity.to_vec(),
        current: Vec::new(),
        enumerated: 0,
        maximal: Vec::new(),
    };
    walk.from(0)?;
    Some(walk.maximal)
}

/// The enumeration's state: the GPUs `current` leaves, and what it has found.
struct Walk<'j, 'a> {
    jobs: &'j [TailJob<'a>],
    left: Vec<u32>,
    current: Vec<(usize, usize)>,
    enumerated: usize,
    maximal: Vec<Vec<(usize, usize)>>,
}

impl Walk<'_, '_> {
    /// Every configuration of jobs `j..` in the GPUs left after `current`.
    fn from(&mut self, j: usize) -> Option<()> {
        if j == self.jobs.len() {
            if self.enumerated >= MAX_CONFIGURATIONS {
                return None;
            }
            self.enumerated += 1;
            if !self.current.is_empty() && self.is_maximal() {
                self.maximal.push(self.current.clone());
            }
            return Some(());
        }
        self.from(j + 1)?;
        let workers = self.jobs[j].workers;
        for t in 0..self.left.len() {
            if self.jobs[j].rates[t] > 0.0 && self.left[t] >= workers {
                self.left[t] -= workers;
                self.current.push((j, t));
                let done = self.from(j + 1);
                self.current.pop();
                self.left[t] += workers;
                done?;
            }
        }
        Some(())
    }

    /// Whether no job outside `current` fits in the GPUs it leaves.
    fn is_maximal(&self) -> bool {
        !self.jobs.iter().enumerate().any(|(j, job)| {
            !self.current.iter().any(|(k, _)| *k == j)
                && (0..self.left.len()).any(|t| job.rates[t] > 0.0 && self.left[t] >= job.workers)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(workers: u32, rates: &[f64], remaining_steps: f64) -> TailJob<'_> {
        TailJob {
            workers,
            rates,
            remaining_steps,
        }
    }

    #[test]
    fn each_job_runs_where_the_whole_tail_ends_soonest() {
        // A gains twice as much from the fast type as B does: A on it, B on the slow one,
        // both done in 100 s, rather than the other way round (A alone would take 200 s).
        let (a, b) = ([2.0, 1.0], [1.0, 1.0]);
        let jobs = [job(4, &a, 200.0), job(4, &b, 100.0)];
        assert_eq!(choose(&[4, 4], &jobs), Some(vec![(0, 0), (1, 1)]));
    }

    #[test]
    fn gangs_that_cannot_share_a_round_take_turns_and_no_gpu_is_left_to_a_smaller_set() {
        // Four GPUs of one type: the 4-worker gang, or both 2-worker jobs; never one
        // 2-worker job alone, which would leave two GPUs idle.
        let r = [1.0];
        let jobs = [job(4, &r, 300.0), job(2, &r, 100.0), job(2, &r, 100.0)];
        let configurations = maximal_configurations(&[4], &jobs).unwrap();
        assert_eq!(configurations.len(), 2, "{configurations:?}");
        assert_eq!(choose(&[4], &jobs), Some(vec![(0, 0)]));
    }

    #[test]
    fn a_job_that_fits_nowhere_leaves_the_round_to_the_usual_passes() {
        let (r, none) = ([1.0], [0.0]);
        assert_eq!(choose(&[4], &[job(2, &r, 10.0), job(2, &none, 10.0)]), None);
        assert_eq!(choose(&[4], &[job(8, &r, 10.0)]), None);
    }

    #[test]
    fn too_many_configurations_give_the_round_back() {
        // Ten one-GPU jobs on ten types of ten GPUs: 11^10 configurations.
        let r = [1.0; 10];
        let jobs: Vec<_> = (0..10).map(|_| job(1, &r, 10.0)).collect();
        assert_eq!(maximal_configurations(&[10; 10], &jobs), None);
        assert_eq!(choose(&[10; 10], &jobs), None);
    }
}
