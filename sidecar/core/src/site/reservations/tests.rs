use super::*;
use crate::job::Job;
use crate::placement::{Part, Placement};
use crate::policies::hadar::{HadarConfig, plan_round};
use crate::throughput::{RateCurve, ThroughputProfile};
use crate::{GpuType, NodeId, RoundInput};
use std::sync::Arc;

fn resv(name: &str, nodes: &[&str], start_s: f64, end_s: f64) -> Reservation {
    Reservation {
        name: name.into(),
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        start_s,
        end_s: Some(end_s),
        users: vec!["alice".into()],
        ..Default::default()
    }
}

fn rj(user: &str, reservation: Option<&str>, limit: Option<f64>) -> ResvJob {
    ResvJob {
        user: user.into(),
        account: "acct".into(),
        reservation: reservation.map(String::from),
        time_limit_s: limit,
    }
}

fn set(nodes: &[&str]) -> BTreeSet<String> {
    nodes.iter().map(|n| n.to_string()).collect()
}

#[test]
fn access_lists_follow_slurm() {
    let mut r = resv("r", &["n1"], 0.0, 10.0);
    assert!(r.allows("alice", "any") && !r.allows("bob", "any"));
    r.users = vec!["-bob".into()];
    assert!(r.allows("alice", "x") && !r.allows("bob", "x"));
    r.accounts = vec!["phys".into()];
    assert!(r.allows("alice", "phys") && !r.allows("alice", "chem"));
    assert!(r.active(0.0) && r.active(9.9) && !r.active(10.0) && !r.active(-1.0));
}

#[test]
fn other_jobs_are_kept_off_active_and_imminent_reservations() {
    let rs = [resv("r", &["n1"], 100.0, 200.0)];
    // Before it starts: a job that ends before it is offered every node ...
    assert_eq!(
        offer(&rs, &rj("bob", None, Some(50.0)), 0.0).unwrap().nodes,
        Nodes::All
    );
    // ... one that would run into it, or has no limit, is not offered its nodes.
    let long = offer(&rs, &rj("bob", None, Some(150.0)), 0.0).unwrap();
    assert_eq!(long.nodes, Nodes::Except(set(&["n1"])));
    assert_eq!(long.because, "r");
    assert_eq!(
        offer(&rs, &rj("bob", None, None), 0.0).unwrap().nodes,
        Nodes::Except(set(&["n1"]))
    );
    // While active, even the reservation's own users must ask for it.
    assert_eq!(
        offer(&rs, &rj("alice", None, Some(1.0)), 150.0)
            .unwrap()
            .nodes,
        Nodes::Except(set(&["n1"]))
    );
    // After it: every node.
    assert_eq!(
        offer(&rs, &rj("bob", None, None), 200.0).unwrap().nodes,
        Nodes::All
    );
    // A magnetic reservation takes its users' jobs without being asked.
    let mut m = rs.clone();
    m[0].magnetic = true;
    assert_eq!(
        offer(&m, &rj("alice", None, None), 150.0).unwrap().nodes,
        Nodes::All
    );
    assert_eq!(
        offer(&m, &rj("bob", None, None), 150.0).unwrap().nodes,
        Nodes::Except(set(&["n1"]))
    );
}

#[test]
fn reservation_jobs_get_only_its_nodes_and_wait_for_it() {
    let rs = [
        resv("r", &["n1"], 100.0, 200.0),
        resv("q", &["n2"], 0.0, 1000.0),
    ];
    let only = offer(&rs, &rj("alice", Some("r"), None), 150.0).unwrap();
    assert_eq!(only.nodes, Nodes::Only(set(&["n1"])));
    let early = offer(&rs, &rj("alice", Some("r"), None), 40.0).unwrap_err();
    assert!(
        early
            .to_string()
            .contains("reservation r: it is not active yet"),
        "{early}"
    );
    assert!(early.to_string().contains("in 60 s"), "{early}");
    let ended = offer(&rs, &rj("alice", Some("r"), None), 300.0).unwrap_err();
    assert!(ended.to_string().contains("ended"), "{ended}");
    let not_theirs = offer(&rs, &rj("bob", Some("r"), None), 150.0).unwrap_err();
    assert!(
        not_theirs
            .to_string()
            .contains("user bob in account acct is not allowed")
    );
    assert!(offer(&rs, &rj("alice", Some("nope"), None), 150.0).is_err());
    // A list: the first active one open to the job.
    let listed = offer(&rs, &rj("alice", Some("r,q"), None), 40.0).unwrap();
    assert_eq!(listed.nodes, Nodes::Only(set(&["n2"])));
    // FLEX: also the nodes no other active reservation keeps.
    let mut flex = rs.clone();
    flex[0].flex = true;
    let f = offer(&flex, &rj("alice", Some("r"), None), 150.0).unwrap();
    assert_eq!(f.nodes, Nodes::Except(set(&["n2"])));
}

fn cluster() -> Cluster {
    let node = |name: &str| Node {
        name: name.into(),
        gpus: vec![2],
    };
    Cluster::new(vec!["v100".into()], vec![node("n1"), node("n2")]).unwrap()
}

fn job(id: u64, workers: u32) -> JobState {
    let job = Job {
        restart_s: None,
        id: JobId(id),
        kind: "t".into(),
        arrival_s: id as f64,
        workers,
        total_steps: 1000.0,
        weight: 1.0,
        throughput: ThroughputProfile::new(vec![RateCurve::new([(workers, 10.0)])]),
    };
    JobState::arrived(Arc::new(job), 1)
}

fn plan(cluster: &Cluster, jobs: &[JobState], offers: &HashMap<JobId, Offer>) -> RoundPlan {
    let running: BTreeSet<JobId> = jobs
        .iter()
        .filter(|j| j.placement.is_some())
        .map(|j| j.id())
        .collect();
    let p = plan_in_pools(cluster, jobs, offers, &running, |c, js| {
        let input = RoundInput {
            now_s: 0.0,
            round_s: 60.0,
            restart_s: 0.0,
            cluster: c,
            jobs: js,
        };
        plan_round(&HadarConfig::default(), &input).0
    });
    p.validate(cluster, jobs).unwrap();
    p
}

fn nodes_of(p: &RoundPlan, id: u64) -> Option<Vec<NodeId>> {
    p.assignments
        .iter()
        .find(|a| a.job == JobId(id))
        .map(|a| a.placement.nodes())
}

#[test]
fn reserved_nodes_go_only_to_the_reservations_jobs() {
    let c = cluster();
    let rs = [resv("r", &["n1"], 0.0, 1000.0)];
    let jobs = vec![job(1, 2), job(2, 2), job(3, 1)];
    let resv_of = |id: u64| match id {
        3 => rj("alice", Some("r"), None),
        _ => rj("bob", None, None),
    };
    let offers: HashMap<JobId, Offer> = jobs
        .iter()
        .map(|j| (j.id(), offer(&rs, &resv_of(j.id().0), 10.0).unwrap()))
        .collect();
    let p = plan(&c, &jobs, &offers);
    assert_eq!(nodes_of(&p, 3), Some(vec![NodeId(0)]));
    let general: Vec<u64> = [1, 2]
        .into_iter()
        .filter(|id| nodes_of(&p, *id).is_some())
        .collect();
    assert_eq!(general.len(), 1, "{p:?}");
    assert_eq!(nodes_of(&p, general[0]), Some(vec![NodeId(1)]));
    let waits = p
        .waiting
        .iter()
        .find(|w| w.job.0 != general[0] && w.job.0 != 3)
        .unwrap();
    let words = waits.reason.to_string();
    assert!(
        words.starts_with("reservation r: its nodes (n1) are kept"),
        "{words}"
    );
    // Without the reservation both 2-GPU jobs run.
    let free = plan(&c, &jobs[..2], &HashMap::new());
    assert_eq!(free.assignments.len(), 2);
}

/// Job 1 running on `gpus` of n1.
fn running_on_n1(gpus: u32) -> JobState {
    let mut running = job(1, gpus);
    running.placement = Some(Placement::gang([Part {
        node: NodeId(0),
        gpu_type: GpuType(0),
        gpus,
    }]));
    running
}

/// The offers under reservation `r` on n1 (alice's) of job 1 (bob's, no reservation) and
/// job 2 (alice's, in `r`).
fn bob_runs_alice_reserved() -> HashMap<JobId, Offer> {
    let rs = [resv("r", &["n1"], 0.0, 1000.0)];
    HashMap::from([
        (JobId(1), offer(&rs, &rj("bob", None, None), 10.0).unwrap()),
        (
            JobId(2),
            offer(&rs, &rj("alice", Some("r"), None), 10.0).unwrap(),
        ),
    ])
}

#[test]
fn a_running_job_keeps_its_nodes_and_no_group_preempts_another() {
    let c = cluster();
    // Job 1 (no reservation) runs on n1, reserved since (IGNORE_JOBS).
    let jobs = vec![running_on_n1(1), job(2, 2)];
    let offers = bob_runs_alice_reserved();
    let p = plan(&c, &jobs, &offers);
    assert_eq!(nodes_of(&p, 1), Some(vec![NodeId(0)]));
    // The reservation's job needs both of n1's GPUs: it waits, naming the reservation.
    let w = p
        .waiting
        .iter()
        .find(|w| w.job == JobId(2))
        .expect("job 2 waits");
    assert!(
        w.reason
            .to_string()
            .contains("reservation r: only its nodes (n1)"),
        "{}",
        w.reason
    );
}

#[test]
fn a_tentative_placement_on_a_reserved_node_is_dropped() {
    let c = cluster();
    let rs = [resv("r", &["n1"], 0.0, 1000.0)];
    // A look-ahead put waiting job 1 on n1; it is not running, so it moves to n2.
    let mut tentative = job(1, 1);
    tentative.placement = Some(Placement::gang([Part {
        node: NodeId(0),
        gpu_type: GpuType(0),
        gpus: 1,
    }]));
    let jobs = vec![tentative];
    let offers = HashMap::from([(JobId(1), offer(&rs, &rj("bob", None, None), 10.0).unwrap())]);
    let p = plan_in_pools(&c, &jobs, &offers, &BTreeSet::new(), |c, js| {
        let input = RoundInput {
            now_s: 0.0,
            round_s: 60.0,
            restart_s: 0.0,
            cluster: c,
            jobs: js,
        };
        plan_round(&HadarConfig::default(), &input).0
    });
    assert_eq!(nodes_of(&p, 1), Some(vec![NodeId(1)]));
}

#[test]
fn node_offers_combine_as_sets() {
    let (a, b) = (set(&["n1", "n2"]), set(&["n2", "n3"]));
    let only = |s: &BTreeSet<String>| Nodes::Only(s.clone());
    let except = |s: &BTreeSet<String>| Nodes::Except(s.clone());
    assert_eq!(Nodes::All.and(&only(&a)), only(&a));
    assert_eq!(except(&a).and(&Nodes::All), except(&a));
    assert_eq!(only(&a).and(&only(&b)), Nodes::Only(set(&["n2"])));
    assert_eq!(only(&a).and(&except(&b)), Nodes::Only(set(&["n1"])));
    assert_eq!(except(&b).and(&only(&a)), Nodes::Only(set(&["n1"])));
    assert_eq!(
        except(&a).and(&except(&b)),
        Nodes::Except(set(&["n1", "n2", "n3"]))
    );
}

#[test]
fn a_job_runs_only_on_the_nodes_its_user_chose_and_says_so_when_it_waits() {
    let c = cluster();
    let exclude = |nodes: &[&str], options: &str| Chosen {
        nodes: Nodes::Except(set(nodes)),
        options: options.into(),
    };
    // Job 1 excludes n1: it runs on n2, and job 2 (no choice) gets n1.
    let jobs = vec![job(1, 2), job(2, 2)];
    let offers = HashMap::from([(
        JobId(1),
        Offer::all().and_chosen(&exclude(&["n1"], "--exclude=n1")),
    )]);
    let p = plan(&c, &jobs, &offers);
    assert_eq!(nodes_of(&p, 1), Some(vec![NodeId(1)]));
    assert_eq!(nodes_of(&p, 2), Some(vec![NodeId(0)]));
    // Excluding both nodes, it waits, and its reason names the choice.
    let offers = HashMap::from([(
        JobId(1),
        Offer::all().and_chosen(&exclude(&["n1", "n2"], "--exclude=n[1-2]")),
    )]);
    let p = plan(&c, &jobs[..1], &offers);
    assert_eq!(nodes_of(&p, 1), None);
    assert_eq!(
        p.waiting[0].reason.to_string(),
        "its --exclude=n[1-2] allows every node but n1,n2, where not enough GPUs it can use are free"
    );
    // Within a reservation, the choice narrows the reservation's nodes.
    let rs = [resv("r", &["n1", "n2"], 0.0, 1000.0)];
    let in_r = offer(&rs, &rj("alice", Some("r"), None), 10.0).unwrap();
    let narrowed = in_r.and_chosen(&exclude(&["n2"], "--exclude=n2"));
    assert_eq!(narrowed.nodes, Nodes::Only(set(&["n1"])));
    let p = plan(&c, &jobs[..1], &HashMap::from([(JobId(1), narrowed)]));
    assert_eq!(nodes_of(&p, 1), Some(vec![NodeId(0)]));
}

#[test]
fn an_offer_that_does_not_bind_leaves_the_plan_as_it_was() {
    let c = cluster();
    let jobs = vec![job(1, 1), job(2, 2), job(3, 1)];
    let free = plan(&c, &jobs, &HashMap::new());
    // Job 1 excludes the node it is placed on without offers: the offer binds, and the
    // round is planned in pools (job 1 first, on the other node).
    let on = nodes_of(&free, 1).expect("job 1 runs")[0];
    let name = |id: NodeId| c.node(id).name.clone();
    let other = NodeId(1 - on.0);
    let excluding = |node: NodeId| {
        HashMap::from([(
            JobId(1),
            Offer::all().and_chosen(&Chosen {
                nodes: Nodes::Except(BTreeSet::from([name(node)])),
                options: format!("--exclude={}", name(node)),
            }),
        )])
    };
    let bound = plan(&c, &jobs, &excluding(on));
    assert_eq!(nodes_of(&bound, 1), Some(vec![other]));
    // Excluding the other node changes nothing: the plan is the one without offers.
    assert_eq!(plan(&c, &jobs, &excluding(other)), free);
}

/// A planner that ignores where jobs run: each job, highest id first, on the first node
/// with room (GPU type 0).
fn first_fit(c: &Cluster, js: &[JobState]) -> RoundPlan {
    let mut free: Vec<u32> = c.nodes().iter().map(|n| n.gpus[0]).collect();
    let mut jobs: Vec<&JobState> = js.iter().collect();
    jobs.sort_by_key(|j| std::cmp::Reverse(j.id()));
    let mut out = RoundPlan::default();
    for j in jobs {
        let Some(i) = free.iter().position(|f| *f >= j.job.workers) else {
            continue;
        };
        free[i] -= j.job.workers;
        out.assignments.push(crate::plan::Assignment {
            job: j.id(),
            placement: Placement::gang([Part {
                node: NodeId(i as u32),
                gpu_type: GpuType(0),
                gpus: j.job.workers,
            }]),
            rate: 10.0,
            payoff: None,
        });
    }
    out
}

#[test]
fn a_whole_plan_that_moves_a_job_off_a_reservation_made_over_it_is_not_kept() {
    let c = cluster();
    // Job 1 (bob) runs on all of n1, reserved since for alice (IGNORE_JOBS); job 2 is hers.
    let jobs = vec![running_on_n1(2), job(2, 2)];
    let offers = bob_runs_alice_reserved();
    // Planned together, job 2 would take n1 and job 1 would move to n2; Slurm stops no job
    // for a reservation, so the pools plan it: job 1 stays, job 2 waits for n1.
    assert_eq!(nodes_of(&first_fit(&c, &jobs), 1), Some(vec![NodeId(1)]));
    let p = plan_in_pools(&c, &jobs, &offers, &BTreeSet::from([JobId(1)]), first_fit);
    assert_eq!(nodes_of(&p, 1), Some(vec![NodeId(0)]), "{p:?}");
    assert_eq!(nodes_of(&p, 2), None, "{p:?}");
}
