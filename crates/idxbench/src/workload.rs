//! Workload generators G_R and G_T of the FD+tree paper (§5, Remarks A.2 and A.3).
//!
//! Both generators are deterministic functions of their spec and a seed: the same
//! `(spec, seed)` always yields the same [`Workload`], request for request. As in the
//! paper ("the workload is stored as a file from which a workload injection thread
//! reads"), the whole request list is generated before the run, so generation cost never
//! shows up in the measured latencies.
//!
//! **G_R (Remark A.2).** Given `N` requests and the proportion `W_l : W_i : W_d`, the type
//! of every request is drawn first (seeded), which fixes the number of insertions `N_i`;
//! then `k_l = s + 1`, `k_u = s + N_i` where `s` is the largest preloaded key. A lookup
//! picks a key uniformly from the list `K` of keys currently in the index; an insertion
//! picks the smallest key in `[k_l, k_u] \ K` with a random value; a deletion picks a key
//! uniformly from `K` among those inserted at least [`GrSpec::delete_min_age`] (100)
//! requests earlier. Choices the remark leaves open:
//! * The preload inserts the keys `1..=preload` (as a G_R run with `W_i = 1` on an empty
//!   index would), with values derived from the seed; so `s = preload`.
//! * A key deleted from `[k_l, k_u]` becomes "unused" again and may be re-inserted, but
//!   only once it has been absent for `delete_min_age` requests too — the same spacing the
//!   paper imposes on insert → delete, so that two writer threads practically never
//!   race on one key.
//! * A lookup when `K` is empty looks up `k_l` (a miss). A deletion when no key in `K` is
//!   old enough (only possible in the first requests on a tiny index) is turned into an
//!   insertion and counted in [`Workload::converted_deletes`]; `k_u` then grows by one.
//!
//! **G_T (Remark A.3).** Index requests on the primary index of TPC-C's NEW_ORDER table,
//! key `(NO_W_ID, NO_D_ID, NO_O_ID)`, packed into a `u64` as
//! `w << 48 | d << 40 | o` so that the integer order is the composite-key order (see
//! [`tpcc_key`]). Transactions are drawn with the TPC-C frequencies 45/43/4/4/4
//! (NewOrder, Payment, Order-Status, Delivery, Stock-Level); warehouse and district are
//! uniform. Our copy of the remark is cut off after describing the table, so the
//! mapping of transactions to index requests is derived here:
//! * NewOrder: one insertion of `(w, d, next_o_id(w, d))`.
//! * Delivery: "10 orders are delivered together": for each of the 10 districts of the
//!   warehouse, the oldest undelivered order is deleted (TPC-C's delivery). Locating the
//!   batch is one point lookup (of the oldest new order of the warehouse's first
//!   district); the per-district `MIN(NO_O_ID)` probes are range probes that a point
//!   index does not serve, so they are not separate requests.
//! * Order-Status: one lookup of the customer's most recent order, i.e. of an order id
//!   drawn uniformly from the district's last `customers_per_district` orders (each
//!   customer orders about once per that many orders); it misses if already delivered.
//! * Payment, Stock-Level: no NEW_ORDER index request.
//!
//! Per 100 transactions this gives 45 insertions + 40 deletions = 85 writes and 8
//! lookups, i.e. 91.4 % / 8.6 %. The paper reports 91.3 % "insertions" and 8.7 %
//! lookups; its 91.3 % counts deletions as insertions, which is exactly how an FD+tree
//! executes them (§5: "deletions are handled just as insertions by FD+trees"; a deletion
//! inserts a delete entry). [`Workload::counts`] reports the three kinds separately.
//! The preload inserts `preload_orders_per_customer` (paper: 3) orders per customer, all
//! undelivered, per district (paper: 10 districts, 3000 customers). That is 90 000 keys
//! per warehouse, which at the paper's 12 bytes per entry (120 MB / 10 M keys) gives
//! 21.6 MB for 20 warehouses and 108 MB for 100 — the paper states 21 MB and 105 MB.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// The kind of an index request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// Insert (or overwrite) a key with a value.
    Insert,
    /// Delete a key.
    Delete,
    /// Point lookup of a key.
    Lookup,
}

impl OpKind {
    /// All kinds, in report order.
    pub const ALL: [OpKind; 3] = [OpKind::Insert, OpKind::Delete, OpKind::Lookup];

    /// Lower-case name used in tables and JSON keys (`insert`, `delete`, `lookup`).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Insert => "insert",
            OpKind::Delete => "delete",
            OpKind::Lookup => "lookup",
        }
    }

    /// Position in [`OpKind::ALL`].
    pub fn index(self) -> usize {
        match self {
            OpKind::Insert => 0,
            OpKind::Delete => 1,
            OpKind::Lookup => 2,
        }
    }

    /// True for insertions and deletions (the requests that go to the write queue Q_w).
    pub fn is_write(self) -> bool {
        !matches!(self, OpKind::Lookup)
    }
}

/// Its name ([`OpKind::name`]), padded as the format asks.
impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// Marker for "no earlier write to the same key" in [`Request::after`].
pub const NO_PREDECESSOR: u32 = u32::MAX;

/// One index request of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub op: OpKind,
    /// The key.
    pub key: u64,
    /// The value (insertions only; 0 otherwise).
    pub value: u64,
    /// For a write: the position of the previous write to the same key in this workload
    /// ([`NO_PREDECESSOR`] if none). The harness lets a write start only after that one
    /// has completed, so concurrent writers keep per-key order.
    pub after: u32,
}

/// The keys an index holds before the measured workload starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Preload {
    /// Keys `1..=count` (G_R).
    Dense {
        /// Number of keys.
        count: u64,
        /// Seed for the values.
        seed: u64,
    },
    /// TPC-C NEW_ORDER keys: orders `1..=orders_per_district` in every district of every
    /// warehouse (G_T).
    Tpcc {
        /// Number of warehouses.
        warehouses: u32,
        /// Districts per warehouse.
        districts: u32,
        /// Preloaded (undelivered) orders per district.
        orders_per_district: u64,
        /// Seed for the values.
        seed: u64,
    },
}

impl Preload {
    /// Number of preloaded keys.
    pub fn len(&self) -> u64 {
        match *self {
            Preload::Dense { count, .. } => count,
            Preload::Tpcc {
                warehouses,
                districts,
                orders_per_district,
                ..
            } => u64::from(warehouses) * u64::from(districts) * orders_per_district,
        }
    }

    /// True if nothing is preloaded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The preloaded `(key, value)` pairs in ascending key order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (u64, u64)> + Send + '_> {
        match *self {
            Preload::Dense { count, seed } => {
                Box::new((1..=count).map(move |k| (k, preload_value(seed, k))))
            }
            Preload::Tpcc {
                warehouses,
                districts,
                orders_per_district,
                seed,
            } => Box::new((1..=warehouses).flat_map(move |w| {
                (1..=districts).flat_map(move |d| {
                    (1..=orders_per_district).map(move |o| {
                        let k = tpcc_key(w, d, o);
                        (k, preload_value(seed, k))
                    })
                })
            })),
        }
    }
}

/// The value stored with a preloaded key (a seeded hash of the key).
pub fn preload_value(seed: u64, key: u64) -> u64 {
    splitmix64(seed ^ key.rotate_left(29) ^ 0x0005_EED0_F1DB_E7C4)
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Packs a NEW_ORDER primary key `(NO_W_ID, NO_D_ID, NO_O_ID)` into a `u64`
/// (`w` in bits 48..64, `d` in bits 40..48, `o` in bits 0..40) so that integer order
/// equals composite-key order.
pub fn tpcc_key(w: u32, d: u32, o: u64) -> u64 {
    (u64::from(w) << 48) | (u64::from(d & 0xFF) << 40) | (o & ((1 << 40) - 1))
}

/// Unpacks a key made by [`tpcc_key`] into `(w, d, o)`.
pub fn tpcc_key_parts(key: u64) -> (u32, u32, u64) {
    (
        (key >> 48) as u32,
        ((key >> 40) & 0xFF) as u32,
        key & ((1 << 40) - 1),
    )
}

/// Errors in a workload specification.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorkloadError {
    /// A ratio is negative or not finite, or all ratios are zero.
    #[error(
        "invalid request ratio W_l:W_i:W_d = {0}:{1}:{2}: each must be finite and >= 0, and their sum > 0"
    )]
    BadRatio(f64, f64, f64),
    /// A size parameter is out of range.
    #[error("invalid workload parameter {name} = {value}: {why}")]
    BadParam {
        /// Parameter name.
        name: &'static str,
        /// Given value.
        value: u64,
        /// What is allowed.
        why: &'static str,
    },
}

/// Parameters of generator G_R (Remark A.2). The seed is given separately.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrSpec {
    /// Number of requests `N` in the workload (paper: 10 M).
    pub requests: u64,
    /// Lookup weight `W_l`.
    pub w_lookup: f64,
    /// Insertion weight `W_i`.
    pub w_insert: f64,
    /// Deletion weight `W_d`.
    pub w_delete: f64,
    /// Keys preloaded before the workload (paper: 10 M).
    pub preload: u64,
    /// A deletion only picks keys inserted at least this many requests earlier (paper: 100).
    pub delete_min_age: u64,
}

impl GrSpec {
    /// A Figure-6 workload: lookup ratio `w_l`, the rest split equally between insertions
    /// and deletions "so as to keep the total number of indexed records roughly constant".
    pub fn with_lookup_ratio(w_l: f64, requests: u64, preload: u64) -> Self {
        let rest = (1.0 - w_l) / 2.0;
        Self {
            requests,
            w_lookup: w_l,
            w_insert: rest,
            w_delete: rest,
            preload,
            delete_min_age: 100,
        }
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        let (l, i, d) = (self.w_lookup, self.w_insert, self.w_delete);
        if ![l, i, d].iter().all(|w| w.is_finite() && *w >= 0.0) || l + i + d <= 0.0 {
            return Err(WorkloadError::BadRatio(l, i, d));
        }
        if self.requests >= u64::from(NO_PREDECESSOR) {
            return Err(WorkloadError::BadParam {
                name: "requests",
                value: self.requests,
                why: "must be below 2^32 - 1",
            });
        }
        if self.preload >= 1 << 40 {
            return Err(WorkloadError::BadParam {
                name: "preload",
                value: self.preload,
                why: "must be below 2^40",
            });
        }
        Ok(())
    }
}

/// Relative TPC-C transaction frequencies (percent), TPC-C spec §5.2.3 as quoted in
/// Remark A.3.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TpccMix {
    /// NewOrder (order entry).
    pub new_order: f64,
    /// Payment.
    pub payment: f64,
    /// Order-Status.
    pub order_status: f64,
    /// Delivery.
    pub delivery: f64,
    /// Stock-Level (inventory check).
    pub stock_level: f64,
}

impl Default for TpccMix {
    /// 45 / 43 / 4 / 4 / 4.
    fn default() -> Self {
        Self {
            new_order: 45.0,
            payment: 43.0,
            order_status: 4.0,
            delivery: 4.0,
            stock_level: 4.0,
        }
    }
}

/// Parameters of generator G_T (Remark A.3). The seed is given separately.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GtSpec {
    /// Number of index requests in the workload.
    pub requests: u64,
    /// Warehouses (paper: 20 to 100).
    pub warehouses: u32,
    /// Districts per warehouse (paper and TPC-C: 10).
    pub districts: u32,
    /// Customers per district (paper and TPC-C: 3000).
    pub customers_per_district: u32,
    /// Orders per customer inserted by the preload (paper: 3).
    pub preload_orders_per_customer: u32,
    /// Transaction frequencies.
    pub mix: TpccMix,
}

impl GtSpec {
    /// The paper's set-up for `warehouses` warehouses, with `requests` index requests.
    pub fn paper(warehouses: u32, requests: u64) -> Self {
        Self {
            requests,
            warehouses,
            districts: 10,
            customers_per_district: 3000,
            preload_orders_per_customer: 3,
            mix: TpccMix::default(),
        }
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |name, value: u64, why| Err(WorkloadError::BadParam { name, value, why });
        if self.warehouses == 0 || self.warehouses > 0xFFFF {
            return bad("warehouses", self.warehouses.into(), "must be in 1..=65535");
        }
        if self.districts == 0 || self.districts > 0xFF {
            return bad("districts", self.districts.into(), "must be in 1..=255");
        }
        if self.customers_per_district == 0 {
            return bad("customers_per_district", 0, "must be at least 1");
        }
        if self.requests >= u64::from(NO_PREDECESSOR) {
            return bad("requests", self.requests, "must be below 2^32 - 1");
        }
        let m = self.mix;
        let w = [
            m.new_order,
            m.payment,
            m.order_status,
            m.delivery,
            m.stock_level,
        ];
        if !w.iter().all(|x| x.is_finite() && *x >= 0.0)
            || m.new_order + m.order_status + m.delivery <= 0.0
        {
            return Err(WorkloadError::BadRatio(
                m.order_status + m.delivery,
                m.new_order,
                m.delivery,
            ));
        }
        Ok(())
    }
}

/// A workload generator of the paper (§5): which of the two a workload, a result or a
/// statement of the paper is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Generator {
    /// G_R (Remark A.2): uniform lookups, insertions and deletions of random keys.
    #[serde(rename = "G_R")]
    Gr,
    /// G_T (Remark A.3): the TPC-C NEW_ORDER index's requests.
    #[serde(rename = "G_T")]
    Gt,
}

impl Generator {
    /// Its name in reports: `G_R` or `G_T`.
    pub fn name(self) -> &'static str {
        match self {
            Generator::Gr => "G_R",
            Generator::Gt => "G_T",
        }
    }
}

/// Its name ([`Generator::name`]), padded as the format asks.
impl std::fmt::Display for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// Which generator to run, with its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WorkloadSpec {
    /// Generator G_R.
    Gr(GrSpec),
    /// Generator G_T.
    Gt(GtSpec),
}

impl WorkloadSpec {
    /// Generates the workload for `seed`.
    pub fn generate(&self, seed: u64) -> Result<Workload, WorkloadError> {
        match self {
            WorkloadSpec::Gr(s) => generate_gr(s, seed),
            WorkloadSpec::Gt(s) => generate_gt(s, seed),
        }
    }

    /// The generator it runs.
    pub fn generator(&self) -> Generator {
        match self {
            WorkloadSpec::Gr(_) => Generator::Gr,
            WorkloadSpec::Gt(_) => Generator::Gt,
        }
    }

    /// The nominal lookup weight as a fraction (G_T: 8/93, see the module docs).
    pub fn nominal_lookup_fraction(&self) -> f64 {
        match self {
            WorkloadSpec::Gr(s) => s.w_lookup / (s.w_lookup + s.w_insert + s.w_delete),
            WorkloadSpec::Gt(s) => {
                let m = s.mix;
                let lookups = m.order_status + m.delivery;
                let writes = m.new_order + m.delivery * f64::from(s.districts);
                lookups / (lookups + writes)
            }
        }
    }
}

/// The parameters in one line (`G_R N=… W_l:W_i:W_d=…` or `G_T N=… warehouses=…`), as
/// reports show the workload.
impl std::fmt::Display for WorkloadSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkloadSpec::Gr(s) => write!(
                f,
                "G_R N={} W_l:W_i:W_d={:.3}:{:.3}:{:.3} preload={} delete_min_age={}",
                s.requests, s.w_lookup, s.w_insert, s.w_delete, s.preload, s.delete_min_age
            ),
            WorkloadSpec::Gt(s) => {
                let m = s.mix;
                write!(
                    f,
                    "G_T N={} warehouses={} districts={} customers/district={} preload orders/customer={} mix={}/{}/{}/{}/{}",
                    s.requests,
                    s.warehouses,
                    s.districts,
                    s.customers_per_district,
                    s.preload_orders_per_customer,
                    m.new_order,
                    m.payment,
                    m.order_status,
                    m.delivery,
                    m.stock_level
                )
            }
        }
    }
}

/// A generated workload: preload plus the ordered list of requests.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The generator that made it.
    pub generator: Generator,
    /// The spec it was generated from (printed as its one-line description).
    pub spec: WorkloadSpec,
    /// Seed it was generated from.
    pub seed: u64,
    /// What is inserted before the run.
    pub preload: Preload,
    /// The requests, in generation (= injection) order.
    pub requests: Vec<Request>,
    /// G_R: smallest key inserted by the workload (`k_l`).
    pub k_l: u64,
    /// G_R: largest key the workload may insert (`k_u`).
    pub k_u: u64,
    /// G_R: deletions that found no old-enough key and became insertions.
    pub converted_deletes: u64,
}

impl Workload {
    /// Number of requests of each kind, indexed by [`OpKind::index`].
    pub fn counts(&self) -> [u64; 3] {
        let mut c = [0u64; 3];
        for r in &self.requests {
            c[r.op.index()] += 1;
        }
        c
    }

    /// Replays preload and requests sequentially and returns the index content they
    /// leave: what a correct index holds after the run.
    pub fn expected_final(&self) -> BTreeMap<u64, u64> {
        let mut m: BTreeMap<u64, u64> = self.preload.iter().collect();
        for r in &self.requests {
            match r.op {
                OpKind::Insert => {
                    m.insert(r.key, r.value);
                }
                OpKind::Delete => {
                    m.remove(&r.key);
                }
                OpKind::Lookup => {}
            }
        }
        m
    }
}

/// Tracks the last write position of each key, to fill [`Request::after`]: a vector
/// indexed by key for G_R's dense keys, a hash map for G_T's sparse ones.
enum LastWrite {
    Dense(Vec<u32>),
    Sparse(std::collections::HashMap<u64, u32>),
}

impl LastWrite {
    fn push(&mut self, reqs: &mut Vec<Request>, op: OpKind, key: u64, value: u64) {
        let pos = reqs.len() as u32;
        let after = if !op.is_write() {
            NO_PREDECESSOR
        } else {
            match self {
                LastWrite::Dense(v) => {
                    let k = key as usize;
                    if v.len() <= k {
                        v.resize(k + 1, NO_PREDECESSOR);
                    }
                    std::mem::replace(&mut v[k], pos)
                }
                LastWrite::Sparse(m) => m.insert(key, pos).unwrap_or(NO_PREDECESSOR),
            }
        };
        reqs.push(Request {
            op,
            key,
            value,
            after,
        });
    }
}

/// Generator G_R (Remark A.2); see the module docs for the choices made.
pub fn generate_gr(spec: &GrSpec, seed: u64) -> Result<Workload, WorkloadError> {
    spec.validate()?;
    let mut rng = SmallRng::seed_from_u64(seed);
    // Step 1: the type of every request, which fixes N_i.
    let types = gr_types(spec, &mut rng);
    let n_i = types.iter().filter(|t| **t == OpKind::Insert).count() as u64;
    let s = spec.preload;
    let vseed = rng.random::<u64>();
    let mut ks = GrKeys::new(s, n_i, spec.delete_min_age as i64);
    let mut reqs = Vec::with_capacity(spec.requests as usize);
    let mut last = LastWrite::Dense(vec![NO_PREDECESSOR; (ks.k_u + 1) as usize]);
    let mut converted = 0u64;
    for (i, ty) in types.into_iter().enumerate() {
        let i = i as i64;
        ks.release_due(i);
        let mut ty = ty;
        if ty == OpKind::Delete {
            match pick_old_key(&mut rng, &ks.keys, i, ks.min_age) {
                Some(slot) => {
                    let k = ks.delete(slot, i);
                    last.push(&mut reqs, OpKind::Delete, k, 0);
                    continue;
                }
                None => {
                    converted += 1;
                    ty = OpKind::Insert;
                }
            }
        }
        match ty {
            OpKind::Lookup => {
                let k = if ks.keys.is_empty() {
                    ks.k_l
                } else {
                    ks.keys[rng.random_range(0..ks.keys.len())].0
                };
                last.push(&mut reqs, OpKind::Lookup, k, 0);
            }
            _ => {
                let k = ks.insert(i);
                let v = splitmix64(vseed ^ (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
                last.push(&mut reqs, OpKind::Insert, k, v);
            }
        }
    }
    Ok(Workload {
        generator: Generator::Gr,
        spec: WorkloadSpec::Gr(spec.clone()),
        seed,
        preload: Preload::Dense { count: s, seed },
        requests: reqs,
        k_l: ks.k_l,
        k_u: ks.k_u,
        converted_deletes: converted,
    })
}

/// G_R's step 1: the type of every request, drawn by the weights.
fn gr_types(spec: &GrSpec, rng: &mut SmallRng) -> Vec<OpKind> {
    let total = spec.w_lookup + spec.w_insert + spec.w_delete;
    let (p_l, p_i) = (spec.w_lookup / total, spec.w_insert / total);
    (0..spec.requests)
        .map(|_| {
            let u: f64 = rng.random();
            if u < p_l {
                OpKind::Lookup
            } else if u < p_l + p_i {
                OpKind::Insert
            } else {
                OpKind::Delete
            }
        })
        .collect()
}

/// G_R's key set K as requests are generated: the keys present, where each is, and the
/// keys deleted by the workload that insertions may reuse.
struct GrKeys {
    /// (key, request index at insertion; preloaded keys count as very old).
    keys: Vec<(u64, i64)>,
    /// Position of each key in `keys`, u32::MAX if absent; keys are dense in 1..=k_u.
    pos: Vec<u32>,
    /// The smallest key the workload inserts (the first after the preload).
    k_l: u64,
    /// The largest key inserted so far (at least the preload plus N_i).
    k_u: u64,
    next_fresh: u64,
    /// Keys in [k_l, ..) deleted by the workload: (reusable from request, key).
    freed_pending: VecDeque<(i64, u64)>,
    /// Keys reusable now, smallest first.
    freed: BinaryHeap<Reverse<u64>>,
    /// Requests between a key's insertion and its deletion, and between its deletion
    /// and its reuse.
    min_age: i64,
}

impl GrKeys {
    /// Keys 1..=`preload` present; `n_i` insertions to come.
    fn new(preload: u64, n_i: u64, min_age: i64) -> GrKeys {
        let s = preload;
        let k_u = s + n_i;
        let mut pos: Vec<u32> = Vec::with_capacity((k_u + 2) as usize);
        pos.push(u32::MAX);
        pos.extend(0..s as u32);
        GrKeys {
            keys: (1..=s).map(|k| (k, i64::MIN / 2)).collect(),
            pos,
            k_l: s + 1,
            k_u,
            next_fresh: s + 1,
            freed_pending: VecDeque::new(),
            freed: BinaryHeap::new(),
            min_age,
        }
    }

    /// Make the keys deleted long enough before request `i` reusable.
    #[inline]
    fn release_due(&mut self, i: i64) {
        while self.freed_pending.front().is_some_and(|(t, _)| *t <= i) {
            if let Some((_, k)) = self.freed_pending.pop_front() {
                self.freed.push(Reverse(k));
            }
        }
    }

    /// Delete the key in `slot` at request `i`; returns it.
    #[inline]
    fn delete(&mut self, slot: usize, i: i64) -> u64 {
        let (k, _) = self.keys.swap_remove(slot);
        self.pos[k as usize] = u32::MAX;
        if let Some(&(moved, _)) = self.keys.get(slot) {
            self.pos[moved as usize] = slot as u32;
        }
        if k >= self.k_l {
            self.freed_pending.push_back((i + self.min_age, k));
        }
        k
    }

    /// Insert at request `i` the smallest reusable key below the next fresh one, or the
    /// next fresh one; returns it.
    #[inline]
    fn insert(&mut self, i: i64) -> u64 {
        let k = match self.freed.peek() {
            Some(&Reverse(f)) if f < self.next_fresh => {
                self.freed.pop();
                f
            }
            _ => {
                let k = self.next_fresh;
                self.next_fresh += 1;
                k
            }
        };
        self.k_u = self.k_u.max(k);
        while self.pos.len() <= k as usize {
            self.pos.push(u32::MAX);
        }
        self.pos[k as usize] = self.keys.len() as u32;
        self.keys.push((k, i));
        k
    }
}

/// Picks a slot of `keys` whose key was inserted at least `min_age` requests before `i`.
fn pick_old_key(rng: &mut SmallRng, keys: &[(u64, i64)], i: i64, min_age: i64) -> Option<usize> {
    if keys.is_empty() {
        return None;
    }
    // At most `min_age` keys are too young, so random probing succeeds quickly unless
    // the index is tiny; then a scan from a random start decides.
    for _ in 0..32 {
        let slot = rng.random_range(0..keys.len());
        if i - keys[slot].1 >= min_age {
            return Some(slot);
        }
    }
    let start = rng.random_range(0..keys.len());
    (0..keys.len())
        .map(|j| (start + j) % keys.len())
        .find(|&slot| i - keys[slot].1 >= min_age)
}

/// Generator G_T (Remark A.3); see the module docs for the derived request mix.
pub fn generate_gt(spec: &GtSpec, seed: u64) -> Result<Workload, WorkloadError> {
    spec.validate()?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let vseed = rng.random::<u64>();
    let (nw, nd) = (spec.warehouses as usize, spec.districts as usize);
    let pre = u64::from(spec.customers_per_district) * u64::from(spec.preload_orders_per_customer);
    // Per district: next order id and oldest undelivered order id; undelivered = [oldest, next).
    let mut next_o = vec![pre + 1; nw * nd];
    let mut oldest = vec![1u64; nw * nd];
    let m = spec.mix;
    let cum = {
        let t = m.new_order + m.payment + m.order_status + m.delivery + m.stock_level;
        let a = m.new_order / t;
        let b = a + m.payment / t;
        let c = b + m.order_status / t;
        let d = c + m.delivery / t;
        [a, b, c, d]
    };
    let mut reqs: Vec<Request> = Vec::with_capacity(spec.requests as usize);
    let mut last = LastWrite::Sparse(Default::default());
    let cap = spec.requests as usize;
    while reqs.len() < cap {
        let u: f64 = rng.random();
        let w = rng.random_range(0..nw);
        let wid = w as u32 + 1;
        if u < cum[0] {
            // NewOrder
            let d = rng.random_range(0..nd);
            let slot = w * nd + d;
            let o = next_o[slot];
            next_o[slot] += 1;
            let v = splitmix64(vseed ^ (reqs.len() as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
            last.push(&mut reqs, OpKind::Insert, tpcc_key(wid, d as u32 + 1, o), v);
        } else if u < cum[1] {
            // Payment: no NEW_ORDER access.
        } else if u < cum[2] {
            // Order-Status: the customer's most recent order.
            let d = rng.random_range(0..nd);
            let next = next_o[w * nd + d];
            let lo = next
                .saturating_sub(u64::from(spec.customers_per_district))
                .max(1);
            let o = if next > lo {
                rng.random_range(lo..next)
            } else {
                lo
            };
            last.push(&mut reqs, OpKind::Lookup, tpcc_key(wid, d as u32 + 1, o), 0);
        } else if u < cum[3] {
            // Delivery: locate the batch, then deliver the oldest order of each district.
            let o = oldest[w * nd];
            last.push(&mut reqs, OpKind::Lookup, tpcc_key(wid, 1, o), 0);
            for d in 0..nd {
                if reqs.len() >= cap {
                    break;
                }
                let slot = w * nd + d;
                if oldest[slot] < next_o[slot] {
                    let o = oldest[slot];
                    oldest[slot] += 1;
                    last.push(&mut reqs, OpKind::Delete, tpcc_key(wid, d as u32 + 1, o), 0);
                }
            }
        } else {
            // Stock-Level: no NEW_ORDER access.
        }
    }
    reqs.truncate(cap);
    Ok(Workload {
        generator: Generator::Gt,
        spec: WorkloadSpec::Gt(spec.clone()),
        seed,
        preload: Preload::Tpcc {
            warehouses: spec.warehouses,
            districts: spec.districts,
            orders_per_district: pre,
            seed,
        },
        requests: reqs,
        k_l: 0,
        k_u: 0,
        converted_deletes: 0,
    })
}
