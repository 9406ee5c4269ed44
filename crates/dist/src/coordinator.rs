//! The coordinator: an [`ArraySession`] whose DataFusion context carries
//! datafusion-distributed's planner, the workers of the array's manifest and the
//! handlers that pin each device's scan to its worker.
//!
//! * The worker resolver lists one URL per device (the device's worker, so a worker of
//!   two devices appears twice): the engine gives a stage at most as many tasks as URLs,
//!   and an array scan wants one task per device.
//! * Desired task count: an [`ArrayScanExec`] wants one task per device; scale-up
//!   replaces it by a `DistributedLeafExec` whose task `i` variant is the
//!   [`MemberScanExec`] of device `i`; routing sends task `i` of a stage holding array
//!   scans to device `i`'s worker. Stages above (final aggregates, joins, sorts) are
//!   placed by the engine (round robin over the same URLs) or kept in the coordinator.
//! * Every request carries the shared token (`x-csd-token`, a passthrough header).
//! * After a query, the task metrics are folded into the plan
//!   (`rewrite_distributed_plan_with_metrics`) and each scan's records come back from
//!   the member scans' labelled metric; a plan whose array scans would run in the
//!   coordinator (not distributed) is refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use csd_sql::array::{Network, NetworkFigures};
use csd_sql::datafusion::common::config::ConfigOptions;
use csd_sql::datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use csd_sql::datafusion::common::{DataFusionError, Result};
use csd_sql::datafusion::execution::{SessionStateBuilder, TaskContext};
use csd_sql::datafusion::physical_expr::PhysicalExpr;
use csd_sql::datafusion::physical_optimizer::PhysicalOptimizerRule;
use csd_sql::datafusion::physical_plan::metrics::MetricValue;
use csd_sql::datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use csd_sql::datafusion::prelude::SessionContext;
use csd_sql::{
    Answer, ArrayAnswer, ArrayRunner, ArrayScanExec, ArraySession, Manifest, ScanRecord, SqlError,
};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExt, DistributedLeafExec,
    DistributedMetricsFormat, NetworkBoundaryExt, RouteTasksEvent, RouteTasksEventResponse,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse, SessionStateBuilderExt, WorkerResolver,
    rewrite_distributed_plan_with_metrics,
};
use url::Url;

use crate::member::{MemberDesc, MemberScanExec, RECORDS_LABEL, RECORDS_METRIC};
use crate::wire::WireScan;
use crate::{DistError, TOKEN_HEADER};

/// An [`ArrayScanExec`] as one leaf for the distributed planner, which splits only leaf
/// nodes into tasks (the array scan's device scans are its children). Never executed:
/// the engine replaces it by one [`MemberScanExec`] per task.
#[derive(Debug)]
struct ArrayLeafExec {
    array: Arc<dyn ExecutionPlan>,
}

impl ArrayLeafExec {
    fn scan(&self) -> Option<&ArrayScanExec> {
        self.array.downcast_ref::<ArrayScanExec>()
    }
}

impl DisplayAs for ArrayLeafExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.array.fmt_as(t, f)
    }
}

impl ExecutionPlan for ArrayLeafExec {
    fn name(&self) -> &'static str {
        "ArrayLeafExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.array.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        Err(DataFusionError::Execution(
            "a distributed array's scans run on its workers, not in the coordinator".into(),
        ))
    }
}

/// Wraps every [`ArrayScanExec`] in an [`ArrayLeafExec`] (the last physical rule, after
/// the device rules pushed what they push).
#[derive(Debug)]
struct ArrayLeaves;

impl PhysicalOptimizerRule for ArrayLeaves {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|n| {
            if n.downcast_ref::<ArrayScanExec>().is_some() {
                let leaf: Arc<dyn ExecutionPlan> = Arc::new(ArrayLeafExec { array: n });
                return Ok(Transformed::new(leaf, true, TreeNodeRecursion::Jump));
            }
            Ok(Transformed::no(n))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "ArrayLeaves"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The array's devices and their workers, as the coordinator's handlers see them.
#[derive(Debug)]
struct Cluster {
    /// The array's id, for messages.
    array: String,
    /// Device image names, array order.
    devices: Vec<String>,
    /// Each device's worker.
    urls: Vec<Url>,
    /// Per table, rows / pages per device and layout.
    tables: Vec<csd_sql::Placement>,
    /// The modeled network between the workers and the coordinator.
    network: Network,
}

/// The engine's worker list: one URL per device (see the [module docs](self)).
struct Resolver(Arc<Cluster>);

impl WorkerResolver for Resolver {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(self.0.urls.clone())
    }
}

impl Cluster {
    /// The member scans of `a`, one per device.
    fn members(&self, a: &ArrayScanExec) -> Result<Vec<Arc<dyn ExecutionPlan>>> {
        let request = a
            .request()
            .ok_or_else(|| DataFusionError::Plan("an array scan without a table request".into()))?;
        let placement = self
            .tables
            .iter()
            .find(|p| csd_host::same_name(&p.name, &request.table))
            .ok_or_else(|| {
                DataFusionError::Plan(format!("table {} is not in the manifest", request.table))
            })?;
        a.devices()
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                let desc = MemberDesc {
                    array: self.array.clone(),
                    device: self.devices[d].clone(),
                    index: d,
                    worker: self.urls[d].to_string(),
                    table: request.table.clone(),
                    rows: placement.device_rows[d],
                    pages: placement.device_pages[d],
                    layout: placement.layout.to_string(),
                };
                Ok(Arc::new(MemberScanExec::of_array(a, i, desc)?) as Arc<dyn ExecutionPlan>)
            })
            .collect()
    }

    /// Appends to an error's message which worker serves which devices, for every
    /// worker the message names or, when it names none (a connection that broke
    /// mid-query says no address), for every worker that no longer accepts connections.
    fn name_workers(&self, message: &str) -> String {
        let mut by_worker: BTreeMap<&Url, Vec<&str>> = BTreeMap::new();
        for (u, d) in self.urls.iter().zip(&self.devices) {
            by_worker.entry(u).or_default().push(d);
        }
        let describe = |u: &Url, d: &[&str], why: &str| {
            format!(
                "worker {} (devices {}{why})",
                u.as_str().trim_end_matches('/'),
                d.join(", ")
            )
        };
        let mut named: Vec<String> = by_worker
            .iter()
            .filter(|(u, _)| {
                let bare = u.as_str().trim_end_matches('/');
                let host_port = bare.trim_start_matches("http://");
                message.contains(bare) || message.contains(host_port)
            })
            .map(|(u, d)| describe(u, d, ""))
            .collect();
        if named.is_empty() {
            named = by_worker
                .iter()
                .filter_map(|(u, d)| {
                    unreachable(u).map(|e| describe(u, d, &format!("; unreachable: {e}")))
                })
                .collect();
        }
        if named.is_empty() {
            message.to_string()
        } else {
            format!(
                "{message}\n  failed: {} of array {}; no image was changed, the other \
                 workers keep serving; restart the worker and run the query again",
                named.join(", "),
                self.array
            )
        }
    }
}

/// Whether an engine error is a broken or refused connection between processes.
fn is_transport(message: &str) -> bool {
    [
        "tcp connect error",
        "h2 protocol error",
        "transport error",
        "broken pipe",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// Why `url`'s worker does not accept a connection now (`None`: it does).
fn unreachable(url: &Url) -> Option<String> {
    let addrs = match url.socket_addrs(|| None) {
        Ok(a) => a,
        Err(e) => return Some(e.to_string()),
    };
    let mut last = None;
    for a in addrs {
        match std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(1)) {
            Ok(_) => return None,
            Err(e) => last = Some(e.to_string()),
        }
    }
    Some(last.unwrap_or_else(|| "the address resolves to nothing".into()))
}

/// Turns `session` (over the array described by `manifest`, whose directory name is
/// `array`) into the coordinator of a distributed array: its queries run on the
/// manifest's workers, each request carrying `token` when given.
pub fn distribute(
    session: &mut ArraySession,
    manifest: &Manifest,
    array: &str,
    token: Option<&str>,
) -> Result<(), DistError> {
    manifest.check().map_err(DistError::Manifest)?;
    quiet_cancelled_task_panics();
    if manifest.workers.is_empty() {
        return Err(DistError::Manifest(
            "workers: the manifest lists no worker (one `http://HOST:PORT` per device)".into(),
        ));
    }
    let urls = manifest
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            Url::parse(w).map_err(|e| DistError::Manifest(format!("workers[{i}] = `{w}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cluster = Arc::new(Cluster {
        array: array.to_string(),
        devices: manifest.devices.clone(),
        urls,
        tables: manifest.tables.clone(),
        network: manifest.network.unwrap_or_default(),
    });
    let mut headers = http::HeaderMap::new();
    if let Some(t) = token {
        let v = http::HeaderValue::from_str(t)
            .map_err(|_| DistError::Token("the token is not a valid header value".into()))?;
        headers.insert(TOKEN_HEADER, v);
    }
    let c = cluster.clone();
    let configure = move |b: SessionStateBuilder| -> SessionStateBuilder {
        let n = c.devices.len();
        let scale = c.clone();
        let route = c.clone();
        let b = b
            .with_physical_optimizer_rule(Arc::new(ArrayLeaves))
            .with_distributed_worker_resolver(Resolver(c.clone()))
            .with_distributed_planner()
            .with_distributed_user_codec(crate::member::MemberCodec)
            .with_distributed_desired_task_count_handler(
                move |ev: DesiredTaskCountEvent| -> Option<Result<DesiredTaskCountEventResponse>> {
                    ev.plan.downcast_ref::<ArrayLeafExec>()?;
                    Some(Ok(DesiredTaskCountEventResponse::desired(n)))
                },
            )
            .with_distributed_scale_up_leaf_node_handler(
                move |ev: ScaleUpLeafNodeEvent| -> Option<Result<ScaleUpLeafNodeEventResponse>> {
                    let a = ev.plan.downcast_ref::<ArrayLeafExec>()?.scan()?;
                    if ev.task_count != a.scans().len() {
                        return Some(Err(DataFusionError::Plan(format!(
                            "the engine gave an array scan {} tasks; it has {} devices, one \
                             task each",
                            ev.task_count,
                            a.scans().len()
                        ))));
                    }
                    Some(scale.members(a).and_then(|m| {
                        DistributedLeafExec::try_new(ev.plan.clone(), m)
                            .map(|l| ScaleUpLeafNodeEventResponse::new(Arc::new(l)))
                    }))
                },
            )
            .with_distributed_route_tasks_handler(
                move |ev: RouteTasksEvent| -> Option<Result<RouteTasksEventResponse>> {
                    let mut devices = None;
                    let _ = ev.plan.apply(|node| {
                        if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>()
                            && let Some(a) = leaf
                                .original()
                                .downcast_ref::<ArrayLeafExec>()
                                .and_then(ArrayLeafExec::scan)
                        {
                            devices = Some(a.devices().to_vec());
                            return Ok(TreeNodeRecursion::Stop);
                        }
                        Ok(TreeNodeRecursion::Continue)
                    });
                    let devices = devices?;
                    if devices.len() != ev.task_count {
                        return Some(Err(DataFusionError::Plan(format!(
                            "{} tasks for an array scan of {} devices",
                            ev.task_count,
                            devices.len()
                        ))));
                    }
                    Some(Ok(RouteTasksEventResponse::new(
                        devices.iter().map(|&d| route.urls[d].clone()).collect(),
                    )))
                },
            );
        let mut b = b;
        // Only the reserved `x-datafusion-distributed-config-` prefix is refused.
        if let Err(e) = b.set_distributed_passthrough_headers(headers) {
            tracing::error!("the token header was refused: {e}");
        }
        b
    };
    session
        .distribute(configure, Arc::new(Runner { cluster }))
        .map_err(DistError::Sql)
}

/// Runs a distributed array's queries: see the [module docs](self).
struct Runner {
    cluster: Arc<Cluster>,
}

/// Refuses a plan that would scan an array in the coordinator (outside every network
/// boundary).
fn check_distributed(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    fn walk(p: &Arc<dyn ExecutionPlan>) -> Result<()> {
        if p.is_network_boundary() {
            return Ok(());
        }
        if p.downcast_ref::<ArrayScanExec>().is_some()
            || p.downcast_ref::<ArrayLeafExec>().is_some()
            || p.downcast_ref::<MemberScanExec>().is_some()
            || p.downcast_ref::<DistributedLeafExec>().is_some()
        {
            return Err(DataFusionError::Plan(
                "the engine kept this query's device scans in the coordinator; a \
                 distributed array's scans run on its workers"
                    .into(),
            ));
        }
        p.children().into_iter().try_for_each(walk)
    }
    walk(plan)
}

/// A worker's refusal of the token (gRPC `UNAUTHENTICATED`) in plain words; other
/// messages unchanged.
fn refusal(message: &str) -> String {
    const GRPC: &str = "The request does not have valid authentication credentials";
    if !message.contains(GRPC) {
        return message.to_string();
    }
    let why = if message.contains("a wrong token") {
        "the token this coordinator sent is not the worker's"
    } else {
        "this coordinator sent no token"
    };
    format!(
        "a worker refused the query: {why}; set {} to the workers' token (the refusal is \
         logged on the worker)",
        crate::TOKEN_ENV
    )
}

/// Keeps the engine's "task N was cancelled" panic quiet: after a query fails (a
/// worker refused it, or died), datafusion-distributed 4.0's coordinator drains its
/// background tasks with `JoinSet::join_all`, which panics on a task the failure
/// cancelled. The query's error is reported as usual; the panic of that background task
/// becomes one debug log line instead of a backtrace on stderr. Every other panic goes to
/// the hook that was installed before.
fn quiet_cancelled_task_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            let from_join_set = info
                .location()
                .is_some_and(|l| l.file().contains("join_set.rs"));
            if from_join_set && text.starts_with("task ") && text.ends_with(" was cancelled") {
                tracing::debug!("after a failed query, a background task of the engine: {text}");
                return;
            }
            previous(info);
        }));
    });
}

/// Every member scan's output and records the plan's (rewritten) metrics carry.
fn records(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<WireScan>> {
    let mut out = Vec::new();
    let mut bad = None;
    let _ = plan.apply(|node| {
        if let Some(m) = node.metrics() {
            for metric in m.iter() {
                if !matches!(metric.value(), MetricValue::Count { name, .. } if name == RECORDS_METRIC)
                {
                    continue;
                }
                for l in metric.labels() {
                    if l.name() == RECORDS_LABEL {
                        match serde_json::from_str::<Vec<WireScan>>(l.value()) {
                            Ok(v) => out.extend(v),
                            Err(e) => bad = Some(e.to_string()),
                        }
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    match bad {
        Some(e) => Err(DataFusionError::Execution(format!(
            "a worker's scan records: {e}"
        ))),
        None => Ok(out),
    }
}

impl ArrayRunner for Runner {
    fn run(
        &self,
        ctx: &SessionContext,
        runtime: &tokio::runtime::Runtime,
        sql: &str,
        tables: &[String],
        devices: usize,
    ) -> Result<ArrayAnswer, SqlError> {
        let wall = std::time::Instant::now();
        let attempt = || {
            runtime.block_on(async {
                let df = ctx.sql(sql).await?;
                let plan = df.create_physical_plan().await?;
                check_distributed(&plan)?;
                let batches =
                    csd_sql::datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx())
                        .await?;
                let plan =
                    rewrite_distributed_plan_with_metrics(plan, DistributedMetricsFormat::PerTask)
                        .await?;
                Ok::<_, DataFusionError>((batches, plan))
            })
        };
        let mut out = attempt();
        // A worker restarted on its address: the other workers' connections to its
        // previous process fail the first query that uses them ("tcp connect error"
        // relayed from a worker). A query writes nothing, so when every worker accepts
        // connections again it runs once more.
        if let Err(e) = &out
            && is_transport(&e.to_string())
            && self.cluster.urls.iter().all(|u| unreachable(u).is_none())
        {
            tracing::info!("a worker connection failed ({e}); every worker is up: running again");
            out = attempt();
        }
        let wall_s = wall.elapsed().as_secs_f64();
        let (batches, plan) = out.map_err(|e| {
            let mut message = self.cluster.name_workers(&refusal(&e.to_string()));
            if message.contains("not found") && message.contains("table") {
                message.push_str(&format!("; tables of the array: {}", tables.join(", ")));
            }
            SqlError::Query { message, source: e }
        })?;
        let mut per_device: Vec<Vec<ScanRecord>> = vec![Vec::new(); devices];
        let mut network = NetworkFigures {
            network: self.cluster.network,
            workers: self.cluster.urls.iter().map(Url::to_string).collect(),
            bytes: vec![0; devices],
            rows: vec![0; devices],
        };
        let query_error = |e: DataFusionError| SqlError::Query {
            message: e.to_string(),
            source: e,
        };
        for scan in records(&plan).map_err(query_error)? {
            let d = scan.device;
            if d >= devices {
                return Err(query_error(DataFusionError::Execution(format!(
                    "worker {} reported a scan of device {d}; the array has {devices}",
                    scan.worker
                ))));
            }
            network.bytes[d] += scan.output_bytes;
            network.rows[d] += scan.output_rows;
            for r in &scan.records {
                let rec = r
                    .record()
                    .map_err(|e| query_error(DataFusionError::Execution(e.to_string())))?;
                per_device[d].push(rec);
            }
        }
        let answer = Answer {
            schema: plan.schema(),
            batches,
            explained: datafusion_distributed::display_plan_ascii(plan.as_ref(), true),
            scans: per_device.iter().flatten().cloned().collect(),
            wall_s,
            dml: None,
        };
        Ok(ArrayAnswer {
            answer,
            devices: per_device,
            network: Some(network),
        })
    }
}
