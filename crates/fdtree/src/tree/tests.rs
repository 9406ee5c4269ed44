use super::*;

fn dev() -> SharedDevice {
    crate::test_device()
}

#[test]
fn compose_follows_the_cancel_rules() {
    let ins = |v| Slot {
        del: false,
        ins: Some(v),
    };
    let del = Slot {
        del: true,
        ins: None,
    };
    let both = |v| Slot {
        del: true,
        ins: Some(v),
    };
    // Inserted then deleted in the next generation: nothing remains.
    assert_eq!(ins(1).compose(del), Slot::default());
    // Deleted below, re-inserted above.
    assert_eq!(del.compose(ins(2)), both(2));
    // Update of a key that was inserted in the older generation.
    assert_eq!(ins(1).compose(both(2)), ins(2));
    // Unrelated older slot, delete of a key below both.
    assert_eq!(Slot::default().compose(del), del);
    assert_eq!(both(3).compose(Slot::default()), both(3));
}

#[test]
fn check_invariants_names_the_broken_one() {
    let t = FdTree::create(dev(), FdConfig::small()).unwrap();
    for k in 0..1_000u64 {
        t.insert(k, k).unwrap();
    }
    t.check_invariants().unwrap();
    // Change the level descriptors in place, then expect the checker to name `inv`.
    let tamper = |f: &dyn Fn(&mut Levels)| {
        let mut top = lock(&t.inner.top);
        let mut lv = (*top.levels).clone();
        f(&mut lv);
        top.levels = Arc::new(lv);
    };
    let violates = |inv: Invariant| match t.check_invariants() {
        Err(FdError::Invariant { inv: got, .. }) => assert_eq!(got, inv),
        other => panic!("expected {inv:?} to be reported, got {other:?}"),
    };
    // A descriptor that disagrees with the blocks.
    tamper(&|lv: &mut Levels| {
        lv.levels[0].inserts += 1;
    });
    violates(Invariant::Counters);
    tamper(&|lv: &mut Levels| {
        lv.levels[0].inserts -= 1;
        // A level over its class's maximum size.
        let last = lv.levels.len() - 1;
        lv.levels[last].index = 0;
    });
    violates(Invariant::I3MaxSize);
    tamper(&|lv: &mut Levels| {
        let last = lv.levels.len() - 1;
        lv.levels[last].index = 40;
    });
    violates(Invariant::I4MinSize);
    tamper(&|lv: &mut Levels| {
        let last = lv.levels.len() - 1;
        lv.levels[last].index = t.inner.geo.class_for(lv.levels[last].blocks);
        // Drop a top fence: a block of the first level is no longer fenced.
        lv.top_fences.pop();
    });
    violates(Invariant::I1AllBlocksFenced);
}

#[test]
fn geometry_is_validated() {
    let d = dev();
    let g = Geo::new(&d, &FdConfig::small()).unwrap();
    assert_eq!(g.epb, 239);
    assert_eq!(g.c0, 256);
    assert_eq!(g.cap(0), 1);
    assert_eq!(g.cap(2), 9);
    assert_eq!(g.class_for(10), 3);
    let mut c = FdConfig::small();
    c.size_ratio = 300;
    assert!(matches!(Geo::new(&d, &c), Err(FdError::Config(_))));
    let mut c = FdConfig::small();
    c.size_ratio = 40; // 1 x 40 fences > 256 / 8
    assert!(matches!(Geo::new(&d, &c), Err(FdError::Config(m)) if m.contains("fences")));
    let mut c = FdConfig::small();
    c.cache_bytes = 4096;
    assert!(matches!(Geo::new(&d, &c), Err(FdError::Config(_))));
}
