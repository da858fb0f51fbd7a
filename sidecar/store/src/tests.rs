use super::*;

fn job(id: u64) -> JobRow {
    JobRow::new(
        id,
        format!("j{id}"),
        "hadar:v1 gpus=2".into(),
        2,
        100.0,
        1.5,
    )
}

#[test]
fn jobs_round_trip_and_update_in_place() {
    let mut s = Store::in_memory().unwrap();
    s.write(|w| {
        w.put_job(&job(7))?;
        w.put_job(&job(3))
    })
    .unwrap();
    let mut j = s.job(7).unwrap().unwrap();
    assert_eq!(j, job(7));
    j.phase = Phase::Running;
    j.placement = Some(vec![("n1".into(), vec![("v100".into(), 2)])]);
    j.run_s_by_type.insert("v100".into(), 12.0);
    s.write(|w| w.put_job(&j)).unwrap();
    let all = s.jobs().unwrap();
    assert_eq!(all.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3, 7]);
    assert_eq!(all[1], j);
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    let mut s = Store::in_memory().unwrap();
    let r: Result<(), StoreError> = s.write(|w| {
        w.put_job(&job(1))?;
        w.add_intent(1, 1, crate::IntentKind::Start, None, 0.0)?;
        Err(StoreError::Version {
            path: "x".into(),
            found: 0,
            expected: 1,
        })
    });
    assert!(r.is_err());
    assert!(s.jobs().unwrap().is_empty());
    assert!(s.all_intents().unwrap().is_empty());
}

#[test]
fn learned_rates_are_an_ewma() {
    let mut s = Store::in_memory().unwrap();
    let r1 = s.write(|w| w.learn_rate(5, "v100", 2, 10.0, 0.5)).unwrap();
    let r2 = s.write(|w| w.learn_rate(5, "v100", 2, 20.0, 0.5)).unwrap();
    assert_eq!((r1, r2), (10.0, 15.0));
    let rates = s.learned_rates(5).unwrap();
    assert_eq!(rates.len(), 1);
    assert_eq!((rates[0].rate, rates[0].samples), (15.0, 2));
    assert!(s.learned_rates(6).unwrap().is_empty());
}

#[test]
fn intents_open_until_closed() {
    let mut s = Store::in_memory().unwrap();
    let p: NodeGpus = vec![("n4".into(), vec![("v100".into(), 2), ("k80".into(), 2)])];
    let id = s
        .write(|w| w.add_intent(3, 9, crate::IntentKind::Start, Some(&p), 10.0))
        .unwrap();
    let open = s.open_intents().unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].placement.as_ref(), Some(&p));
    s.write(|w| w.close_intent(id, 11.0, &crate::Outcome::Ok))
        .unwrap();
    assert!(s.open_intents().unwrap().is_empty());
    assert_eq!(
        s.all_intents().unwrap()[0].outcome,
        Some(crate::Outcome::Ok)
    );
}

#[test]
fn rounds_and_decisions_keep_the_latest() {
    let mut s = Store::in_memory().unwrap();
    assert!(s.last_round().unwrap().is_none());
    for round in 1..=2 {
        let r = RoundRow {
            round,
            policy: "hadar".into(),
            decision_ms: round as f64,
            ..Default::default()
        };
        let d = Decision {
            job: 4,
            round,
            runs: round == 2,
            placement: None,
            rate: None,
            payoff: None,
            wait_reason: None,
            text: format!("round {round}"),
        };
        s.write(|w| w.put_round(&r, &[d])).unwrap();
    }
    assert_eq!(s.last_round().unwrap().unwrap().round, 2);
    let d = s.decision(4).unwrap().unwrap();
    assert_eq!((d.round, d.runs, d.text.as_str()), (2, true, "round 2"));
}

#[test]
fn file_database_uses_wal_persists_and_checks_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let mut s = Store::open(&path).unwrap();
        assert_eq!(s.epoch(1000.0).unwrap(), 1000.0);
        s.write(|w| w.put_job(&job(1))).unwrap();
        let mode: String = s
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
    let mut s = Store::open(&path).unwrap();
    assert_eq!(
        s.epoch(2000.0).unwrap(),
        1000.0,
        "the epoch is fixed once set"
    );
    assert_eq!(s.jobs().unwrap().len(), 1);
    let ro = Store::open_read_only(&path).unwrap();
    assert_eq!(ro.jobs().unwrap().len(), 1);
    s.set_meta("schema_version", "99").unwrap();
    drop(s);
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::Version { found: 99, .. })
    ));
}

#[test]
fn intents_are_written_only_under_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let mut a = Store::open(&path).unwrap();
    let mut b = Store::open(&path).unwrap();
    assert!(matches!(
        a.acquire_lease("a:1", now, (60.0, 1.0), &|_| false)
            .unwrap(),
        LeaseGrant::Leading(_)
    ));
    assert!(matches!(
        b.acquire_lease("b:2", now, (60.0, 1.0), &|_| false)
            .unwrap(),
        LeaseGrant::Standby(_)
    ));
    a.write(|w| w.add_intent(1, 7, crate::IntentKind::Start, None, 0.0))
        .unwrap();
    let e = b
        .write(|w| w.add_intent(1, 7, crate::IntentKind::Start, None, 0.0))
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::NotLeader { holder, .. } if holder == "a:1"),
        "{e}"
    );
    // b takes over once a's lease is long expired (b's clock far ahead); a is then refused.
    assert!(matches!(
        b.acquire_lease("b:2", now + 100.0, (60.0, 1.0), &|_| false)
            .unwrap(),
        LeaseGrant::Leading(_)
    ));
    let e = a
        .write(|w| w.add_intent(2, 7, crate::IntentKind::Hold, None, 0.0))
        .unwrap_err();
    assert!(matches!(e, StoreError::NotLeader { .. }), "{e}");
    let intents = a.all_intents().unwrap();
    assert_eq!(intents.len(), 1);
    assert_eq!(intents[0].holder.as_deref(), Some("a:1"));
}

#[test]
fn a_database_without_tables_yet_is_named_as_such_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    // What a reader may see while a starting daemon creates the file.
    std::fs::write(&path, b"").unwrap();
    let err = Store::open_read_only(&path).err().expect("no tables yet");
    assert!(matches!(err, StoreError::NoSchema { .. }), "{err:?}");
    assert!(err.to_string().contains("no hadar tables yet"), "{err}");
    drop(Store::open(&path).unwrap());
    Store::open_read_only(&path).unwrap();
}
