//! Hand-off latency: how long the operator takes to act after a step it waits for finishes.
//!
//! A [`Recorder`] watches, through the API server, the steps the operator waits for — a
//! DataVolume `Succeeded`, a VMI `Running`, a bundle's prep Job complete, an agent's handoff Secret published
//! — and what the operator writes: a ClusterInstance's or CRCBundle's status, and the objects an
//! instance controls appearing (the VM after its disk, the agent Job after its VMI, the
//! kubeconfig after the handoff). Each step's hand-off is the delay from the watch event that
//! shows it to the first operator write for the same object after it. Both come over watches of
//! the same API server, so what is measured is the operator's reaction, not a poll period of
//! the measurement.
//!
//! The pairing is pure ([`handoffs`]); the scenario tests and the scale benchmark report the
//! median and the worst case ([`Summary`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use guestcluster::api::labels::CLUSTER_INSTANCE;
use guestcluster::api::{CRCBundle, ClusterInstance};
use guestcluster::cdi::{DataVolume, DataVolumePhase};
use guestcluster::kubevirt::{VirtualMachine, VirtualMachineInstance, VmiPhase};

/// Which object a step or a write concerns: `ClusterInstance ns/name` or `CRCBundle name`.
pub type Subject = String;

/// What the recorder saw, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A step the operator waits for finished.
    Step {
        subject: Subject,
        step: &'static str,
        at: Instant,
    },
    /// The operator wrote something for `subject`.
    Write { subject: Subject, at: Instant },
}

/// One step and the operator's reaction to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    pub subject: Subject,
    pub step: &'static str,
    pub delay: Duration,
}

/// Pairs each step with the first write for the same subject at or after it. A step with no
/// later write (the run ended first) has no hand-off.
pub fn handoffs(seen: &[Seen]) -> Vec<Handoff> {
    let mut out = Vec::new();
    for (i, event) in seen.iter().enumerate() {
        let Seen::Step { subject, step, at } = event else {
            continue;
        };
        let next = seen[i..].iter().find_map(|later| match later {
            Seen::Write { subject: s, at: w } if s == subject && w >= at => Some(*w),
            _ => None,
        });
        if let Some(w) = next {
            out.push(Handoff {
                subject: subject.clone(),
                step,
                delay: w - *at,
            });
        }
    }
    out
}

/// Median and worst hand-off, overall and per step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub count: usize,
    pub median: Duration,
    pub worst: Duration,
    /// step → (count, median, worst)
    pub by_step: BTreeMap<&'static str, (usize, Duration, Duration)>,
}

impl Summary {
    pub fn of(handoffs: &[Handoff]) -> Option<Self> {
        let (median, worst) = median_and_worst(handoffs.iter().map(|h| h.delay).collect())?;
        let mut steps: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
        for h in handoffs {
            steps.entry(h.step).or_default().push(h.delay);
        }
        let by_step = steps
            .into_iter()
            .filter_map(|(step, delays)| {
                let n = delays.len();
                let (m, w) = median_and_worst(delays)?;
                Some((step, (n, m, w)))
            })
            .collect();
        Some(Self {
            count: handoffs.len(),
            median,
            worst,
            by_step,
        })
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(
            f,
            "{} hand-offs: median {:.0} ms, worst {:.0} ms",
            self.count,
            ms(self.median),
            ms(self.worst)
        )?;
        for (step, (n, m, w)) in &self.by_step {
            write!(
                f,
                "\n  {step:<34} {n:>3}  median {:>6.0} ms  worst {:>6.0} ms",
                ms(*m),
                ms(*w)
            )?;
        }
        Ok(())
    }
}

/// The upper median (of an even count, the later of the two middle values) and the maximum.
fn median_and_worst(mut delays: Vec<Duration>) -> Option<(Duration, Duration)> {
    delays.sort();
    let worst = *delays.last()?;
    Some((delays[delays.len() / 2], worst))
}

/// Records steps and writes from watches until dropped.
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Recorder {
    /// Starts the watches. Objects that exist already are not steps or writes: only what
    /// changes from now on counts.
    pub fn start(client: &kube::Client) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let c = client.clone();
        let tasks = vec![
            spawn(
                Api::<DataVolume>::all(c.clone()),
                seen.clone(),
                |old, new| {
                    let done = |d: &DataVolume| {
                        d.status.as_ref().and_then(|s| s.phase) == Some(DataVolumePhase::Succeeded)
                    };
                    let step =
                        (!old.is_some_and(done) && done(new)).then_some("DataVolume succeeded");
                    step_or_created(owner_subject(new), step, old)
                },
            ),
            spawn(
                Api::<VirtualMachineInstance>::all(c.clone()),
                seen.clone(),
                |old, new| {
                    let running = |v: &VirtualMachineInstance| {
                        v.status.as_ref().and_then(|s| s.phase) == Some(VmiPhase::Running)
                    };
                    let subject = new
                        .labels()
                        .get(CLUSTER_INSTANCE)
                        .zip(new.namespace())
                        .map(|(name, ns)| format!("ClusterInstance {ns}/{name}"));
                    let step = (!old.is_some_and(running) && running(new)).then_some("VMI running");
                    step.zip(subject)
                        .map(|(step, subject)| vec![Change::Step(subject, step)])
                        .unwrap_or_default()
                },
            ),
            spawn(Api::<Job>::all(c.clone()), seen.clone(), |old, new| {
                let complete = |j: &Job| {
                    j.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Complete" && c.status == "True")
                        })
                };
                // A prep Job's completion is its hand-off; an agent's is its handoff Secret
                // (published before it exits), so its exit is no step of its own.
                let subject = owner_subject(new);
                let prep = subject
                    .as_deref()
                    .is_some_and(|s| s.starts_with("CRCBundle "));
                let step = (prep && !old.is_some_and(complete) && complete(new))
                    .then_some("prep Job complete");
                step_or_created(subject, step, old)
            }),
            spawn(Api::<Secret>::all(c.clone()), seen.clone(), |old, new| {
                // The agent's handoff is the step; the Secrets the operator creates are writes.
                let handoff = new.name_any().contains("-crc-raw-kubeconfig-");
                let step = (old.is_none() && handoff).then_some("handoff Secret published");
                if handoff {
                    step.zip(owner_subject(new))
                        .map(|(step, s)| vec![Change::Step(s, step)])
                        .unwrap_or_default()
                } else {
                    step_or_created(owner_subject(new), None, old)
                }
            }),
            spawn(
                Api::<VirtualMachine>::all(c.clone()),
                seen.clone(),
                |old, new| step_or_created(owner_subject(new), None, old),
            ),
            spawn(
                Api::<ClusterInstance>::all(c.clone()),
                seen.clone(),
                |old, new| {
                    let subject = format!(
                        "ClusterInstance {}/{}",
                        new.namespace().unwrap_or_default(),
                        new.name_any()
                    );
                    status_written(old.map(|o| &o.status), &new.status, subject)
                },
            ),
            spawn(
                Api::<CRCBundle>::all(c.clone()),
                seen.clone(),
                |old, new| {
                    let subject = format!("CRCBundle {}", new.name_any());
                    status_written(old.map(|o| &o.status), &new.status, subject)
                },
            ),
        ];
        Self { seen, tasks }
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.seen).clone()
    }

    /// The hand-offs seen so far.
    pub fn handoffs(&self) -> Vec<Handoff> {
        handoffs(&self.seen())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one watch event amounts to.
enum Change {
    Step(Subject, &'static str),
    Write(Subject),
}

/// The subject of the object's controller (ClusterInstance or CRCBundle), if it has one.
fn owner_subject<K: Resource>(obj: &K) -> Option<Subject> {
    let owner = obj
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))?;
    match owner.kind.as_str() {
        "ClusterInstance" => Some(format!(
            "ClusterInstance {}/{}",
            obj.meta().namespace.clone().unwrap_or_default(),
            owner.name
        )),
        "CRCBundle" => Some(format!("CRCBundle {}", owner.name)),
        _ => None,
    }
}

/// A step of `subject`, else — for an object that just appeared — a write for it.
fn step_or_created<K>(
    subject: Option<Subject>,
    step: Option<&'static str>,
    old: Option<&K>,
) -> Vec<Change> {
    let Some(subject) = subject else {
        return Vec::new();
    };
    match step {
        Some(step) => vec![Change::Step(subject, step)],
        None if old.is_none() => vec![Change::Write(subject)],
        None => Vec::new(),
    }
}

fn status_written<S: PartialEq>(
    old: Option<&Option<S>>,
    new: &Option<S>,
    subject: Subject,
) -> Vec<Change> {
    match old {
        Some(old) if old != new => vec![Change::Write(subject)],
        _ => Vec::new(),
    }
}

/// Watches `api`; for each change after the initial list, `classify(old, new)` says what it
/// was. Objects listed initially are remembered but count for nothing.
fn spawn<K>(
    api: Api<K>,
    seen: Arc<Mutex<Vec<Seen>>>,
    classify: impl Fn(Option<&K>, &K) -> Vec<Change> + Send + 'static,
) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    tokio::spawn(async move {
        let mut last: HashMap<String, K> = HashMap::new();
        // The first list only remembers what exists; a re-list after a watch error compares.
        let mut synced = false;
        let events = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            let at = Instant::now();
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::Init => {}
                watcher::Event::InitApply(obj) => {
                    let uid = obj.uid().unwrap_or_default();
                    record(&seen, at, &classify, last.get(&uid), &obj, !synced);
                    last.insert(uid, obj);
                }
                watcher::Event::InitDone => synced = true,
                watcher::Event::Apply(obj) => {
                    let uid = obj.uid().unwrap_or_default();
                    record(&seen, at, &classify, last.get(&uid), &obj, false);
                    last.insert(uid, obj);
                }
                watcher::Event::Delete(obj) => {
                    last.remove(&obj.uid().unwrap_or_default());
                }
            }
        }
    })
}

fn record<K>(
    seen: &Mutex<Vec<Seen>>,
    at: Instant,
    classify: &impl Fn(Option<&K>, &K) -> Vec<Change>,
    old: Option<&K>,
    new: &K,
    silent: bool,
) {
    if silent {
        return;
    }
    let changes = classify(old, new);
    let mut seen = lock(seen);
    for change in changes {
        seen.push(match change {
            Change::Step(subject, step) => Seen::Step { subject, step, at },
            Change::Write(subject) => Seen::Write { subject, at },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(s: &str, at: Instant) -> Seen {
        Seen::Step {
            subject: s.into(),
            step: "VMI running",
            at,
        }
    }

    fn write(s: &str, at: Instant) -> Seen {
        Seen::Write {
            subject: s.into(),
            at,
        }
    }

    #[test]
    fn a_step_pairs_with_the_first_write_for_its_subject_after_it() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let seen = [
            write("a", t),
            step("a", t + ms(10)),
            write("b", t + ms(20)),
            write("a", t + ms(40)),
            write("a", t + ms(90)),
            step("b", t + ms(100)),
        ];
        let got = handoffs(&seen);
        assert_eq!(
            got,
            [Handoff {
                subject: "a".into(),
                step: "VMI running",
                delay: ms(30)
            }],
            "b's step has no later write: no hand-off"
        );
    }

    #[test]
    fn the_summary_gives_the_upper_median_and_the_worst() {
        let ms = Duration::from_millis;
        let h = |d| Handoff {
            subject: "a".into(),
            step: "prep Job complete",
            delay: ms(d),
        };
        let summary = Summary::of(&[h(30), h(10), h(20), h(400)]).unwrap();
        assert_eq!((summary.median, summary.worst), (ms(30), ms(400)));
        assert_eq!(summary.by_step["prep Job complete"], (4, ms(30), ms(400)));
        assert!(Summary::of(&[]).is_none());
    }
}
