//! Bad input gets a typed error and changes nothing: oversize keys and values, an empty
//! key, and a store of one interface opened as the other.

mod common;

use common::*;
use csd_ftl::FtlConfig;
use csd_kv::{Interface, KvError, Store, StoreConfig};

#[test]
fn oversize_keys_and_values_are_refused_and_nothing_is_lost() {
    for interface in [Interface::Batch, Interface::Block] {
        let cfg = small(interface);
        let mut s = open(client(FtlConfig::default()), cfg.clone());
        for k in 0..50u64 {
            s.put(&key(k), &value(k, 1, 100)).unwrap();
        }
        let before = s.last_change();
        assert!(matches!(
            s.put(&[], b"v"),
            Err(KvError::KeySize { len: 0, .. })
        ));
        assert!(matches!(
            s.put(&[7u8; 5000], b"v"),
            Err(KvError::KeySize { .. })
        ));
        assert!(matches!(s.get(&[7u8; 5000]), Err(KvError::KeySize { .. })));
        assert!(matches!(s.delete(&[]), Err(KvError::KeySize { .. })));
        let big = vec![1u8; 64 * 1024];
        let e = s.put(&key(3), &big).unwrap_err();
        assert!(matches!(e, KvError::ValueSize { .. }), "{e}");
        assert!(e.to_string().contains("at most"), "{e}");
        assert_eq!(
            s.last_change(),
            before,
            "a refused change took a sequence number"
        );
        s.sync().unwrap();
        let c = s.into_device();
        let mut s = open(c, cfg);
        for k in 0..50u64 {
            assert_eq!(s.get(&key(k)).unwrap(), Some(value(k, 1, 100)));
        }
    }
}

#[test]
fn a_store_opened_with_the_other_interface_is_refused_and_still_opens_right() {
    for (made, wrong) in [
        (Interface::Block, Interface::Batch),
        (Interface::Batch, Interface::Block),
    ] {
        let mut s = open(client(FtlConfig::default()), small(made));
        for k in 0..20u64 {
            s.put(&key(k), &value(k, 2, 50)).unwrap();
        }
        s.sync().unwrap();
        let c = s.into_device();
        let f = match Store::open(c, small(wrong)) {
            Ok(_) => panic!("a {made:?} store opened as {wrong:?}"),
            Err(f) => f,
        };
        assert!(matches!(f.error, KvError::WrongFormat(_)), "{}", f.error);
        assert!(f.error.to_string().contains(made.name()), "{}", f.error);
        let mut s = open(f.dev, small(made));
        assert!(s.recovered());
        for k in 0..20u64 {
            assert_eq!(s.get(&key(k)).unwrap(), Some(value(k, 2, 50)));
        }
    }
}

#[test]
fn opening_an_empty_device_without_create_is_an_error() {
    let cfg = StoreConfig {
        create: false,
        ..small(Interface::Batch)
    };
    let f = Store::open(client(FtlConfig::default()), cfg)
        .err()
        .expect("opened");
    assert!(matches!(f.error, KvError::WrongFormat(_)), "{}", f.error);
}

/// An MSET whose pairs pile into one region of the key space (every new key lands in
/// the same leaf, which must split again and again) is either applied whole or refused
/// before anything changes: never a write-buffer overflow with pairs half applied.
/// (Found through redis-cli: 1,500 new 1,000-byte values in one MSET.)
#[test]
fn an_mset_too_big_for_one_buffer_is_refused_and_changes_nothing() {
    for (interface, cfg) in [Interface::Batch, Interface::Block]
        .into_iter()
        .flat_map(|i| {
            [
                small(i),
                StoreConfig {
                    interface: i,
                    ..StoreConfig::default()
                },
            ]
        })
        .map(|c| (c.interface, c))
    {
        let mut s = open(client(FtlConfig::default()), cfg);
        for k in 0..50u64 {
            s.put(&key(k), &value(k, 1, 100)).unwrap();
        }
        for n in [2usize, 8, 40, 300, 1500] {
            let vals: Vec<(Vec<u8>, Vec<u8>)> = (0..n as u64)
                .map(|i| (key(1_000_000 + i), value(i, n as u64, 1000)))
                .collect();
            let pairs: Vec<(&[u8], &[u8])> = vals
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            match s.put_all(&pairs) {
                Ok(_) => {
                    for (k, v) in &vals {
                        assert_eq!(s.get(k).unwrap().as_ref(), Some(v), "{n} pairs");
                    }
                    for (k, _) in &vals {
                        s.delete(k).unwrap();
                    }
                }
                Err(KvError::GroupTooLarge { .. }) => {
                    assert!(n > 2, "{interface:?}: {n} pairs refused");
                    for (k, _) in &vals {
                        assert_eq!(s.get(k).unwrap(), None, "{n} pairs: refused yet applied");
                    }
                }
                Err(e) => panic!("{interface:?}, {n} pairs: {e}"),
            }
        }
        for k in 0..50u64 {
            assert_eq!(s.get(&key(k)).unwrap(), Some(value(k, 1, 100)));
        }
    }
}
