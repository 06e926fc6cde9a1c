//! CDI: DataVolumes (`cdi.kubevirt.io/v1beta1`) with `blank`, `pvc` (clone, also across
//! namespaces) and `http` sources become a PVC of the same name, owned by the DataVolume, whose
//! `disk.img` the sim populates, reporting status the way CDI does.
//!
//! One worker task per DataVolume runs *observe → plan → act* against the watch caches
//! (DataVolumes, PVCs, Pods) and re-runs on every change. Everything it needs to resume is in
//! the cluster or on disk, so a restarted sim converges:
//! - the PVC is named after the DataVolume and carries its controller reference, so a retry
//!   finds it instead of creating a second one;
//! - `disk.img` is written as a temporary file and renamed into place only when complete, so its
//!   presence *is* the success record; a half-written temporary file is simply redone;
//! - `Succeeded` and `Failed` are terminal, as in CDI.
//!
//! Binding is not done here: the PVC is bound by `sim::volumes` and the real PV controller, and
//! population waits for `Bound` like CDI's importer pods do.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::quantity::parse_quantity;
use super::storage::{self, ClaimPropertySet};
use super::volumes::{ClaimVolume, VolumeMode, VolumeStore};
use super::{Error, SimContext};

pub const GROUP: &str = "cdi.kubevirt.io";
pub const VERSION: &str = "v1beta1";
pub const KIND: &str = "DataVolume";

/// Condition reasons and messages, CDI's own where CDI has one.
pub mod reason {
    /// Any import or clone error (CDI: the importer pod's termination reason).
    pub const ERROR: &str = "Error";
    pub const CLONE_VALIDATION_FAILED: &str = "CloneValidationFailed";
    pub const CLONE_SOURCE_IN_USE: &str = "CloneSourceInUse";
    pub const CLONE_WITHOUT_SOURCE: &str = "CloneWithoutSource";
    /// Sim-specific: the source PVC has no complete disk yet (CDI waits silently).
    pub const CLONE_SOURCE_NOT_POPULATED: &str = "CloneSourceNotPopulated";
    pub const RESOURCE_EXISTS: &str = "ErrResourceExists";
    /// Sim-specific: a DataVolume source kind the simulation does not play.
    pub const UNSUPPORTED_SOURCE: &str = "UnsupportedSource";
    pub const POD_RUNNING: &str = "Pod is running";
    pub const COMPLETED: &str = "Completed";
    pub const TRANSFER_RUNNING: &str = "TransferRunning";
    pub const BOUND: &str = "Bound";
    pub const PENDING: &str = "Pending";
    pub const NOT_FOUND: &str = "NotFound";
    /// The PVC CDI would render is not valid (no modes to be had from the StorageProfile).
    pub const CLAIM_NOT_VALID: &str = "ErrClaimNotValid";
}

/// CDI's annotations on the PVCs it creates (the ones the sim sets).
pub mod annotation {
    pub const CREATED_FOR: &str = "cdi.kubevirt.io/createdForDataVolume";
    pub const CONTENT_TYPE: &str = "cdi.kubevirt.io/storage.contentType";
    pub const IMPORT_SOURCE: &str = "cdi.kubevirt.io/storage.import.source";
    pub const IMPORT_ENDPOINT: &str = "cdi.kubevirt.io/storage.import.endpoint";
    pub const CLONE_REQUEST: &str = "cdi.kubevirt.io/cloneRequest";
}

/// How long a waiting worker sleeps without any event before it looks again anyway.
const RECHECK: Duration = Duration::from_secs(5);
/// Temporary names inside a volume directory; `disk.img` appears only by rename.
const PARTIAL_FILE: &str = ".disk.img.partial";
const DOWNLOAD_FILE: &str = ".disk.img.download";
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The DataVolume kind, for `Api::<DynamicObject>` (the sim reads DataVolumes untyped so that
/// one malformed object cannot break the watch of all others).
pub fn data_volume_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, VERSION, KIND))
}

// ---------------------------------------------------------------------------------------------
// What the sim reads of a DataVolume

/// The part of `DataVolume.spec` the sim reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSpec {
    /// Kept raw so that an unsupported source kind can be named in the failure.
    pub source: Option<BTreeMap<String, Value>>,
    pub storage: Option<StorageSpec>,
    pub pvc: Option<StorageSpec>,
}

/// `spec.storage` / `spec.pvc` (a subset of a PVC spec).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    pub access_modes: Option<Vec<String>>,
    pub resources: Option<StorageResources>,
    pub storage_class_name: Option<String>,
    pub volume_mode: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct StorageResources {
    /// Values are quantities; kept raw because YAML may give `storage: 1073741824` as a number.
    pub requests: Option<BTreeMap<String, Value>>,
}

impl DataVolumeSpec {
    /// `spec.storage` wins over the older `spec.pvc`, as in CDI.
    fn claim_spec(&self) -> Option<&StorageSpec> {
        self.storage.as_ref().or(self.pvc.as_ref())
    }

    /// The requested size as written (a quantity string).
    fn requested_size(&self) -> Option<String> {
        let value = self
            .claim_spec()?
            .resources
            .as_ref()?
            .requests
            .as_ref()?
            .get("storage")?;
        match value {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// Where a DataVolume's content comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    Blank,
    Pvc { namespace: String, name: String },
    Http { url: String },
}

impl Source {
    fn is_clone(&self) -> bool {
        matches!(self, Source::Pvc { .. })
    }
}

/// A DataVolume the way the sim needs it.
#[derive(Clone, Debug)]
struct DataVolume {
    namespace: String,
    name: String,
    uid: String,
    labels: BTreeMap<String, String>,
    deleting: bool,
    spec: Result<DataVolumeSpec, String>,
    status: Option<Value>,
}

impl DataVolume {
    fn from_object(obj: &DynamicObject) -> Option<Self> {
        let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
        Some(Self {
            namespace: obj.namespace()?,
            name: obj.name_any(),
            uid: obj.uid()?,
            labels: obj.labels().clone(),
            deleting: obj.metadata.deletion_timestamp.is_some(),
            spec: serde_json::from_value(spec).map_err(|e| e.to_string()),
            status: obj.data.get("status").cloned(),
        })
    }

    fn phase(&self) -> Option<Phase> {
        phase_of(self.status.as_ref())
    }
}

fn phase_of(status: Option<&Value>) -> Option<Phase> {
    status?.get("phase")?.as_str().and_then(Phase::parse)
}

/// The one source of a DataVolume; sources other than blank/pvc/http fail loudly.
fn parse_source(
    dv_namespace: &str,
    source: Option<&BTreeMap<String, Value>>,
) -> Result<Source, Failure> {
    let Some(source) = source.filter(|s| !s.is_empty()) else {
        return Err(Failure::new(
            reason::UNSUPPORTED_SOURCE,
            "spec.source is missing; the simulation plays blank, pvc and http sources, not \
             sourceRef",
        ));
    };
    if source.len() > 1 {
        let kinds: Vec<&str> = source.keys().map(String::as_str).collect();
        return Err(Failure::new(
            reason::ERROR,
            format!("spec.source must have exactly one kind, got {kinds:?}"),
        ));
    }
    let Some((kind, body)) = source.iter().next() else {
        return Err(Failure::new(reason::ERROR, "spec.source is empty"));
    };
    let text = |field: &str| body.get(field).and_then(Value::as_str).map(str::to_owned);
    match kind.as_str() {
        "blank" => Ok(Source::Blank),
        "pvc" => match text("name") {
            Some(name) => Ok(Source::Pvc {
                namespace: text("namespace")
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| dv_namespace.to_owned()),
                name,
            }),
            None => Err(Failure::new(
                reason::ERROR,
                "spec.source.pvc.name is missing",
            )),
        },
        "http" => match text("url") {
            Some(url) => Ok(Source::Http { url }),
            None => Err(Failure::new(
                reason::ERROR,
                "spec.source.http.url is missing",
            )),
        },
        other => Err(Failure::new(
            reason::UNSUPPORTED_SOURCE,
            format!(
                "source {other:?} is not simulated; the simulation plays blank, pvc and http sources"
            ),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Status: phases, conditions, progress

/// `DataVolume.status.phase` values the sim reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    ImportScheduled,
    ImportInProgress,
    CloneScheduled,
    CloneInProgress,
    Succeeded,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::ImportScheduled => "ImportScheduled",
            Phase::ImportInProgress => "ImportInProgress",
            Phase::CloneScheduled => "CloneScheduled",
            Phase::CloneInProgress => "CloneInProgress",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    pub fn parse(text: &str) -> Option<Phase> {
        [
            Phase::Pending,
            Phase::ImportScheduled,
            Phase::ImportInProgress,
            Phase::CloneScheduled,
            Phase::CloneInProgress,
            Phase::Succeeded,
            Phase::Failed,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    fn scheduled(source: &Source) -> Phase {
        if source.is_clone() {
            Phase::CloneScheduled
        } else {
            Phase::ImportScheduled
        }
    }

    fn in_progress(source: &Source) -> Phase {
        if source.is_clone() {
            Phase::CloneInProgress
        } else {
            Phase::ImportInProgress
        }
    }
}

/// One condition without its timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cond {
    status: bool,
    reason: String,
    message: String,
}

impl Cond {
    fn new(status: bool, reason: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// What a DataVolume's status should say (the `Ready` condition follows from the phase).
#[derive(Clone, Debug, PartialEq, Eq)]
struct View {
    phase: Phase,
    /// `None` leaves the current progress as it is (a failure keeps the last value, like CDI).
    progress: Option<String>,
    claim_name: Option<String>,
    bound: Cond,
    running: Cond,
}

impl View {
    fn ready(&self) -> Cond {
        match self.phase {
            Phase::Succeeded => Cond::new(true, "", ""),
            Phase::ImportInProgress | Phase::CloneInProgress => {
                Cond::new(false, reason::TRANSFER_RUNNING, "")
            }
            _ => Cond::new(false, "", ""),
        }
    }

    fn conditions(&self) -> [(&'static str, Cond); 3] {
        [
            ("Bound", self.bound.clone()),
            ("Ready", self.ready()),
            ("Running", self.running.clone()),
        ]
    }
}

/// Whether `status` already says what `view` says (timestamps aside): nothing to write.
fn already_shows(view: &View, status: Option<&Value>) -> bool {
    let Some(status) = status else { return false };
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let conditions = status.get("conditions").and_then(Value::as_array);
    let shows = |kind: &str, want: &Cond| {
        conditions
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
            })
            .is_some_and(|c| {
                text(c, "status").as_deref() == Some(if want.status { "True" } else { "False" })
                    && text(c, "reason").unwrap_or_default() == want.reason
                    && text(c, "message").unwrap_or_default() == want.message
            })
    };
    phase_of(Some(status)) == Some(view.phase)
        && (view.progress.is_none() || text(status, "progress") == view.progress)
        && text(status, "claimName") == view.claim_name
        && view.conditions().iter().all(|(kind, c)| shows(kind, c))
}

/// The status object for `view`, keeping a condition's `lastTransitionTime` while its status
/// does not change and its `lastHeartbeatTime` while nothing about it changes (as CDI does).
fn status_json(view: &View, previous: Option<&Value>, now: &Value) -> Value {
    let old = |kind: &str| {
        previous
            .and_then(|p| p.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
            })
            .cloned()
    };
    let conditions: Vec<Value> = view
        .conditions()
        .into_iter()
        .map(|(kind, cond)| {
            let status = if cond.status { "True" } else { "False" };
            let before = old(kind);
            let field = |key: &str| before.as_ref().and_then(|b| b.get(key)).cloned();
            let same_status = field("status").as_ref().and_then(Value::as_str) == Some(status);
            let unchanged = same_status
                && field("reason")
                    .as_ref()
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    == cond.reason
                && field("message")
                    .as_ref()
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    == cond.message;
            let keep =
                |key: &str, keep: bool| field(key).filter(|_| keep).unwrap_or_else(|| now.clone());
            json!({
                "type": kind,
                "status": status,
                "reason": cond.reason,
                "message": cond.message,
                "lastTransitionTime": keep("lastTransitionTime", same_status),
                "lastHeartbeatTime": keep("lastHeartbeatTime", unchanged),
            })
        })
        .collect();
    let mut status = json!({
        "phase": view.phase.as_str(),
        "conditions": conditions,
        "restartCount": 0,
    });
    if let Some(progress) = &view.progress {
        status["progress"] = json!(progress);
    }
    if let Some(claim) = &view.claim_name {
        status["claimName"] = json!(claim);
    }
    status
}

/// `N.NN%` of a transfer `elapsed` into `total`, held below 100 until it is really done.
fn progress_text(elapsed: Duration, total: Duration) -> String {
    let fraction = if total.is_zero() {
        1.0
    } else {
        elapsed.as_secs_f64() / total.as_secs_f64()
    };
    format!("{:.2}%", (fraction * 100.0).clamp(0.0, 99.99))
}

/// CDI's progress once a transfer is complete.
const PROGRESS_DONE: &str = "100.0%";
/// CDI's progress before a transfer starts.
const PROGRESS_NONE: &str = "N/A";

/// Simulated transfer time: `per_gib` for each GiB of allocated data, and at least `per_gib`.
fn transfer_time(per_gib: Duration, allocated_bytes: u64) -> Duration {
    per_gib.mul_f64((allocated_bytes as f64 / GIB).max(1.0))
}

/// How often progress is written: about twenty updates per transfer, within sane bounds.
fn progress_interval(total: Duration) -> Duration {
    (total / 20).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

/// A terminal failure as the DataVolume reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

impl Failure {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }

    /// An I/O or tool failure while processing data, worded like CDI's importer.
    fn processing(detail: impl std::fmt::Display) -> Self {
        Self::new(reason::ERROR, format!("Unable to process data: {detail}"))
    }

    fn connecting(detail: impl std::fmt::Display) -> Self {
        Self::new(
            reason::ERROR,
            format!("Unable to connect to http data source: {detail}"),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Observe → plan

/// The DataVolume's own PVC, as observed.
#[derive(Clone, Debug, PartialEq)]
enum Claim {
    Missing,
    /// A PVC of that name exists and is not controlled by this DataVolume.
    Foreign,
    Pending,
    Bound {
        uid: String,
        mode: VolumeMode,
        /// Capacity (else request) in bytes; `None` if it does not parse.
        bytes: Option<u64>,
        /// Population completed: `disk.img` exists (it only appears by rename), or a Block
        /// volume's population record does.
        disk_present: bool,
    },
}

/// What records a completed population of a Block volume, whose device exists from the start
/// (CDI records it in the PVC's annotations; the sim beside the device).
const POPULATED_FILE: &str = ".populated";

/// The access and volume modes of the PVC to create, or CDI's reason it cannot render one.
type Modes = Result<(Vec<String>, String), String>;

/// The source of a clone, as observed.
#[derive(Clone, Debug, PartialEq)]
enum CloneSource {
    Missing,
    NotPopulated(String),
    /// Non-terminated pods (`namespace/name`) that use the source PVC.
    InUse(Vec<String>),
    Ready {
        disk: PathBuf,
        len: u64,
        allocated: u64,
    },
}

/// Everything a plan depends on.
#[derive(Clone, Debug)]
struct Observation {
    name: String,
    source: Source,
    claim: Claim,
    /// For a clone: the state of its source; `None` otherwise.
    clone_source: Option<CloneSource>,
    /// The size for the PVC: the DataVolume's request, else (clones) the source's size.
    size: Option<String>,
    /// The modes its PVC gets.
    modes: Modes,
}

/// What to do next for one DataVolume.
#[derive(Clone, Debug, PartialEq)]
enum Plan {
    CreateClaim {
        size: String,
        access_modes: Vec<String>,
        volume_mode: String,
    },
    /// Show this status and wait for something to change.
    Wait(View),
    Populate(Job),
    Succeed(View),
    Fail(Failure),
}

/// The data work of a population.
#[derive(Clone, Debug, PartialEq)]
enum Job {
    Blank,
    Clone { disk: PathBuf, allocated: u64 },
    Http { url: String },
}

fn plan(obs: &Observation) -> Plan {
    let claim_name = Some(obs.name.clone());
    let view = |phase, bound: Cond, running: Cond| View {
        phase,
        progress: Some(PROGRESS_NONE.to_owned()),
        claim_name: claim_name.clone(),
        bound,
        running,
    };
    let without_source = |source_name: &str| {
        Cond::new(
            false,
            reason::CLONE_WITHOUT_SOURCE,
            format!("The source pvc {source_name} doesn't exist"),
        )
    };
    let idle = || Cond::new(false, "", "");
    match (&obs.claim, &obs.clone_source, &obs.source) {
        // Like CDI, a clone does not create its PVC before its source exists.
        (Claim::Missing, Some(CloneSource::Missing), Source::Pvc { name, .. }) => {
            Plan::Wait(View {
                claim_name: None,
                ..view(Phase::Pending, no_claim(), without_source(name))
            })
        }
        (Claim::Missing, _, _) => match (&obs.size, &obs.modes) {
            (Some(_), Err(why)) => Plan::Wait(View {
                claim_name: None,
                ..view(
                    Phase::Pending,
                    Cond::new(false, reason::CLAIM_NOT_VALID, why.clone()),
                    idle(),
                )
            }),
            (Some(size), Ok((access_modes, volume_mode))) => Plan::CreateClaim {
                size: size.clone(),
                access_modes: access_modes.clone(),
                volume_mode: volume_mode.clone(),
            },
            (None, _) => Plan::Fail(Failure::new(
                reason::ERROR,
                "missing storage size: set spec.storage.resources.requests.storage",
            )),
        },
        (Claim::Foreign, _, _) => Plan::Wait(View {
            claim_name: None,
            ..view(
                Phase::Pending,
                Cond::new(
                    false,
                    reason::RESOURCE_EXISTS,
                    format!(
                        "Resource \"{}\" already exists and is not managed by DataVolume",
                        obs.name
                    ),
                ),
                idle(),
            )
        }),
        (Claim::Pending, _, _) => Plan::Wait(view(
            Phase::Pending,
            Cond::new(false, reason::PENDING, format!("PVC {} Pending", obs.name)),
            idle(),
        )),
        (
            Claim::Bound {
                disk_present: true, ..
            },
            _,
            source,
        ) => Plan::Succeed(succeeded_view(&obs.name, source)),
        (Claim::Bound { bytes: None, .. }, _, _) => Plan::Fail(Failure::new(
            reason::ERROR,
            format!("the size of PVC {} is not a valid quantity", obs.name),
        )),
        (Claim::Bound { .. }, _, Source::Blank) => Plan::Populate(Job::Blank),
        (Claim::Bound { .. }, _, Source::Http { url }) => {
            Plan::Populate(Job::Http { url: url.clone() })
        }
        (
            Claim::Bound {
                bytes: Some(target),
                ..
            },
            clone_source,
            Source::Pvc { namespace, name },
        ) => {
            let waiting =
                |running| Plan::Wait(view(Phase::CloneScheduled, bound_cond(&obs.name), running));
            match clone_source {
                None | Some(CloneSource::Missing) => waiting(without_source(name)),
                Some(CloneSource::NotPopulated(why)) => waiting(Cond::new(
                    false,
                    reason::CLONE_SOURCE_NOT_POPULATED,
                    why.clone(),
                )),
                Some(CloneSource::InUse(pods)) => waiting(Cond::new(
                    false,
                    reason::CLONE_SOURCE_IN_USE,
                    pods.iter()
                        .map(|pod| format!("pod {pod} using PersistentVolumeClaim {name}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                )),
                Some(CloneSource::Ready { len, .. }) if len > target => Plan::Fail(Failure::new(
                    reason::CLONE_VALIDATION_FAILED,
                    format!(
                        "The clone doesn't meet the validation requirements: target resources \
                             requests storage size is smaller than the source ({target} < {len} \
                             bytes; source pvc {namespace}/{name})"
                    ),
                )),
                Some(CloneSource::Ready {
                    disk, allocated, ..
                }) => Plan::Populate(Job::Clone {
                    disk: disk.clone(),
                    allocated: *allocated,
                }),
            }
        }
    }
}

fn no_claim() -> Cond {
    Cond::new(false, reason::NOT_FOUND, "No PVC found")
}

fn bound_cond(claim: &str) -> Cond {
    Cond::new(true, reason::BOUND, format!("PVC {claim} Bound"))
}

/// Also what a restarted sim shows for a volume it finds complete.
fn succeeded_view(name: &str, source: &Source) -> View {
    View {
        phase: Phase::Succeeded,
        progress: Some(PROGRESS_DONE.to_owned()),
        claim_name: Some(name.to_owned()),
        bound: bound_cond(name),
        running: Cond::new(false, reason::COMPLETED, completed_message(source)),
    }
}

fn completed_message(source: &Source) -> &'static str {
    if source.is_clone() {
        "Clone Complete"
    } else {
        "Import Complete"
    }
}

/// The status of a population under way.
fn in_progress_view(name: &str, source: &Source, progress: String) -> View {
    View {
        phase: Phase::in_progress(source),
        progress: Some(progress),
        claim_name: Some(name.to_owned()),
        bound: bound_cond(name),
        running: Cond::new(true, reason::POD_RUNNING, ""),
    }
}

fn scheduled_view(name: &str, source: &Source) -> View {
    View {
        phase: Phase::scheduled(source),
        progress: Some(PROGRESS_NONE.to_owned()),
        claim_name: Some(name.to_owned()),
        bound: bound_cond(name),
        running: Cond::new(false, "", ""),
    }
}

fn failed_view(name: &str, claim: &Claim, failure: &Failure) -> View {
    let bound = match claim {
        Claim::Bound { .. } => bound_cond(name),
        Claim::Pending => Cond::new(false, reason::PENDING, format!("PVC {name} Pending")),
        Claim::Missing | Claim::Foreign => no_claim(),
    };
    View {
        phase: Phase::Failed,
        progress: None,
        claim_name: matches!(claim, Claim::Bound { .. } | Claim::Pending).then(|| name.to_owned()),
        bound,
        running: Cond::new(false, failure.reason, failure.message.clone()),
    }
}

/// The PVC CDI would create for `dv`: same name and namespace, controlled by the DataVolume,
/// CDI's labels and annotations, the DataVolume's labels passed through.
fn target_claim(
    dv: &DataVolume,
    spec: &DataVolumeSpec,
    source: &Source,
    size: &str,
    (access_modes, volume_mode): (Vec<String>, String),
) -> PersistentVolumeClaim {
    let claim_spec = spec.claim_spec().cloned().unwrap_or_default();
    let mut labels = dv.labels.clone();
    for (key, value) in [
        ("app", "containerized-data-importer"),
        ("app.kubernetes.io/component", "storage"),
        ("app.kubernetes.io/managed-by", "cdi-controller"),
    ] {
        labels.insert(key.to_owned(), value.to_owned());
    }
    let mut annotations = BTreeMap::from([
        (annotation::CREATED_FOR.to_owned(), dv.uid.clone()),
        (annotation::CONTENT_TYPE.to_owned(), "kubevirt".to_owned()),
    ]);
    match source {
        Source::Blank => {
            annotations.insert(annotation::IMPORT_SOURCE.to_owned(), "none".to_owned());
        }
        Source::Http { url } => {
            annotations.insert(annotation::IMPORT_SOURCE.to_owned(), "http".to_owned());
            annotations.insert(annotation::IMPORT_ENDPOINT.to_owned(), url.clone());
        }
        Source::Pvc { namespace, name } => {
            annotations.insert(
                annotation::CLONE_REQUEST.to_owned(),
                format!("{namespace}/{name}"),
            );
        }
    }
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(dv.name.clone()),
            namespace: Some(dv.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: format!("{GROUP}/{VERSION}"),
                kind: KIND.to_owned(),
                name: dv.name.clone(),
                uid: dv.uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(access_modes),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(size.to_owned()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: claim_spec.storage_class_name,
            volume_mode: Some(volume_mode),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// The DataVolume controlling a PVC, by name (same namespace).
fn controlling_data_volume(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == KIND && o.api_version.starts_with(GROUP))
        .map(|o| o.name.as_str())
}

fn claim_bytes(pvc: &PersistentVolumeClaim) -> Option<u64> {
    claim_size(pvc).as_deref().and_then(parse_quantity)
}

/// Capacity once bound, else the request.
fn claim_size(pvc: &PersistentVolumeClaim) -> Option<String> {
    let capacity = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    let request = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    capacity.or(request).map(|q| q.0.clone())
}

fn is_bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// Pods (`namespace/name`) that hold `claim` like CDI counts them: any pod in the claim's
/// namespace not yet Succeeded or Failed, whatever its node or readiness.
fn pods_using<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    namespace: &str,
    claim: &str,
) -> Vec<String> {
    let mut users: Vec<String> = pods
        .into_iter()
        .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace))
        .filter(|pod| {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .filter(|pod| {
            pod.spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .any(|v| {
                    v.persistent_volume_claim
                        .as_ref()
                        .is_some_and(|c| c.claim_name == claim)
                })
        })
        .map(|pod| format!("{namespace}/{}", pod.name_any()))
        .collect();
    users.sort();
    users
}

// ---------------------------------------------------------------------------------------------
// The controller

/// What every DataVolume worker reads.
struct Shared {
    client: Client,
    volumes: VolumeStore,
    import_time: Duration,
    clone_time: Duration,
    resource: ApiResource,
    data_volumes: Store<DynamicObject>,
    claims: Store<PersistentVolumeClaim>,
    pods: Store<Pod>,
    classes: Store<StorageClass>,
    /// StorageProfiles (cluster-scoped).
    profiles: Store<DynamicObject>,
    /// Bumped on every watch event; waiting workers re-plan when it moves.
    changes: tokio::sync::watch::Sender<u64>,
}

/// Which watch an event came from, and whether it completed a (re)list.
enum Fed {
    DataVolumes { listed: bool },
    Others { listed: Listed },
}

#[derive(Clone, Copy)]
enum Listed {
    No,
    Claims,
    Pods,
    Classes,
    Profiles,
}

fn listed<K>(event: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    matches!(event, Ok(watcher::Event::InitDone))
}

/// What an event of a secondary watch feeds: `cache` once its (re)list is complete.
fn other<K>(cache: Listed) -> impl FnMut(Result<watcher::Event<K>, watcher::Error>) -> Fed {
    move |event| Fed::Others {
        listed: if listed(&event) { cache } else { Listed::No },
    }
}

/// The CDI controller; runs until its watches end.
pub async fn run(ctx: Arc<SimContext>) -> Result<(), Error> {
    let client = ctx.client.clone();
    let resource = data_volume_resource();
    let dv_writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
    let (claims, claim_writer) = reflector::store::<PersistentVolumeClaim>();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let (classes, class_writer) = reflector::store::<StorageClass>();
    let profile_resource = storage::storage_profile_resource();
    let profile_writer = reflector::store::Writer::<DynamicObject>::new(profile_resource.clone());
    let shared = Arc::new(Shared {
        client: client.clone(),
        volumes: ctx.volumes.clone(),
        import_time: ctx.options.timings.import,
        clone_time: ctx.options.timings.clone,
        resource: resource.clone(),
        data_volumes: dv_writer.as_reader(),
        claims,
        pods,
        classes,
        profiles: profile_writer.as_reader(),
        changes: tokio::sync::watch::Sender::new(0),
    });
    let dv_api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let dv_events = reflector::reflector(dv_writer, watcher(dv_api, watcher::Config::default()))
        .default_backoff()
        .map(|e| Fed::DataVolumes { listed: listed(&e) });
    let claim_events = reflector::reflector(
        claim_writer,
        watcher(Api::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .map(other(Listed::Claims));
    let pod_events = reflector::reflector(
        pod_writer,
        watcher(Api::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .map(other(Listed::Pods));
    let class_events = reflector::reflector(
        class_writer,
        watcher(Api::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .map(other(Listed::Classes));
    let profile_events = reflector::reflector(
        profile_writer,
        watcher(
            Api::<DynamicObject>::all_with(client, &profile_resource),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(other(Listed::Profiles));
    let mut events = std::pin::pin!(futures::stream::select(
        futures::stream::select(dv_events, profile_events),
        futures::stream::select(
            class_events,
            futures::stream::select(claim_events, pod_events)
        )
    ));
    let mut workers = Workers::default();
    let mut seen = [false; 5];
    while let Some(fed) = events.next().await {
        let index = match fed {
            Fed::DataVolumes { listed: true } => Some(0),
            Fed::DataVolumes { listed: false } | Fed::Others { listed: Listed::No } => None,
            Fed::Others {
                listed: Listed::Claims,
            } => Some(1),
            Fed::Others {
                listed: Listed::Pods,
            } => Some(2),
            Fed::Others {
                listed: Listed::Classes,
            } => Some(3),
            Fed::Others {
                listed: Listed::Profiles,
            } => Some(4),
        };
        if let Some(index) = index {
            seen[index] = true;
        }
        shared.changes.send_modify(|n| *n = n.wrapping_add(1));
        // Planning on a half-listed cache could clone a source whose pods are not seen yet, or
        // render a PVC without its StorageProfile.
        if seen.iter().all(|s| *s) {
            workers.sync(&shared);
        }
    }
    Err(Error::Other("CDI watches ended".into()))
}

/// One task per DataVolume UID. A finished worker's entry stays until the DataVolume is gone,
/// so a terminal DataVolume is not picked up again before the cache shows its new status.
#[derive(Default)]
struct Workers {
    tasks: HashMap<String, tokio::task::JoinHandle<()>>,
}

impl Workers {
    fn sync(&mut self, shared: &Arc<Shared>) {
        let dvs: Vec<DataVolume> = shared
            .data_volumes
            .state()
            .iter()
            .filter_map(|obj| DataVolume::from_object(obj))
            .collect();
        self.tasks.retain(|uid, task| {
            let live = dvs.iter().any(|dv| &dv.uid == uid);
            if !live {
                task.abort();
            }
            live
        });
        for dv in dvs {
            if dv.deleting {
                // Deleted while populating: stop writing into a volume that is going away.
                if let Some(task) = self.tasks.get(&dv.uid) {
                    task.abort();
                }
                continue;
            }
            if self.tasks.contains_key(&dv.uid) || dv.phase().is_some_and(Phase::is_terminal) {
                continue;
            }
            let key = ObjectRef::new_with(&dv.name, shared.resource.clone()).within(&dv.namespace);
            let task = tokio::spawn(worker(shared.clone(), key, dv.uid.clone()));
            self.tasks.insert(dv.uid, task);
        }
    }
}

enum Next {
    Done,
    Wait,
}

async fn worker(shared: Arc<Shared>, key: ObjectRef<DynamicObject>, uid: String) {
    let mut changes = shared.changes.subscribe();
    let mut retry = Duration::from_millis(200);
    loop {
        changes.borrow_and_update();
        match step(&shared, &key, &uid).await {
            Ok(Next::Done) => return,
            Ok(Next::Wait) => {
                retry = Duration::from_millis(200);
                let _ = tokio::time::timeout(RECHECK, changes.changed()).await;
            }
            Err(err) => {
                tracing::warn!(datavolume = %key, "sim cdi: {err}; retrying in {retry:?}");
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// One observe → plan → act round for one DataVolume.
async fn step(shared: &Shared, key: &ObjectRef<DynamicObject>, uid: &str) -> Result<Next, Error> {
    let Some(dv) = shared
        .data_volumes
        .get(key)
        .and_then(|obj| DataVolume::from_object(&obj))
        .filter(|dv| dv.uid == uid && !dv.deleting)
    else {
        return Ok(Next::Done);
    };
    if dv.phase().is_some_and(Phase::is_terminal) {
        return Ok(Next::Done);
    }
    let (spec, source) = match parsed(&dv) {
        Ok(parsed) => parsed,
        Err(failure) => {
            write_status(
                shared,
                &dv,
                &failed_view(&dv.name, &Claim::Missing, &failure),
            )
            .await?;
            return Ok(Next::Done);
        }
    };
    let obs = observe(shared, &dv, &spec, source);
    match plan(&obs) {
        Plan::CreateClaim {
            size,
            access_modes,
            volume_mode,
        } => {
            let claim = target_claim(&dv, &spec, &obs.source, &size, (access_modes, volume_mode));
            create_claim(shared, &claim).await?;
            Ok(Next::Wait)
        }
        Plan::Wait(view) => {
            write_status(shared, &dv, &view).await?;
            Ok(Next::Wait)
        }
        Plan::Succeed(view) => {
            write_status(shared, &dv, &view).await?;
            Ok(Next::Done)
        }
        Plan::Fail(failure) => {
            write_status(shared, &dv, &failed_view(&dv.name, &obs.claim, &failure)).await?;
            Ok(Next::Done)
        }
        Plan::Populate(job) => {
            let Claim::Bound {
                uid: claim_uid,
                mode,
                bytes: Some(target),
                ..
            } = &obs.claim
            else {
                return Ok(Next::Wait);
            };
            let volume = shared.volumes.volume(claim_uid, *mode);
            let outcome = populate(shared, &dv, &obs.source, job, &volume, *target).await?;
            let view = match outcome {
                Ok(()) => succeeded_view(&dv.name, &obs.source),
                Err(failure) => failed_view(&dv.name, &obs.claim, &failure),
            };
            write_status(shared, &dv, &view).await?;
            Ok(Next::Done)
        }
    }
}

fn parsed(dv: &DataVolume) -> Result<(DataVolumeSpec, Source), Failure> {
    let spec = dv
        .spec
        .clone()
        .map_err(|e| Failure::new(reason::ERROR, format!("invalid spec: {e}")))?;
    let source = parse_source(&dv.namespace, spec.source.as_ref())?;
    Ok((spec, source))
}

fn observe(shared: &Shared, dv: &DataVolume, spec: &DataVolumeSpec, source: Source) -> Observation {
    let claim = shared
        .claims
        .get(&ObjectRef::new(&dv.name).within(&dv.namespace));
    let claim = match claim {
        None => Claim::Missing,
        Some(pvc) if controller_uid(&pvc.metadata) != Some(dv.uid.as_str()) => Claim::Foreign,
        Some(pvc) => match pvc.uid().filter(|_| is_bound(&pvc)) {
            None => Claim::Pending,
            Some(uid) => {
                let mode = VolumeMode::of(&pvc);
                let volume = shared.volumes.volume(&uid, mode);
                let record = match mode {
                    VolumeMode::Filesystem => volume.content(),
                    VolumeMode::Block => volume.dir.join(POPULATED_FILE),
                };
                Claim::Bound {
                    disk_present: record.exists(),
                    mode,
                    bytes: claim_bytes(&pvc),
                    uid,
                }
            }
        },
    };
    let (clone_source, source_size) = match &source {
        Source::Pvc { namespace, name } => {
            let pvc = shared.claims.get(&ObjectRef::new(name).within(namespace));
            let size = pvc.as_deref().and_then(claim_size);
            (Some(clone_source(shared, namespace, pvc.as_deref())), size)
        }
        _ => (None, None),
    };
    Observation {
        name: dv.name.clone(),
        size: spec.requested_size().or(source_size),
        source,
        claim,
        clone_source,
        modes: modes(shared, spec),
    }
}

/// The modes of the DataVolume's PVC: `spec.pvc` as written (the API server's defaults for what
/// it leaves out), `spec.storage` rendered against the StorageProfile of its class.
fn modes(shared: &Shared, spec: &DataVolumeSpec) -> Modes {
    let Some(storage) = spec.storage.as_ref() else {
        let pvc = spec.pvc.clone().unwrap_or_default();
        let access = pvc.access_modes.filter(|m| !m.is_empty());
        return Ok((
            access.unwrap_or_else(|| vec!["ReadWriteOnce".to_owned()]),
            pvc.volume_mode.unwrap_or_else(|| "Filesystem".to_owned()),
        ));
    };
    let classes = shared.classes.state();
    // A named class that does not exist is no class at all (CDI's `GetStorageClassByName`).
    let class = match storage
        .storage_class_name
        .as_deref()
        .filter(|c| !c.is_empty())
    {
        Some(name) => classes.iter().find(|c| c.name_any() == name).map(|c| &**c),
        None => storage::default_class(classes.iter().map(|c| &**c)),
    }
    .map(ResourceExt::name_any);
    let sets: Option<(String, Vec<ClaimPropertySet>)> = class.map(|name| {
        let key = ObjectRef::new_with(&name, storage::storage_profile_resource());
        let sets = shared
            .profiles
            .get(&key)
            .map(|p| storage::profile_sets(&p))
            .unwrap_or_default();
        (name, sets)
    });
    storage::render_modes(
        storage.access_modes.as_deref(),
        storage.volume_mode.as_deref(),
        sets.as_ref()
            .map(|(name, sets)| (name.as_str(), sets.as_slice())),
    )
}

fn clone_source(
    shared: &Shared,
    namespace: &str,
    pvc: Option<&PersistentVolumeClaim>,
) -> CloneSource {
    let Some(pvc) = pvc else {
        return CloneSource::Missing;
    };
    let name = pvc.name_any();
    if let Some(owner) = controlling_data_volume(&pvc.metadata) {
        let key = ObjectRef::new_with(owner, shared.resource.clone()).within(namespace);
        let owner_phase = shared
            .data_volumes
            .get(&key)
            .and_then(|obj| DataVolume::from_object(&obj))
            .and_then(|dv| dv.phase());
        if owner_phase != Some(Phase::Succeeded) {
            return CloneSource::NotPopulated(format!(
                "the source DataVolume {namespace}/{owner} has not succeeded yet"
            ));
        }
    }
    let Some(uid) = pvc.uid().filter(|_| is_bound(pvc)) else {
        return CloneSource::NotPopulated(format!(
            "the source PVC {namespace}/{name} is not bound"
        ));
    };
    let pods = shared.pods.state();
    let users = pods_using(pods.iter().map(|p| p.as_ref()), namespace, &name);
    if !users.is_empty() {
        return CloneSource::InUse(users);
    }
    let disk = shared.volumes.volume(&uid, VolumeMode::of(pvc)).content();
    match std::fs::metadata(&disk) {
        Ok(meta) => CloneSource::Ready {
            disk,
            len: meta.len(),
            allocated: meta.blocks() * 512,
        },
        Err(_) => CloneSource::NotPopulated(format!(
            "the source PVC {namespace}/{name} has no {}",
            super::volumes::DISK_FILE
        )),
    }
}

async fn create_claim(shared: &Shared, claim: &PersistentVolumeClaim) -> Result<(), Error> {
    let api = Api::<PersistentVolumeClaim>::namespaced(
        shared.client.clone(),
        claim.metadata.namespace.as_deref().unwrap_or_default(),
    );
    match api.create(&PostParams::default(), claim).await {
        Ok(_) => Ok(()),
        // Created by an earlier round whose event has not reached the cache: same name, no copy.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Writes `view` unless the status already shows it. The UID in the patch makes the API server
/// refuse it for a recreated DataVolume of the same name.
async fn write_status(shared: &Shared, dv: &DataVolume, view: &View) -> Result<(), Error> {
    if already_shows(view, dv.status.as_ref()) {
        return Ok(());
    }
    patch_status(shared, dv, view).await
}

async fn patch_status(shared: &Shared, dv: &DataVolume, view: &View) -> Result<(), Error> {
    let now = serde_json::to_value(Time(Timestamp::now()))
        .map_err(|e| Error::Other(format!("serializing a timestamp: {e}")))?;
    let patch = json!({
        "metadata": {"uid": dv.uid},
        "status": status_json(view, dv.status.as_ref(), &now),
    });
    let api = Api::<DynamicObject>::namespaced_with(
        shared.client.clone(),
        &dv.namespace,
        &shared.resource,
    );
    api.patch_status(&dv.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Population

/// Runs `job` into `dir`, reporting progress for at least the simulated transfer time, and
/// renames the result to `disk.img`. The outer error is the sim's own (API) trouble; the inner
/// one is the DataVolume's failure.
async fn populate(
    shared: &Shared,
    dv: &DataVolume,
    source: &Source,
    job: Job,
    volume: &ClaimVolume,
    target: u64,
) -> Result<Result<(), Failure>, Error> {
    let dir = volume.dir.as_path();
    let per_gib = if source.is_clone() {
        shared.clone_time
    } else {
        shared.import_time
    };
    patch_status(shared, dv, &scheduled_view(&dv.name, source)).await?;
    // The worker pod's kubelet gives the target its fsGroup 107 (CDI's restricted pods).
    let ownership = crate::permissions::Ownership {
        dir: dir.to_owned(),
        group: crate::permissions::QEMU_ID,
        read_only: false,
    };
    if let Err(err) = crate::permissions::apply(&ownership) {
        return Ok(Err(Failure::processing(format!(
            "applying fsGroup to {}: {err}",
            dir.display()
        ))));
    }
    let partial = dir.join(PARTIAL_FILE);
    let started = Instant::now();
    // Until the work knows how much data it moved, assume the minimum.
    let mut total = transfer_time(per_gib, job_estimate(&job));
    let work = run_job(job, dir.to_owned(), partial.clone(), target);
    tokio::pin!(work);
    let mut done = false;
    let mut shown = None;
    loop {
        let elapsed = started.elapsed();
        if done && elapsed >= total {
            break;
        }
        let view = in_progress_view(&dv.name, source, progress_text(elapsed, total));
        if shown.as_ref() != Some(&view) {
            patch_status(shared, dv, &view).await?;
            shown = Some(view);
        }
        let tick = progress_interval(total);
        if done {
            tokio::time::sleep(tick.min(total.saturating_sub(elapsed))).await;
            continue;
        }
        tokio::select! {
            result = &mut work => match result {
                Ok(moved) => {
                    total = total.max(transfer_time(per_gib, moved));
                    done = true;
                }
                Err(failure) => {
                    remove_temporaries(dir).await;
                    return Ok(Err(failure));
                }
            },
            _ = tokio::time::sleep(tick) => {}
        }
    }
    // The worker runs as 107 and writes into a set-group-ID directory of group 107, then makes
    // the image `0660` (`data-processor.go`): `107:107`, `rw-rw----`.
    let owned = std::os::unix::fs::chown(&partial, Some(crate::permissions::QEMU_ID), None)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o660))
        });
    if let Err(err) = owned {
        return Ok(Err(Failure::processing(format!(
            "owning {}: {err}",
            partial.display()
        ))));
    }
    let disk = volume.content();
    if let Err(err) = tokio::fs::rename(&partial, &disk).await {
        return Ok(Err(Failure::processing(format!(
            "renaming {} into place: {err}",
            partial.display()
        ))));
    }
    if volume.mode == VolumeMode::Block
        && let Err(err) = tokio::fs::write(dir.join(POPULATED_FILE), b"").await
    {
        return Ok(Err(Failure::processing(format!(
            "recording the population of {}: {err}",
            dir.display()
        ))));
    }
    Ok(Ok(()))
}

fn job_estimate(job: &Job) -> u64 {
    match job {
        Job::Clone { allocated, .. } => *allocated,
        Job::Blank | Job::Http { .. } => 0,
    }
}

async fn remove_temporaries(dir: &Path) {
    for name in [PARTIAL_FILE, DOWNLOAD_FILE] {
        let _ = tokio::fs::remove_file(dir.join(name)).await;
    }
}

/// Produces the complete image at `partial`; returns the bytes of data it moved (for timing).
async fn run_job(job: Job, dir: PathBuf, partial: PathBuf, target: u64) -> Result<u64, Failure> {
    match job {
        Job::Blank => {
            sparse_file(&partial, target).await?;
            Ok(0)
        }
        Job::Clone { disk, allocated } => {
            copy_sparse(&disk, &partial).await?;
            grow_to(&partial, target).await?;
            Ok(allocated)
        }
        Job::Http { url } => {
            let download = dir.join(DOWNLOAD_FILE);
            let moved = http::download_to(&url, &download).await?;
            to_raw(&download, &partial).await?;
            let _ = tokio::fs::remove_file(&download).await;
            fit_into(&partial, target).await?;
            Ok(moved)
        }
    }
}

/// A file of `len` bytes with nothing allocated.
async fn sparse_file(path: &Path, len: u64) -> Result<(), Failure> {
    let file = tokio::fs::File::create(path)
        .await
        .map_err(|e| Failure::processing(format!("creating {}: {e}", path.display())))?;
    file.set_len(len)
        .await
        .map_err(|e| Failure::processing(format!("sizing {}: {e}", path.display())))
}

/// `cp --sparse=always`: zero runs stay holes, so a mostly empty 64Gi disk copies in moments.
async fn copy_sparse(from: &Path, to: &Path) -> Result<(), Failure> {
    let mut cp = tokio::process::Command::new("cp");
    cp.arg("--sparse=always")
        .arg("--reflink=auto")
        .arg(from)
        .arg(to);
    run_tool(cp, "cp").await
}

/// CDI expands an image to fill its volume; growing a file is sparse.
async fn grow_to(path: &Path, target: u64) -> Result<(), Failure> {
    let len = file_len(path).await?;
    if len >= target {
        return Ok(());
    }
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .await
        .map_err(|e| Failure::processing(format!("opening {}: {e}", path.display())))?;
    file.set_len(target)
        .await
        .map_err(|e| Failure::processing(format!("growing {}: {e}", path.display())))
}

/// An imported image must fit its volume (CDI's importer refuses otherwise), then fills it.
async fn fit_into(path: &Path, target: u64) -> Result<(), Failure> {
    let virtual_size = file_len(path).await?;
    if virtual_size > target {
        return Err(Failure::processing(format!(
            "Virtual image size {virtual_size} is larger than the reported available storage \
             {target}. A larger PVC is required."
        )));
    }
    grow_to(path, target).await
}

async fn file_len(path: &Path) -> Result<u64, Failure> {
    tokio::fs::metadata(path)
        .await
        .map(|m| m.len())
        .map_err(|e| Failure::processing(format!("{}: {e}", path.display())))
}

/// Image formats the importer recognises by their first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ImageKind {
    Qcow2,
    Gzip,
    Xz,
    Raw,
}

fn image_kind(head: &[u8]) -> ImageKind {
    if head.starts_with(b"QFI\xfb") {
        ImageKind::Qcow2
    } else if head.starts_with(&[0x1f, 0x8b]) {
        ImageKind::Gzip
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        ImageKind::Xz
    } else {
        ImageKind::Raw
    }
}

/// Turns a downloaded image into raw at `raw`: qcow2 through `qemu-img convert` (as CDI does),
/// raw by rename.
async fn to_raw(download: &Path, raw: &Path) -> Result<(), Failure> {
    let mut head = [0u8; 8];
    let mut file = tokio::fs::File::open(download)
        .await
        .map_err(|e| Failure::processing(format!("opening {}: {e}", download.display())))?;
    let read = file.read(&mut head).await.unwrap_or(0);
    drop(file);
    match image_kind(&head[..read]) {
        ImageKind::Qcow2 => {
            let mut convert = tokio::process::Command::new("qemu-img");
            convert
                .args(["convert", "-f", "qcow2", "-O", "raw"])
                .arg(download)
                .arg(raw);
            run_tool(convert, "qemu-img").await
        }
        kind @ (ImageKind::Gzip | ImageKind::Xz) => Err(Failure::processing(format!(
            "the simulation does not decompress images ({kind:?}); serve a raw or qcow2 image"
        ))),
        ImageKind::Raw => tokio::fs::rename(download, raw)
            .await
            .map_err(|e| Failure::processing(format!("moving the download into place: {e}"))),
    }
}

/// Runs an external tool; it is killed if the population is abandoned (DataVolume deleted).
async fn run_tool(mut command: tokio::process::Command, name: &str) -> Result<(), Failure> {
    let output = command
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| {
            Failure::processing(format!(
                "{name}: {e} (the simulation needs {name} on PATH; qemu-img is in Debian's qemu-utils)"
            ))
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Failure::processing(format!(
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// A minimal HTTP/1.0 client: plain http only, redirects followed, body streamed to a file.
/// HTTP/1.0 keeps responses free of chunked encoding; CDI's sources here are local test servers.
mod http {
    use std::path::Path;
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

    use super::Failure;

    const MAX_REDIRECTS: usize = 5;
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct HttpUrl {
        /// `host[:port]` as written, for the Host header.
        authority: String,
        host: String,
        port: u16,
        path: String,
    }

    fn parse_http_url(url: &str) -> Result<HttpUrl, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(if url.starts_with("https://") {
                "https is not supported by the simulation; serve the image over http://".to_owned()
            } else {
                format!("unsupported URL {url:?}")
            });
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_owned()),
            None => (rest, "/".to_owned()),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("bad host in {url:?}"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| format!("bad port in {url:?}"))?,
            None => 80,
        };
        if host.is_empty() {
            return Err(format!("no host in {url:?}"));
        }
        Ok(HttpUrl {
            authority: authority.to_owned(),
            host: host.to_owned(),
            port,
            path,
        })
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct ResponseHead {
        code: u16,
        reason: String,
        content_length: Option<u64>,
        location: Option<String>,
        chunked: bool,
    }

    /// Parses a status line and header lines (without the blank line).
    fn parse_head(lines: &[String]) -> Result<ResponseHead, String> {
        let status = lines.first().ok_or("empty response")?;
        let mut parts = status.trim_end().splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        if !version.starts_with("HTTP/") {
            return Err(format!("not an HTTP response: {status:?}"));
        }
        let code = parts
            .next()
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("bad status line {status:?}"))?;
        let reason = parts.next().unwrap_or_default().to_owned();
        let mut head = ResponseHead {
            code,
            reason,
            content_length: None,
            location: None,
            chunked: false,
        };
        for line in &lines[1..] {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => head.content_length = value.parse().ok(),
                "location" => head.location = Some(value.to_owned()),
                "transfer-encoding" => {
                    head.chunked = value.to_ascii_lowercase().contains("chunked")
                }
                _ => {}
            }
        }
        Ok(head)
    }

    /// The absolute URL a redirect points to.
    fn resolve_location(base: &HttpUrl, location: &str) -> String {
        if location.contains("://") {
            location.to_owned()
        } else if location.starts_with('/') {
            format!("http://{}{location}", base.authority)
        } else {
            let dir = base
                .path
                .rsplit_once('/')
                .map(|(d, _)| d)
                .unwrap_or_default();
            format!("http://{}{dir}/{location}", base.authority)
        }
    }

    enum Fetched {
        Body(u64),
        Redirect(String),
    }

    /// Downloads `url` into `dest`; returns the bytes written.
    pub(super) async fn download_to(url: &str, dest: &Path) -> Result<u64, Failure> {
        let mut url = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            match fetch(&url, dest).await? {
                Fetched::Body(bytes) => return Ok(bytes),
                Fetched::Redirect(next) => url = next,
            }
        }
        Err(Failure::connecting(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }

    async fn fetch(url: &str, dest: &Path) -> Result<Fetched, Failure> {
        let target = parse_http_url(url).map_err(Failure::connecting)?;
        let connect = tokio::net::TcpStream::connect((target.host.as_str(), target.port));
        let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| {
                Failure::connecting(format!("connecting to {} timed out", target.authority))
            })?
            .map_err(|e| Failure::connecting(format!("{}: {e}", target.authority)))?;
        let request = format!(
            "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: guestcluster-sim-cdi\r\nAccept: */*\r\n\r\n",
            target.path, target.authority
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(Failure::connecting)?;
        let mut reader = tokio::io::BufReader::new(stream);
        let head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut reader))
            .await
            .map_err(|_| Failure::connecting("no response headers in time"))??;
        if (300..400).contains(&head.code)
            && let Some(location) = &head.location
        {
            return Ok(Fetched::Redirect(resolve_location(&target, location)));
        }
        if head.code != 200 {
            return Err(Failure::connecting(format!(
                "expected status code 200, got {}. Status: {} {}",
                head.code, head.code, head.reason
            )));
        }
        if head.chunked {
            return Err(Failure::connecting(
                "chunked responses are not supported by the simulation",
            ));
        }
        let written = write_body(&mut reader, head.content_length, dest).await?;
        match head.content_length {
            Some(expected) if expected != written => Err(Failure::connecting(format!(
                "body ended after {written} of {expected} bytes"
            ))),
            _ => Ok(Fetched::Body(written)),
        }
    }

    async fn read_head<R: tokio::io::AsyncBufRead + Unpin>(
        reader: &mut R,
    ) -> Result<ResponseHead, Failure> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let read = reader
                .read_line(&mut line)
                .await
                .map_err(Failure::connecting)?;
            if read == 0 || line.trim_end().is_empty() {
                break;
            }
            if lines.len() > 200 {
                return Err(Failure::connecting("response headers too long"));
            }
            lines.push(line.trim_end().to_owned());
        }
        parse_head(&lines).map_err(Failure::connecting)
    }

    async fn write_body<R: tokio::io::AsyncRead + Unpin>(
        reader: &mut R,
        content_length: Option<u64>,
        dest: &Path,
    ) -> Result<u64, Failure> {
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(|e| Failure::processing(format!("creating {}: {e}", dest.display())))?;
        let mut body = reader.take(content_length.unwrap_or(u64::MAX));
        let written = tokio::io::copy(&mut body, &mut file)
            .await
            .map_err(|e| Failure::connecting(format!("reading the body: {e}")))?;
        file.flush()
            .await
            .map_err(|e| Failure::processing(format!("writing {}: {e}", dest.display())))?;
        Ok(written)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn http_urls_parse_with_default_port_and_path() {
            assert_eq!(
                parse_http_url("http://127.0.0.1:8080/images/disk.qcow2"),
                Ok(HttpUrl {
                    authority: "127.0.0.1:8080".into(),
                    host: "127.0.0.1".into(),
                    port: 8080,
                    path: "/images/disk.qcow2".into(),
                })
            );
            let plain = parse_http_url("http://example.test").expect("url");
            assert_eq!((plain.port, plain.path.as_str()), (80, "/"));
            let v6 = parse_http_url("http://[::1]:81/x?y=1#frag").expect("url");
            assert_eq!((v6.host.as_str(), v6.port), ("::1", 81));
            assert_eq!(v6.path, "/x?y=1");
            assert!(
                parse_http_url("https://x/")
                    .expect_err("https")
                    .contains("https")
            );
            assert!(parse_http_url("ftp://x/").is_err());
        }

        #[test]
        fn response_heads_parse() {
            let lines: Vec<String> = [
                "HTTP/1.1 302 Found",
                "Content-Length: 0",
                "location: /elsewhere",
            ]
            .map(String::from)
            .to_vec();
            let head = parse_head(&lines).expect("head");
            assert_eq!(head.code, 302);
            assert_eq!(head.reason, "Found");
            assert_eq!(head.content_length, Some(0));
            assert_eq!(head.location.as_deref(), Some("/elsewhere"));
            assert!(!head.chunked);
            assert!(parse_head(&["garbage".to_owned()]).is_err());
        }

        #[test]
        fn redirects_resolve_against_the_request() {
            let base = parse_http_url("http://h:1/a/b.img").expect("url");
            assert_eq!(resolve_location(&base, "http://o/x"), "http://o/x");
            assert_eq!(resolve_location(&base, "/x"), "http://h:1/x");
            assert_eq!(resolve_location(&base, "c.img"), "http://h:1/a/c.img");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source_map(json: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(json).expect("source")
    }

    #[test]
    fn sources_parse_with_the_dv_namespace_as_default() {
        assert_eq!(
            parse_source("ns", Some(&source_map(json!({"blank": {}})))),
            Ok(Source::Blank)
        );
        assert_eq!(
            parse_source("ns", Some(&source_map(json!({"pvc": {"name": "golden"}})))),
            Ok(Source::Pvc {
                namespace: "ns".into(),
                name: "golden".into()
            })
        );
        assert_eq!(
            parse_source(
                "ns",
                Some(&source_map(
                    json!({"pvc": {"namespace": "other", "name": "g"}})
                ))
            ),
            Ok(Source::Pvc {
                namespace: "other".into(),
                name: "g".into()
            })
        );
        assert_eq!(
            parse_source(
                "ns",
                Some(&source_map(json!({"http": {"url": "http://x/d"}})))
            ),
            Ok(Source::Http {
                url: "http://x/d".into()
            })
        );
    }

    #[test]
    fn unsupported_or_missing_sources_fail_by_name() {
        let registry = parse_source("ns", Some(&source_map(json!({"registry": {}}))));
        let failure = registry.expect_err("registry is not simulated");
        assert_eq!(failure.reason, reason::UNSUPPORTED_SOURCE);
        assert!(failure.message.contains("registry"), "{}", failure.message);
        let missing = parse_source("ns", None).expect_err("sourceRef is not simulated");
        assert_eq!(missing.reason, reason::UNSUPPORTED_SOURCE);
        assert!(parse_source("ns", Some(&source_map(json!({"pvc": {}})))).is_err());
    }

    #[test]
    fn storage_wins_over_pvc_and_numbers_are_quantities() {
        let spec: DataVolumeSpec = serde_json::from_value(json!({
            "storage": {"resources": {"requests": {"storage": 1073741824}}},
            "pvc": {"resources": {"requests": {"storage": "5Gi"}}},
        }))
        .expect("spec");
        assert_eq!(spec.requested_size().as_deref(), Some("1073741824"));
    }

    fn obs(source: Source, claim: Claim, clone_source: Option<CloneSource>) -> Observation {
        Observation {
            name: "dv".into(),
            source,
            claim,
            clone_source,
            size: Some("1Gi".into()),
            modes: Ok((vec!["ReadWriteOnce".into()], "Filesystem".into())),
        }
    }

    fn bound(disk_present: bool) -> Claim {
        Claim::Bound {
            uid: "u".into(),
            mode: VolumeMode::Filesystem,
            bytes: Some(1 << 30),
            disk_present,
        }
    }

    fn clone_of(name: &str) -> Source {
        Source::Pvc {
            namespace: "src".into(),
            name: name.into(),
        }
    }

    fn waiting(plan: Plan) -> View {
        match plan {
            Plan::Wait(view) => view,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_claim_is_created_with_the_size() {
        assert_eq!(
            plan(&obs(Source::Blank, Claim::Missing, None)),
            Plan::CreateClaim {
                size: "1Gi".into(),
                access_modes: vec!["ReadWriteOnce".into()],
                volume_mode: "Filesystem".into(),
            }
        );
        let mut no_size = obs(Source::Blank, Claim::Missing, None);
        no_size.size = None;
        assert!(matches!(plan(&no_size), Plan::Fail(_)));
    }

    #[test]
    fn a_claim_cdi_cannot_render_keeps_the_dv_pending_without_a_pvc() {
        let mut unrenderable = obs(Source::Blank, Claim::Missing, None);
        unrenderable.modes = Err("no accessMode specified in StorageProfile local".into());
        let view = waiting(plan(&unrenderable));
        assert_eq!(view.phase, Phase::Pending);
        assert_eq!(view.claim_name, None);
        assert_eq!(view.bound.reason, reason::CLAIM_NOT_VALID);
        assert_eq!(
            view.bound.message,
            "no accessMode specified in StorageProfile local"
        );
    }

    #[test]
    fn a_clone_without_source_waits_before_creating_its_claim() {
        let view = waiting(plan(&obs(
            clone_of("gone"),
            Claim::Missing,
            Some(CloneSource::Missing),
        )));
        assert_eq!(view.phase, Phase::Pending);
        assert_eq!(view.running.reason, reason::CLONE_WITHOUT_SOURCE);
        assert!(view.running.message.contains("gone"));
    }

    #[test]
    fn an_unbound_or_foreign_claim_keeps_the_dv_pending() {
        let pending = waiting(plan(&obs(Source::Blank, Claim::Pending, None)));
        assert_eq!(pending.phase, Phase::Pending);
        assert_eq!(pending.bound.reason, reason::PENDING);
        let foreign = waiting(plan(&obs(Source::Blank, Claim::Foreign, None)));
        assert_eq!(foreign.bound.reason, reason::RESOURCE_EXISTS);
    }

    #[test]
    fn a_present_disk_means_succeeded_without_any_copy() {
        match plan(&obs(Source::Blank, bound(true), None)) {
            Plan::Succeed(view) => {
                assert_eq!(view.phase, Phase::Succeeded);
                assert_eq!(view.progress.as_deref(), Some("100.0%"));
                assert!(view.ready().status);
                assert_eq!(view.running.reason, reason::COMPLETED);
            }
            other => panic!("expected success, got {other:?}"),
        }
    }

    #[test]
    fn imports_populate_once_bound() {
        assert_eq!(
            plan(&obs(Source::Blank, bound(false), None)),
            Plan::Populate(Job::Blank)
        );
        let http = Source::Http {
            url: "http://h/i".into(),
        };
        assert_eq!(
            plan(&obs(http, bound(false), None)),
            Plan::Populate(Job::Http {
                url: "http://h/i".into()
            })
        );
    }

    #[test]
    fn a_clone_waits_while_its_source_is_in_use() {
        let view = waiting(plan(&obs(
            clone_of("golden"),
            bound(false),
            Some(CloneSource::InUse(vec!["src/builder".into()])),
        )));
        assert_eq!(view.phase, Phase::CloneScheduled);
        assert_eq!(view.running.reason, reason::CLONE_SOURCE_IN_USE);
        assert_eq!(
            view.running.message,
            "pod src/builder using PersistentVolumeClaim golden"
        );
    }

    #[test]
    fn a_clone_waits_for_an_unpopulated_source() {
        let view = waiting(plan(&obs(
            clone_of("golden"),
            bound(false),
            Some(CloneSource::NotPopulated("not yet".into())),
        )));
        assert_eq!(view.phase, Phase::CloneScheduled);
        assert_eq!(view.running.reason, reason::CLONE_SOURCE_NOT_POPULATED);
    }

    #[test]
    fn a_clone_into_a_smaller_volume_fails_naming_both_sizes() {
        let source = CloneSource::Ready {
            disk: "/d".into(),
            len: (1 << 30) + 1,
            allocated: 0,
        };
        match plan(&obs(clone_of("golden"), bound(false), Some(source))) {
            Plan::Fail(failure) => {
                assert_eq!(failure.reason, reason::CLONE_VALIDATION_FAILED);
                assert!(
                    failure.message.contains("1073741824 < 1073741825"),
                    "{}",
                    failure.message
                );
            }
            other => panic!("expected failure, got {other:?}"),
        }
    }

    #[test]
    fn a_ready_source_of_fitting_size_is_cloned() {
        let source = CloneSource::Ready {
            disk: "/d".into(),
            len: 1 << 30,
            allocated: 4096,
        };
        assert_eq!(
            plan(&obs(clone_of("golden"), bound(false), Some(source))),
            Plan::Populate(Job::Clone {
                disk: "/d".into(),
                allocated: 4096
            })
        );
    }

    #[test]
    fn progress_is_held_below_done_and_timed_per_gib() {
        let second = Duration::from_secs(1);
        assert_eq!(progress_text(Duration::ZERO, second), "0.00%");
        assert_eq!(progress_text(second / 4, second), "25.00%");
        assert_eq!(progress_text(second * 3, second), "99.99%");
        assert_eq!(transfer_time(second, 0), second, "at least one GiB's worth");
        assert_eq!(transfer_time(second, 3 << 30), second * 3);
        assert_eq!(progress_interval(second), Duration::from_millis(100));
        assert_eq!(progress_interval(second * 100), Duration::from_secs(2));
    }

    fn view() -> View {
        in_progress_view("dv", &Source::Blank, "10.00%".into())
    }

    #[test]
    fn status_carries_phase_progress_claim_and_three_conditions() {
        let status = status_json(&view(), None, &json!("T1"));
        assert_eq!(status["phase"], "ImportInProgress");
        assert_eq!(status["progress"], "10.00%");
        assert_eq!(status["claimName"], "dv");
        let kinds: Vec<&str> = status["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .map(|c| c["type"].as_str().expect("type"))
            .collect();
        assert_eq!(kinds, ["Bound", "Ready", "Running"]);
        assert_eq!(status["conditions"][1]["reason"], reason::TRANSFER_RUNNING);
        assert_eq!(status["conditions"][2]["status"], "True");
        assert!(already_shows(&view(), Some(&status)));
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let first = status_json(&view(), None, &json!("T1"));
        let later = in_progress_view("dv", &Source::Blank, "50.00%".into());
        assert!(!already_shows(&later, Some(&first)), "progress moved");
        let second = status_json(&later, Some(&first), &json!("T2"));
        assert_eq!(second["conditions"][2]["lastTransitionTime"], "T1");
        assert_eq!(second["conditions"][2]["lastHeartbeatTime"], "T1");
        let failed = failed_view("dv", &bound(false), &Failure::new(reason::ERROR, "boom"));
        let third = status_json(&failed, Some(&second), &json!("T3"));
        assert_eq!(third["conditions"][2]["lastTransitionTime"], "T3");
        assert_eq!(
            third["conditions"][0]["lastTransitionTime"], "T1",
            "still bound"
        );
        assert!(
            third.get("progress").is_none(),
            "a failure keeps the last progress"
        );
        assert!(already_shows(&failed, Some(&third)));
    }

    fn data_volume() -> DataVolume {
        DataVolume {
            namespace: "ns".into(),
            name: "root".into(),
            uid: "dv-uid".into(),
            labels: BTreeMap::from([("team".to_owned(), "a".to_owned())]),
            deleting: false,
            spec: Ok(DataVolumeSpec::default()),
            status: None,
        }
    }

    #[test]
    fn the_claim_is_owned_by_the_dv_and_labelled_like_cdi() {
        let spec: DataVolumeSpec = serde_json::from_value(json!({
            "storage": {
                "resources": {"requests": {"storage": "2Gi"}},
                "storageClassName": "fast",
            },
        }))
        .expect("spec");
        let modes = (vec!["ReadWriteMany".to_owned()], "Block".to_owned());
        let claim = target_claim(&data_volume(), &spec, &clone_of("golden"), "2Gi", modes);
        let json = serde_json::to_value(&claim).expect("json");
        let meta = &json["metadata"];
        assert_eq!(meta["name"], "root");
        assert_eq!(meta["namespace"], "ns");
        assert_eq!(meta["ownerReferences"][0]["uid"], "dv-uid");
        assert_eq!(meta["ownerReferences"][0]["controller"], true);
        assert_eq!(meta["labels"]["team"], "a");
        assert_eq!(meta["labels"]["app"], "containerized-data-importer");
        assert_eq!(meta["annotations"][annotation::CLONE_REQUEST], "src/golden");
        assert_eq!(meta["annotations"][annotation::CREATED_FOR], "dv-uid");
        let spec = &json["spec"];
        assert_eq!(spec["resources"]["requests"]["storage"], "2Gi");
        assert_eq!(spec["storageClassName"], "fast");
        assert_eq!(spec["volumeMode"], "Block");
        assert_eq!(spec["accessModes"], json!(["ReadWriteMany"]));
        assert_eq!(controller_uid(&claim.metadata), Some("dv-uid"));
        assert_eq!(controlling_data_volume(&claim.metadata), Some("root"));
    }

    fn pod(name: &str, namespace: &str, claim: &str, phase: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "containers": [{"name": "c"}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}],
            },
            "status": {"phase": phase},
        }))
        .expect("pod")
    }

    #[test]
    fn only_unfinished_pods_of_the_namespace_hold_a_claim() {
        let pods = [
            pod("running", "src", "golden", Some("Running")),
            pod("pending", "src", "golden", None),
            pod("done", "src", "golden", Some("Succeeded")),
            pod("failed", "src", "golden", Some("Failed")),
            pod("other-claim", "src", "scratch", Some("Running")),
            pod("other-ns", "elsewhere", "golden", Some("Running")),
        ];
        assert_eq!(
            pods_using(pods.iter(), "src", "golden"),
            vec!["src/pending".to_owned(), "src/running".to_owned()]
        );
    }

    #[test]
    fn images_are_recognised_by_magic() {
        assert_eq!(image_kind(b"QFI\xfb\0\0\0\x03"), ImageKind::Qcow2);
        assert_eq!(image_kind(&[0x1f, 0x8b, 8]), ImageKind::Gzip);
        assert_eq!(
            image_kind(&[0xfd, b'7', b'z', b'X', b'Z', 0]),
            ImageKind::Xz
        );
        assert_eq!(image_kind(b"\0\0\0\0"), ImageKind::Raw);
        assert_eq!(image_kind(b""), ImageKind::Raw);
    }
}
