//! Bounded state: history past a horizon is deleted so that the database stops growing.
//!
//! What grows with time is history: one `rounds` row per round, one `intents` row per
//! action, and every job that ever ran (its row, decision, learned rates and, when forked,
//! its tracker and rounds). [`Store::prune`] deletes what lies past the horizon and keeps
//! everything a live job may still need: open intents (a restarted daemon reads them), the
//! last intent of every unfinished job (the daemon reads it to tell its own release from
//! its owner's), the last round (`hadar status`) and its kept snapshot, and every record of a job that has not
//! finished, forked ones included. After a prune that deleted rows the WAL is checkpointed
//! and truncated, so freed pages are reused and the files stay the same size.

use crate::{Store, StoreError};
use rusqlite::params;

/// What is old enough to delete.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Horizon {
    /// History that started before this time (seconds since the store's epoch) is deleted.
    pub before_s: f64,
    /// Rounds numbered up to this one (and intents written in them) are deleted.
    pub through_round: u64,
    /// Kept rounds' snapshots numbered up to this one are deleted too (they are larger than
    /// the rounds' summaries, so a site may keep fewer of them).
    pub snapshots_through_round: u64,
}

/// Rows one prune deleted, by table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Round summaries.
    pub rounds: usize,
    /// Closed intents.
    pub intents: usize,
    /// Finished jobs (with their decisions, learned rates and fork records).
    pub jobs: usize,
    /// Kept rounds' snapshots (`hadar replay`), pruned as the round summaries are.
    pub snapshots: usize,
}

impl Pruned {
    /// Rows deleted in all.
    pub fn total(&self) -> usize {
        self.rounds + self.intents + self.jobs + self.snapshots
    }
}

/// Finished jobs past the horizon that no open intent names.
const OLD_FINISHED: &str = "SELECT id FROM jobs WHERE phase = 'finished'
    AND json_extract(data, '$.finished_s') < ?1
    AND id NOT IN (SELECT job FROM intents WHERE done_s IS NULL)";

impl Store {
    /// Deletes the history past `horizon` (see the module documentation for what is kept),
    /// in one transaction, then checkpoints the WAL if anything was deleted.
    pub fn prune(&mut self, horizon: Horizon) -> Result<Pruned, StoreError> {
        let before_s = horizon.before_s;
        let through = i64::try_from(horizon.through_round).unwrap_or(i64::MAX);
        let snapshots_through = i64::try_from(horizon.snapshots_through_round)
            .unwrap_or(i64::MAX)
            .max(through);
        let pruned = self.write(|w| {
            let tx = &w.tx;
            let mut p = Pruned::default();
            for table in ["decisions", "learned_rates", "fork_rounds", "fork_jobs"] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE job IN ({OLD_FINISHED})"),
                    params![before_s],
                )
                .map_err(w.err())?;
            }
            tx.execute(
                &format!(
                    "DELETE FROM intents WHERE done_s IS NOT NULL AND job IN ({OLD_FINISHED})"
                ),
                params![before_s],
            )
            .map_err(w.err())?;
            p.jobs = tx
                .execute(
                    &format!("DELETE FROM jobs WHERE id IN ({OLD_FINISHED})"),
                    params![before_s],
                )
                .map_err(w.err())?;
            p.rounds = tx
                .execute(
                    "DELETE FROM rounds WHERE round < (SELECT MAX(round) FROM rounds)
                     AND (round <= ?2 OR json_extract(data, '$.started_s') < ?1)",
                    params![before_s, through],
                )
                .map_err(w.err())?;
            p.snapshots = tx
                .execute(
                    "DELETE FROM round_snapshots
                     WHERE round < (SELECT MAX(round) FROM round_snapshots)
                     AND (round <= ?2 OR started_s < ?1)",
                    params![before_s, snapshots_through],
                )
                .map_err(w.err())?;
            tx.execute(
                "DELETE FROM round_inputs WHERE digest NOT IN (SELECT inputs FROM round_snapshots)",
                [],
            )
            .map_err(w.err())?;
            p.intents = tx
                .execute(
                    "DELETE FROM intents WHERE done_s IS NOT NULL
                     AND (round <= ?2 OR created_s < ?1)
                     AND id NOT IN (SELECT MAX(i.id) FROM intents i JOIN jobs j ON j.id = i.job
                                    WHERE j.phase != 'finished' GROUP BY i.job)",
                    params![before_s, through],
                )
                .map_err(w.err())?;
            Ok(p)
        })?;
        if pruned.total() > 0 {
            self.checkpoint()?;
        }
        Ok(pruned)
    }

    /// Copies the WAL into the database and truncates it (a no-op for an in-memory store).
    fn checkpoint(&self) -> Result<(), StoreError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(self.err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Decision, JobRow, Phase, RoundRow};

    fn job(id: u64, finished_s: Option<f64>) -> JobRow {
        let mut j = JobRow::new(id, format!("j{id}"), "hadar:v1".into(), 1, 10.0, 0.0);
        if let Some(t) = finished_s {
            j.phase = Phase::Finished;
            j.finished_s = Some(t);
        }
        j
    }

    #[test]
    fn history_past_the_horizon_goes_and_what_live_jobs_need_stays() {
        let mut s = Store::in_memory().unwrap();
        s.write(|w| {
            // 1: finished long ago; 2: finished long ago but an intent about it is open;
            // 3: finished recently; 4: still waiting, with old closed intents.
            for (id, fin) in [(1, Some(5.0)), (2, Some(5.0)), (3, Some(95.0)), (4, None)] {
                w.put_job(&job(id, fin))?;
                w.learn_rate(id, "v100", 1, 1.0, 0.5)?;
            }
            for r in 1..=10u64 {
                let round = RoundRow {
                    round: r,
                    started_s: r as f64 * 10.0,
                    ..Default::default()
                };
                w.put_round(&round, &[Decision::new(1, r), Decision::new(4, r)])?;
            }
            let a = w.add_intent(1, 1, crate::IntentKind::Start, None, 10.0)?;
            w.close_intent(a, 10.0, &crate::Outcome::Ok)?;
            w.add_intent(1, 2, crate::IntentKind::Hold, None, 10.0)?;
            let b = w.add_intent(2, 4, crate::IntentKind::Hold, None, 20.0)?;
            w.close_intent(b, 20.0, &crate::Outcome::Ok)?;
            let c = w.add_intent(3, 4, crate::IntentKind::Start, None, 30.0)?;
            w.close_intent(c, 30.0, &crate::Outcome::Ok)
        })
        .unwrap();
        let p = s
            .prune(Horizon {
                before_s: 50.0,
                through_round: 7,
                snapshots_through_round: 0,
            })
            .unwrap();
        let ids: Vec<u64> = s.jobs().unwrap().iter().map(|j| j.id).collect();
        assert_eq!(
            ids,
            vec![2, 3, 4],
            "only the old finished job with no open intent goes"
        );
        assert!(s.decision(1).unwrap().is_none() && s.decision(4).unwrap().is_some());
        assert!(s.learned_rates(1).unwrap().is_empty());
        assert_eq!(s.learned_rates(4).unwrap().len(), 1);
        let rounds: i64 = s
            .conn
            .query_row("SELECT count(*) FROM rounds", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rounds, 3, "rounds 8 to 10 are within the horizon");
        let left: Vec<(u64, crate::IntentKind)> = s
            .all_intents()
            .unwrap()
            .into_iter()
            .map(|i| (i.job, i.action))
            .collect();
        assert_eq!(
            left,
            vec![(2, crate::IntentKind::Hold), (4, crate::IntentKind::Start)],
            "the open intent and job 4's last intent stay"
        );
        assert_eq!(
            p,
            Pruned {
                rounds: 7,
                intents: 1,
                jobs: 1,
                snapshots: 0
            }
        );
        let again = s
            .prune(Horizon {
                before_s: 1e9,
                through_round: 100,
                snapshots_through_round: 0,
            })
            .unwrap();
        assert_eq!(
            s.last_round().unwrap().unwrap().round,
            10,
            "the last round stays"
        );
        assert_eq!(again.jobs, 1, "job 3 has finished long enough ago now");
    }
}
