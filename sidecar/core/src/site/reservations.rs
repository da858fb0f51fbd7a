//! Slurm's advance reservations as a rule on which nodes a job is offered, as the site's
//! Slurm would apply it to the same job without hadar:
//!
//! * While a reservation is active its nodes are offered only to jobs that asked for it
//!   (`--reservation`); a job that did not ask for it is also kept off its nodes before it
//!   starts when the job's time limit (unlimited: any) would reach into it, since Slurm
//!   would not start the job there either.
//! * A job that asked for a reservation is offered only that reservation's nodes (with
//!   `FLEX`, also the nodes no active reservation keeps; with `ANY_NODES`, any node no
//!   other active reservation keeps), and waits while the reservation is not active, not
//!   known, or not open to its user and account (`Users`, `Accounts`; both must match when
//!   both are set; a `-name` list means "everyone but").
//! * A running job keeps its nodes: Slurm does not stop a job for a reservation
//!   (`IGNORE_JOBS` creates one over running jobs).
//!
//! A job's user may also have chosen its nodes (`--exclude`, a `--constraint`):
//! [`Offer::and_chosen`] narrows its offer to them.
//!
//! [`offer`] is the rule for one job; [`plan_in_pools`] plans a round under it by planning
//! each group of jobs offered the same nodes on those nodes' GPUs, the most restricted
//! group first, each group on what the groups before it left. Pure: `now` is an input.

use crate::cluster::{Cluster, Node};
use crate::job::{JobId, JobState};
use crate::plan::{RoundPlan, WaitReason, Waiting};
use std::collections::{BTreeSet, HashMap};

/// One reservation, as the rule needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reservation {
    /// Its name.
    pub name: String,
    /// Its nodes.
    pub nodes: BTreeSet<String>,
    /// When it starts, seconds since 1970.
    pub start_s: f64,
    /// When it ends, seconds since 1970; `None`: never.
    pub end_s: Option<f64>,
    /// Users allowed (`alice`), or refused (`-alice`); empty: no user condition.
    pub users: Vec<String>,
    /// Accounts allowed or refused, in the same form.
    pub accounts: Vec<String>,
    /// `FLEX`: its jobs may also use nodes outside any active reservation.
    pub flex: bool,
    /// `ANY_NODES`: its jobs may use any node outside other active reservations.
    pub any_nodes: bool,
    /// `MAGNETIC`: jobs it allows may use it without asking for it.
    pub magnetic: bool,
}

/// Whether `name` passes a Slurm access list: empty passes; `-a,-b` passes all but those;
/// otherwise only the names listed pass.
fn passes(list: &[String], name: &str) -> bool {
    if list.is_empty() {
        return true;
    }
    if list.iter().all(|e| e.starts_with('-')) {
        return !list.iter().any(|e| &e[1..] == name);
    }
    list.iter().any(|e| e == name)
}

impl Reservation {
    /// Whether it is active at `now_s`.
    pub fn active(&self, now_s: f64) -> bool {
        self.start_s <= now_s && self.end_s.is_none_or(|e| now_s < e)
    }

    /// Whether a job that starts at `now_s` with `time_limit_s` (`None`: unlimited) would
    /// still be running when it starts.
    fn reached_by(&self, now_s: f64, time_limit_s: Option<f64>) -> bool {
        self.start_s > now_s && time_limit_s.is_none_or(|t| now_s + t > self.start_s)
    }

    /// Whether `user` in `account` may use it.
    pub fn allows(&self, user: &str, account: &str) -> bool {
        passes(&self.users, user) && passes(&self.accounts, account)
    }
}

/// What the rule needs to know of a job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResvJob {
    /// Its user.
    pub user: String,
    /// Its account.
    pub account: String,
    /// The reservation(s) it asked for (`--reservation=a,b`), if any.
    pub reservation: Option<String>,
    /// Its time limit in seconds; `None`: unlimited.
    pub time_limit_s: Option<f64>,
}

/// Which nodes a job is offered.
#[derive(Clone, Debug, PartialEq)]
pub enum Nodes {
    /// Every node.
    All,
    /// Only these.
    Only(BTreeSet<String>),
    /// Every node but these.
    Except(BTreeSet<String>),
}

impl Nodes {
    fn offers(&self, node: &str) -> bool {
        match self {
            Nodes::All => true,
            Nodes::Only(s) => s.contains(node),
            Nodes::Except(s) => !s.contains(node),
        }
    }

    /// The nodes both offer.
    pub fn and(&self, other: &Nodes) -> Nodes {
        match (self, other) {
            (Nodes::All, n) | (n, Nodes::All) => n.clone(),
            (Nodes::Only(a), Nodes::Only(b)) => Nodes::Only(a.intersection(b).cloned().collect()),
            (Nodes::Only(a), Nodes::Except(b)) | (Nodes::Except(b), Nodes::Only(a)) => {
                Nodes::Only(a.difference(b).cloned().collect())
            }
            (Nodes::Except(a), Nodes::Except(b)) => Nodes::Except(a.union(b).cloned().collect()),
        }
    }
}

/// The nodes a job may be placed on as the daemon reads them from Slurm: those its user
/// chose, narrowed to where Slurm could give it CPUs and memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Chosen {
    /// The nodes.
    pub nodes: Nodes,
    /// The options as the user wrote them, and what else narrows the nodes (free CPUs and
    /// memory), for its wait reason: `--exclude=n1,n4`.
    pub options: String,
}

/// The nodes one job is offered, and the reservation(s) that decided it.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    /// The nodes.
    pub nodes: Nodes,
    /// The reservations that restrict it, by name (empty when none does).
    pub because: String,
    /// The options by which the job's user chose its nodes, if they did ([`Chosen`]).
    pub chosen: Option<String>,
}

impl Offer {
    /// Every node, no reservation, no choice.
    pub fn all() -> Offer {
        Offer {
            nodes: Nodes::All,
            because: String::new(),
            chosen: None,
        }
    }

    /// The offer narrowed to the nodes the job's user chose.
    pub fn and_chosen(self, chosen: &Chosen) -> Offer {
        Offer {
            nodes: self.nodes.and(&chosen.nodes),
            because: self.because,
            chosen: Some(chosen.options.clone()),
        }
    }
}

fn names(rs: &[&Reservation]) -> String {
    rs.iter()
        .map(|r| r.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn node_list(s: &BTreeSet<String>) -> String {
    s.iter().map(String::as_str).collect::<Vec<_>>().join(",")
}

/// The nodes `job` is offered at `now_s` under `reservations`, or why it waits.
pub fn offer(reservations: &[Reservation], job: &ResvJob, now_s: f64) -> Result<Offer, WaitReason> {
    let Some(asked) = job.reservation.as_deref() else {
        let keep: Vec<&Reservation> = reservations
            .iter()
            .filter(|r| r.active(now_s) || r.reached_by(now_s, job.time_limit_s))
            .filter(|r| !(r.magnetic && r.allows(&job.user, &job.account)))
            .filter(|r| !r.nodes.is_empty())
            .collect();
        if keep.is_empty() {
            return Ok(Offer::all());
        }
        return Ok(Offer {
            nodes: Nodes::Except(keep.iter().flat_map(|r| r.nodes.iter().cloned()).collect()),
            because: names(&keep),
            chosen: None,
        });
    };
    let wait = |why: String| WaitReason::Reservation {
        name: asked.to_string(),
        why,
    };
    let named: Vec<&Reservation> = asked
        .split(',')
        .filter_map(|n| reservations.iter().find(|r| r.name == n.trim()))
        .collect();
    if named.is_empty() {
        return Err(wait("Slurm knows no reservation of that name".into()));
    }
    let open: Vec<&Reservation> = named
        .into_iter()
        .filter(|r| r.allows(&job.user, &job.account))
        .collect();
    if open.is_empty() {
        return Err(wait(format!(
            "user {} in account {} is not allowed in it",
            job.user, job.account
        )));
    }
    let Some(r) = open.iter().find(|r| r.active(now_s)) else {
        let next = open
            .iter()
            .filter(|r| r.start_s > now_s)
            .map(|r| r.start_s)
            .fold(f64::INFINITY, f64::min);
        return Err(wait(if next.is_finite() {
            format!(
                "it is not active yet (it starts at {next:.0} Unix, in {:.0} s); its jobs wait for it",
                next - now_s
            )
        } else {
            "it has ended".into()
        }));
    };
    let others: BTreeSet<String> = reservations
        .iter()
        .filter(|o| o.name != r.name && o.active(now_s))
        .flat_map(|o| o.nodes.iter().cloned())
        .filter(|n| !r.nodes.contains(n))
        .collect();
    let nodes = if r.any_nodes || r.flex {
        Nodes::Except(others)
    } else {
        Nodes::Only(r.nodes.clone())
    };
    Ok(Offer {
        nodes,
        because: r.name.clone(),
        chosen: None,
    })
}

/// Names the reservation, or the user's choice of nodes, as the reason a job restricted by
/// it waits for GPUs.
fn explain(reason: WaitReason, offer: &Offer) -> WaitReason {
    let capacity = matches!(
        reason,
        WaitReason::DoesNotFit
            | WaitReason::NoThroughputOnFreeTypes
            | WaitReason::WaitingForRelease
            | WaitReason::CannotRunAnywhere
            | WaitReason::TimeShare
    );
    if !capacity || offer.nodes == Nodes::All {
        return reason;
    }
    if offer.because.is_empty() {
        let Some(choice) = offer.chosen.clone() else {
            return reason;
        };
        let nodes = match &offer.nodes {
            Nodes::Only(n) if n.is_empty() => "no node".to_string(),
            Nodes::Only(n) => format!("only {}", node_list(n)),
            Nodes::Except(n) => format!("every node but {}", node_list(n)),
            Nodes::All => return reason,
        };
        return WaitReason::NodeChoice { choice, nodes };
    }
    let chosen = match &offer.chosen {
        Some(c) => format!(" (narrowed by its {c})"),
        None => String::new(),
    };
    let why = match &offer.nodes {
        Nodes::All => return reason,
        Nodes::Only(n) => format!(
            "only its nodes ({}){chosen} are offered to the job, and not enough GPUs it can use are free there",
            node_list(n)
        ),
        Nodes::Except(n) => format!(
            "its nodes ({}) are kept for its own jobs{chosen}, and not enough GPUs this job can use are free elsewhere",
            node_list(n)
        ),
    };
    WaitReason::Reservation {
        name: offer.because.clone(),
        why,
    }
}

/// Plans a round under the reservations: each job of `states` is offered the nodes of its
/// entry in `offers` (no entry: every node), and a job `running` in Slurm also the nodes
/// it runs on. A job not running whose placement (a look-ahead's tentative one) lies
/// partly on nodes it is not offered loses that placement.
///
/// `plan` first plans every job together on the whole cluster. Where that plan gives no
/// job a node it is not offered, and keeps in place every job running on a node a
/// reservation no longer offers it, it stands: an offer that does not bind (an `--exclude` of a node the
/// job would not have used) changes nothing. Otherwise the round is planned in groups of
/// jobs offered the same nodes ([`plan_groups`]). When every job is offered every node,
/// this is `plan` itself.
pub fn plan_in_pools(
    cluster: &Cluster,
    states: &[JobState],
    offers: &HashMap<JobId, Offer>,
    running: &BTreeSet<JobId>,
    mut plan: impl FnMut(&Cluster, &[JobState]) -> RoundPlan,
) -> RoundPlan {
    let masks: Vec<Option<Vec<bool>>> = states
        .iter()
        .map(|js| offered_nodes(cluster, js, offers, running))
        .collect();
    if masks.iter().all(Option::is_none) {
        return plan(cluster, states);
    }
    let states: Vec<JobState> = states
        .iter()
        .zip(&masks)
        .map(|(js, m)| match m {
            Some(m) => without_placement_outside(js, m),
            None => js.clone(),
        })
        .collect();
    let whole = plan(cluster, &states);
    let mask_of: HashMap<JobId, &Vec<bool>> = states
        .iter()
        .zip(&masks)
        .filter_map(|(js, m)| Some((js.id(), m.as_ref()?)))
        .collect();
    let outside = whole.assignments.iter().any(|a| {
        mask_of
            .get(&a.job)
            .is_some_and(|m| a.placement.nodes().iter().any(|id| !m[id.index()]))
    });
    // Slurm stops no job for a reservation: a job running on a node a reservation no longer
    // offers it (one made over running jobs) that the whole plan moves or stops sends the
    // round to the pools, where no group preempts another's running job. (A user's own
    // later exclusion of the node it runs on does not: hadar may move it, as ever.)
    let displaced = states.iter().any(|js| {
        let Some(now) = js.placement.as_ref().filter(|_| running.contains(&js.id())) else {
            return false;
        };
        let off_offer = offers.get(&js.id()).is_some_and(|o| {
            !o.because.is_empty()
                && now
                    .nodes()
                    .iter()
                    .any(|id| !o.nodes.offers(&cluster.node(*id).name))
        });
        off_offer
            && whole
                .assignments
                .iter()
                .find(|a| a.job == js.id())
                .is_none_or(|a| a.placement != *now)
    });
    if !outside && !displaced {
        return explained(whole, offers);
    }
    let masks = masks
        .into_iter()
        .map(|m| m.unwrap_or_else(|| vec![true; cluster.nodes().len()]))
        .collect();
    plan_groups(cluster, &states, masks, offers, &mut plan)
}

/// Which nodes of `cluster` job `js` may be placed on: those its offer names, and those it
/// runs on when it is `running`; `None` when that is every node.
fn offered_nodes(
    cluster: &Cluster,
    js: &JobState,
    offers: &HashMap<JobId, Offer>,
    running: &BTreeSet<JobId>,
) -> Option<Vec<bool>> {
    let offer = offers.get(&js.id()).filter(|o| o.nodes != Nodes::All)?;
    let runs_on = match running.contains(&js.id()) {
        true => js.placement.as_ref().map(|p| p.nodes()).unwrap_or_default(),
        false => Vec::new(),
    };
    let mask: Vec<bool> = cluster
        .node_ids()
        .map(|id| runs_on.contains(&id) || offer.nodes.offers(&cluster.node(id).name))
        .collect();
    (!mask.iter().all(|b| *b)).then_some(mask)
}

/// `js` without its placement when that lies partly outside `mask`.
fn without_placement_outside(js: &JobState, mask: &[bool]) -> JobState {
    let mut js = js.clone();
    if js
        .placement
        .as_ref()
        .is_some_and(|p| p.nodes().iter().any(|id| !mask[id.index()]))
    {
        js.placement = None;
    }
    js
}

/// `plan` with each restricted job's wait reason naming its reservation or node choice.
fn explained(mut plan: RoundPlan, offers: &HashMap<JobId, Offer>) -> RoundPlan {
    plan.waiting = plan
        .waiting
        .into_iter()
        .map(|w| match offers.get(&w.job) {
            Some(o) => Waiting {
                job: w.job,
                reason: explain(w.reason, o),
            },
            None => w,
        })
        .collect();
    plan
}

/// Plans `states` (each offered the nodes of its mask in `masks`) in groups of jobs offered
/// the same nodes, by `plan` on a cluster with only those nodes' GPUs, the group offered
/// the fewest nodes first, each group on the GPUs that the groups before it
/// were given and that jobs of later groups hold left over (so no group preempts another's
/// running job).
fn plan_groups(
    cluster: &Cluster,
    states: &[JobState],
    masks: Vec<Vec<bool>>,
    offers: &HashMap<JobId, Offer>,
    plan: &mut impl FnMut(&Cluster, &[JobState]) -> RoundPlan,
) -> RoundPlan {
    let mut groups: Vec<(Vec<bool>, Vec<JobState>)> = Vec::new();
    for (m, js) in masks.into_iter().zip(states) {
        match groups.iter_mut().find(|(g, _)| *g == m) {
            Some((_, jobs)) => jobs.push(js.clone()),
            None => groups.push((m, vec![js.clone()])),
        }
    }
    groups.sort_by_key(|(m, _)| m.iter().filter(|b| **b).count());
    let types = cluster.type_count();
    let n = cluster.nodes().len();
    let mut used = vec![vec![0u32; types]; n];
    let mut out = RoundPlan::default();
    for (g, (m, jobs)) in groups.iter().enumerate() {
        let mut held = vec![vec![0u32; types]; n];
        for p in groups[g + 1..]
            .iter()
            .flat_map(|(_, js)| js.iter().filter_map(|j| j.placement.as_ref()))
        {
            for part in p.parts() {
                held[part.node.index()][part.gpu_type.index()] += part.gpus;
            }
        }
        let nodes: Vec<Node> = cluster
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, node)| Node {
                name: node.name.clone(),
                gpus: (0..types)
                    .map(|t| match m[i] {
                        true => node.gpus[t].saturating_sub(used[i][t] + held[i][t]),
                        false => 0,
                    })
                    .collect(),
            })
            .collect();
        let p = match Cluster::new(cluster.type_names().to_vec(), nodes) {
            Ok(sub) => plan(&sub, jobs),
            Err(_) => RoundPlan {
                assignments: Vec::new(),
                waiting: jobs
                    .iter()
                    .map(|j| Waiting {
                        job: j.id(),
                        reason: WaitReason::DoesNotFit,
                    })
                    .collect(),
            },
        };
        for a in &p.assignments {
            for part in a.placement.parts() {
                used[part.node.index()][part.gpu_type.index()] += part.gpus;
            }
        }
        let p = explained(p, offers);
        out.assignments.extend(p.assignments);
        out.waiting.extend(p.waiting);
    }
    out
}

#[cfg(test)]
mod tests;
