//! Slurm's reservations in the daemon's round: the adapter's reservations and each job's
//! `--reservation` turned into the core's rule ([`hadar_core::site::reservations`]) at the
//! round's time: which nodes each job is offered, and which jobs wait for a reservation.

use super::Site;
use hadar_core::passes::{JobPhase, TargetFacts};
use hadar_core::site::reservations::{Chosen, Nodes, Offer, Reservation, ResvJob, offer};
use hadar_core::{JobId, WaitReason};
use std::collections::HashMap;

/// The core's form of the adapter's reservations.
pub fn of(rs: &[hadar_slurm::reservation::Reservation]) -> Vec<Reservation> {
    rs.iter()
        .map(|r| Reservation {
            name: r.name.clone(),
            nodes: r.nodes.iter().cloned().collect(),
            start_s: r.start_unix as f64,
            end_s: r.end_unix.map(|e| e as f64),
            users: r.users.clone(),
            accounts: r.accounts.clone(),
            flex: r.flags.flex,
            any_nodes: r.flags.any_nodes,
            magnetic: r.flags.magnetic,
        })
        .collect()
}

/// Leaves the waiting jobs a reservation or their user's choice of nodes restricts (and
/// whose request names no types) out of the look-ahead's commitments, by dropping their
/// facts: the look-ahead does not know the restrictions and would hold such a job to a type
/// only a node it is not offered has (a job without facts is committed to nothing; see
/// [`hadar_core::passes::TargetFacts`]).
pub fn leave_out_of_lookahead(
    site: &Site,
    chosen: &HashMap<u64, Chosen>,
    target: &mut TargetFacts,
) {
    let waiting: Vec<u64> = target
        .jobs
        .iter()
        .filter(|(_, f)| f.phase == JobPhase::Waiting && !f.typed && f.held_types.is_none())
        .map(|(id, _)| id.0)
        .collect();
    let (offers, _) = site.offers(waiting, chosen);
    for (id, o) in offers {
        if o.nodes != Nodes::All {
            target.jobs.remove(&id);
        }
    }
}

impl Site {
    /// What the rule needs to know of job `id` (`None` for a job Slurm did not list).
    fn resv_job(&self, id: u64) -> Option<ResvJob> {
        let j = self.figures.jobs.get(&id)?;
        Some(ResvJob {
            user: j.user.clone(),
            account: j.account.clone(),
            reservation: j.reservation.clone(),
            time_limit_s: j.time_limit_s,
        })
    }

    /// The nodes each of `ids` is offered under the reservations at the round's time,
    /// narrowed to the nodes its user chose (`chosen`), and the jobs that wait for their
    /// reservation. Empty without reservations and choices.
    pub fn offers(
        &self,
        ids: impl IntoIterator<Item = u64>,
        chosen: &HashMap<u64, Chosen>,
    ) -> (HashMap<JobId, Offer>, Vec<(JobId, WaitReason)>) {
        let mut offers = HashMap::new();
        let mut waits = Vec::new();
        if self.reservations.is_empty() && chosen.is_empty() {
            return (offers, waits);
        }
        for id in ids {
            let reserved = match self.resv_job(id) {
                Some(job) if !self.reservations.is_empty() => {
                    Some(offer(&self.reservations, &job, self.now_unix))
                }
                _ => None,
            };
            let o = match (reserved, chosen.get(&id)) {
                (Some(Err(w)), _) => {
                    waits.push((JobId(id), w));
                    continue;
                }
                (Some(Ok(o)), Some(c)) => o.and_chosen(c),
                (Some(Ok(o)), None) => o,
                (None, Some(c)) => Offer::all().and_chosen(c),
                (None, None) => continue,
            };
            offers.insert(JobId(id), o);
        }
        (offers, waits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::reservation::{Reservation as SlurmResv, ReservationFlags};
    use hadar_slurm::site::{JobAccount, SiteFigures};

    #[test]
    fn jobs_are_offered_what_their_reservation_allows() {
        let mut f = SiteFigures::default();
        f.reservations.push(SlurmResv {
            name: "r".into(),
            nodes: vec!["n1".into()],
            start_unix: 1000,
            end_unix: Some(2000),
            users: vec!["alice".into()],
            accounts: vec![],
            flags: ReservationFlags::of(["MAINT"]),
        });
        let acct = |user: &str, resv: Option<&str>| JobAccount {
            user: user.into(),
            account: "a".into(),
            qos: "normal".into(),
            partition: "gpu".into(),
            time_limit_s: Some(60.0),
            reservation: resv.map(String::from),
            time_left_s: Some(60.0),
        };
        f.jobs.insert(1, acct("bob", None));
        f.jobs.insert(2, acct("alice", Some("r")));
        let site = Site::new(f.clone()).at(1500.0);
        let (offers, waits) = site.offers([1, 2, 3], &HashMap::new());
        assert_eq!(
            offers[&JobId(1)].nodes,
            Nodes::Except(["n1".to_string()].into())
        );
        assert_eq!(
            offers[&JobId(2)].nodes,
            Nodes::Only(["n1".to_string()].into())
        );
        assert!(waits.is_empty() && !offers.contains_key(&JobId(3)));
        // Before it starts, its job waits and the other job (60 s) is offered every node.
        let (offers, waits) = Site::new(f.clone())
            .at(500.0)
            .offers([1, 2], &HashMap::new());
        assert_eq!(offers[&JobId(1)].nodes, Nodes::All);
        assert_eq!(waits.len(), 1);
        assert!(
            waits[0]
                .1
                .to_string()
                .contains("reservation r: it is not active yet")
        );
        // A user's choice narrows the reservation's offer, stands alone for a job no
        // reservation concerns (3), and a job waiting for its reservation still waits (2).
        let exclude = |n: &str| Chosen {
            nodes: Nodes::Except([n.to_string()].into()),
            options: format!("--exclude={n}"),
        };
        let chosen = HashMap::from([(1, exclude("n2")), (2, exclude("n3")), (3, exclude("n4"))]);
        let (offers, waits) = Site::new(f.clone()).at(1500.0).offers([1, 2, 3], &chosen);
        assert_eq!(
            offers[&JobId(1)].nodes,
            Nodes::Except(["n1".to_string(), "n2".to_string()].into())
        );
        assert_eq!(
            offers[&JobId(3)].nodes,
            Nodes::Except(["n4".to_string()].into())
        );
        assert_eq!(offers[&JobId(3)].chosen.as_deref(), Some("--exclude=n4"));
        assert!(waits.is_empty());
        let (_, waits) = Site::new(f).at(500.0).offers([2], &chosen);
        assert_eq!(waits.len(), 1, "{waits:?}");
        // Without reservations, only the jobs that chose are offered anything.
        let (offers, _) = Site::default().offers([1, 5], &chosen);
        assert!(offers.contains_key(&JobId(1)) && !offers.contains_key(&JobId(5)));
    }
}
