//! Generator tests: determinism, request mix, the deletion constraint of Remark A.2,
//! unique insert keys, and the G_T mix of Remark A.3 (91.3 % writes / 8.7 % lookups).

use csd_idxbench::workload::NO_PREDECESSOR;
use csd_idxbench::*;
use std::collections::{BTreeMap, HashMap};

fn gr(w_l: f64, n: u64, preload: u64, seed: u64) -> Workload {
    generate_gr(&GrSpec::with_lookup_ratio(w_l, n, preload), seed).unwrap()
}

#[test]
fn gr_is_deterministic_per_seed() {
    let a = gr(0.6, 20_000, 1000, 7);
    let b = gr(0.6, 20_000, 1000, 7);
    let c = gr(0.6, 20_000, 1000, 8);
    assert_eq!(a.requests, b.requests);
    assert_ne!(a.requests, c.requests);
    assert_eq!(a.expected_final(), b.expected_final());
}

#[test]
fn gr_ratios_within_tolerance() {
    for w_l in [0.0, 0.2, 0.6, 0.9, 1.0] {
        let w = gr(w_l, 100_000, 10_000, 1);
        let c = w.counts();
        let n = w.requests.len() as f64;
        assert_eq!(w.requests.len(), 100_000);
        let (fi, fd, fl) = (c[0] as f64 / n, c[1] as f64 / n, c[2] as f64 / n);
        let rest = (1.0 - w_l) / 2.0;
        assert!((fl - w_l).abs() < 0.01, "W_l={w_l}: lookups {fl}");
        assert!((fi - rest).abs() < 0.01, "W_l={w_l}: inserts {fi}");
        assert!((fd - rest).abs() < 0.01, "W_l={w_l}: deletes {fd}");
        assert_eq!(w.converted_deletes, 0);
    }
}

/// Replays a G_R workload and checks Remark A.2's rules on every request.
fn check_gr_rules(w: &Workload, min_age: u64) {
    let mut present: BTreeMap<u64, Option<usize>> =
        w.preload.iter().map(|(k, _)| (k, None)).collect();
    let s = w.preload.len();
    assert_eq!(w.k_l, s + 1);
    let mut last_write: HashMap<u64, u32> = HashMap::new();
    let mut deleted_at: HashMap<u64, usize> = HashMap::new();
    for (i, r) in w.requests.iter().enumerate() {
        match r.op {
            OpKind::Insert => {
                assert!(
                    !present.contains_key(&r.key),
                    "request {i}: key {} inserted twice",
                    r.key
                );
                assert!(
                    r.key >= w.k_l && r.key <= w.k_u,
                    "insert key {} outside [k_l, k_u]",
                    r.key
                );
                if let Some(&d) = deleted_at.get(&r.key) {
                    assert!(
                        i - d >= min_age as usize,
                        "key {} re-inserted {} requests after delete",
                        r.key,
                        i - d
                    );
                }
                // Smallest unused key: no smaller key in [k_l, key) is absent and reusable.
                for k in w.k_l..r.key {
                    if !present.contains_key(&k) {
                        let freed_recently = deleted_at
                            .get(&k)
                            .is_some_and(|&d| i - d < min_age as usize);
                        assert!(
                            freed_recently,
                            "request {i}: key {} chosen although {k} was free",
                            r.key
                        );
                    }
                }
                present.insert(r.key, Some(i));
            }
            OpKind::Delete => {
                let born = present
                    .remove(&r.key)
                    .unwrap_or_else(|| panic!("request {i}: delete of absent key {}", r.key));
                if let Some(b) = born {
                    assert!(
                        i - b >= min_age as usize,
                        "request {i}: key inserted only {} requests earlier",
                        i - b
                    );
                }
                deleted_at.insert(r.key, i);
            }
            OpKind::Lookup => {
                if !present.is_empty() {
                    assert!(
                        present.contains_key(&r.key),
                        "request {i}: lookup of a key not in K"
                    );
                }
            }
        }
        if r.op.is_write() {
            let prev = last_write.insert(r.key, i as u32).unwrap_or(NO_PREDECESSOR);
            assert_eq!(r.after, prev, "request {i}: wrong predecessor");
        } else {
            assert_eq!(r.after, NO_PREDECESSOR);
        }
    }
}

#[test]
fn gr_follows_remark_a2() {
    check_gr_rules(&gr(0.2, 6_000, 300, 3), 100);
    check_gr_rules(&gr(0.0, 6_000, 1_000, 4), 100);
    check_gr_rules(&gr(0.9, 6_000, 50, 5), 100);
}

#[test]
fn gr_on_empty_index_converts_impossible_deletes() {
    let w = gr(0.0, 2_000, 0, 9);
    check_gr_rules(&w, 100);
    assert!(
        w.converted_deletes > 0,
        "the first deletions cannot find a 100-request-old key"
    );
    let c = w.counts();
    assert_eq!(c[0] + c[1], 2_000);
}

#[test]
fn gr_without_deletes_inserts_consecutive_keys() {
    let spec = GrSpec {
        requests: 1000,
        w_lookup: 0.5,
        w_insert: 0.5,
        w_delete: 0.0,
        preload: 10,
        delete_min_age: 100,
    };
    let w = generate_gr(&spec, 2).unwrap();
    let ins: Vec<u64> = w
        .requests
        .iter()
        .filter(|r| r.op == OpKind::Insert)
        .map(|r| r.key)
        .collect();
    let want: Vec<u64> = (11..11 + ins.len() as u64).collect();
    assert_eq!(ins, want);
    assert_eq!(w.k_u, 10 + ins.len() as u64);
}

#[test]
fn bad_specs_are_rejected() {
    let mut s = GrSpec::with_lookup_ratio(0.5, 10, 10);
    s.w_insert = f64::NAN;
    assert!(matches!(
        generate_gr(&s, 1),
        Err(WorkloadError::BadRatio(..))
    ));
    let s = GrSpec {
        w_lookup: 0.0,
        w_insert: 0.0,
        w_delete: 0.0,
        ..GrSpec::with_lookup_ratio(0.5, 10, 10)
    };
    assert!(generate_gr(&s, 1).is_err());
    let s = GrSpec::with_lookup_ratio(-0.5, 10, 10);
    assert!(generate_gr(&s, 1).is_err());
    let mut t = GtSpec::paper(0, 10);
    assert!(matches!(
        generate_gt(&t, 1),
        Err(WorkloadError::BadParam {
            name: "warehouses",
            ..
        })
    ));
    t.warehouses = 1;
    t.districts = 300;
    assert!(generate_gt(&t, 1).is_err());
}

#[test]
fn gt_mix_matches_paper() {
    let spec = GtSpec {
        customers_per_district: 300,
        ..GtSpec::paper(4, 200_000)
    };
    let w = generate_gt(&spec, 11).unwrap();
    assert_eq!(w.requests.len(), 200_000);
    let c = w.counts();
    let n = w.requests.len() as f64;
    let writes = (c[0] + c[1]) as f64 / n * 100.0;
    let lookups = c[2] as f64 / n * 100.0;
    // Paper: 91.3 % insertions (deletions count as insertions in an FD+tree), 8.7 % lookups.
    assert!((writes - 91.3).abs() < 0.5, "writes {writes:.2}%");
    assert!((lookups - 8.7).abs() < 0.5, "lookups {lookups:.2}%");
    // Derived split: 45 inserts and 40 deletes per 93 requests.
    assert!((c[0] as f64 / n - 45.0 / 93.0).abs() < 0.01);
    assert!((c[1] as f64 / n - 40.0 / 93.0).abs() < 0.01);
    let nominal = WorkloadSpec::Gt(spec.clone()).nominal_lookup_fraction();
    assert!((nominal - 8.0 / 93.0).abs() < 1e-12);
    // Determinism.
    assert_eq!(generate_gt(&spec, 11).unwrap().requests, w.requests);
    assert_ne!(generate_gt(&spec, 12).unwrap().requests, w.requests);
}

#[test]
fn gt_keys_are_consistent() {
    let spec = GtSpec {
        customers_per_district: 50,
        ..GtSpec::paper(3, 30_000)
    };
    let w = generate_gt(&spec, 5).unwrap();
    assert_eq!(w.preload.len(), 3 * 10 * 150);
    let mut present: BTreeMap<u64, u64> = w.preload.iter().collect();
    let mut last_deleted: HashMap<(u32, u32), u64> = HashMap::new();
    for (i, r) in w.requests.iter().enumerate() {
        let (wh, d, o) = tpcc_key_parts(r.key);
        assert!(
            (1..=3).contains(&wh) && (1..=10).contains(&d) && o >= 1,
            "bad key {wh}/{d}/{o}"
        );
        assert_eq!(tpcc_key(wh, d, o), r.key);
        match r.op {
            OpKind::Insert => assert!(
                present.insert(r.key, r.value).is_none(),
                "request {i}: duplicate order"
            ),
            OpKind::Delete => {
                assert!(
                    present.remove(&r.key).is_some(),
                    "request {i}: delivery of absent order"
                );
                let prev = last_deleted.insert((wh, d), o);
                assert!(
                    prev.is_none_or(|p| p + 1 == o),
                    "deliveries in order per district"
                );
            }
            OpKind::Lookup => {}
        }
    }
    assert_eq!(present, w.expected_final());
    // Keys sort as (warehouse, district, order).
    assert!(tpcc_key(1, 10, 999_999) < tpcc_key(2, 1, 1));
    assert!(tpcc_key(1, 2, 5) < tpcc_key(1, 2, 6));
}

#[test]
fn preload_iterators() {
    let p = Preload::Dense { count: 5, seed: 1 };
    let v: Vec<(u64, u64)> = p.iter().collect();
    assert_eq!(
        v.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(p.len(), 5);
    let t = Preload::Tpcc {
        warehouses: 2,
        districts: 3,
        orders_per_district: 4,
        seed: 1,
    };
    let keys: Vec<u64> = t.iter().map(|x| x.0).collect();
    assert_eq!(keys.len() as u64, t.len());
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "ascending");
}

#[test]
fn generators_are_named_g_r_and_g_t_in_text_and_json() {
    let gr = gr(0.5, 100, 10, 1);
    assert_eq!(gr.generator, Generator::Gr);
    let gt = WorkloadSpec::Gt(GtSpec::paper(1, 100)).generate(1).unwrap();
    assert_eq!(gt.generator, Generator::Gt);
    assert_eq!(
        serde_json::to_value([Generator::Gr, Generator::Gt]).unwrap(),
        serde_json::json!(["G_R", "G_T"])
    );
    assert_eq!(
        format!("{}|{:<4}|", Generator::Gr, Generator::Gt),
        "G_R|G_T |"
    );
    assert!(gr.spec.to_string().starts_with(Generator::Gr.name()));
    assert!(gt.spec.to_string().starts_with(Generator::Gt.name()));
    assert_eq!(
        gr.spec.to_string(),
        "G_R N=100 W_l:W_i:W_d=0.500:0.250:0.250 preload=10 delete_min_age=100"
    );
    assert_eq!(
        gt.spec.to_string(),
        "G_T N=100 warehouses=1 districts=10 customers/district=3000 preload orders/customer=3 mix=45/43/4/4/4"
    );
    let back: Generator = serde_json::from_str("\"G_T\"").unwrap();
    assert_eq!(back, Generator::Gt);
    assert!(serde_json::from_str::<Generator>("\"G_X\"").is_err());
}
