//! `etcdctl` in a throwaway etcd over the disk's `/var/lib/etcd` (see [`super::containers`]):
//! the keys of [`GuestState::etcd_keys`](crate::guest::GuestState::etcd_keys) (no values), the
//! carried objects of [`GuestState::api_objects`](crate::guest::GuestState::api_objects) under
//! the keys the API server gives them (values for custom resources, which it stores as JSON;
//! see [`object_key`]), and the revisions of [`EtcdHistory`], so that a seal which neither
//! compacts nor defragments leaves replaced values — an old pull secret among them — on the disk.
//!
//! Modelled on etcd v3.5's `etcdctl` (`etcdctl/ctlv3/command/{get,del,compaction,defrag,ep}_command.go`)
//! and its server's answers (`server/mvcc/kvstore.go`: `ErrCompacted`, `ErrFutureRev`).

use super::{Ctx, Run};
use crate::guest::state::EtcdHistory;

/// The client URL a throwaway etcd started with no flags serves, which etcdctl uses by default.
const ENDPOINT: &str = "127.0.0.1:2379";

/// `etcdctl get [--prefix] [--keys-only] KEY` (each key then its value on the next line; an
/// empty line for keys only, as etcdctl prints them), `etcdctl del [--prefix] KEY` (the count
/// deleted; a delete is one write), `etcdctl compact REV`, `etcdctl defrag`, `etcdctl endpoint status -w json`.
pub fn etcdctl(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let Some((verb, rest)) = args.split_first() else {
        return Run::fail(1, "etcdctl: a command is required");
    };
    match verb.as_str() {
        "get" | "del" => keys(ctx, verb, rest),
        "compact" => compact(ctx, rest),
        "defrag" if rest.is_empty() => defrag(ctx),
        "endpoint" => endpoint(ctx, rest),
        other => Run::fail(
            1,
            format!("etcdctl {other} {} is not simulated", rest.join(" ")),
        ),
    }
}

/// The key the API server stores an object under (`/kubernetes.io/<group>/<plural>/[<ns>/]<name>`,
/// the group left out for the core group), with its value when the simulation has it: custom
/// resources are stored as their JSON (apiextensions-apiserver); built-in kinds are protobuf,
/// not modelled. The plural is the kind's lowercase with an `s`, right for the kinds read here.
pub fn object_key(object: &serde_json::Value) -> (String, Option<String>) {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let api_version = text(&object["apiVersion"]);
    let plural = format!("{}s", text(&object["kind"]).to_lowercase());
    let (resource, value) = match api_version.split_once('/') {
        Some((group, _)) if group.contains('.') => {
            (format!("{group}/{plural}"), Some(object.to_string()))
        }
        Some((group, _)) => (format!("{group}/{plural}"), None),
        None => (plural, None),
    };
    let namespace = text(&object["metadata"]["namespace"]);
    let name = text(&object["metadata"]["name"]);
    let path = if namespace.is_empty() {
        format!("/kubernetes.io/{resource}/{name}")
    } else {
        format!("/kubernetes.io/{resource}/{namespace}/{name}")
    };
    (path, value)
}

fn keys(ctx: &mut Ctx<'_>, verb: &str, rest: &[String]) -> Run {
    let mut prefix = false;
    let mut keys_only = false;
    let mut operands = Vec::new();
    for arg in rest {
        match arg.as_str() {
            "--prefix" | "--prefix=true" => prefix = true,
            "--keys-only" | "--keys-only=true" if verb == "get" => keys_only = true,
            a if a.starts_with('-') => {
                return Run::fail(1, format!("Error: unknown flag: {a} (not simulated)"));
            }
            a => operands.push(a),
        }
    }
    let [key] = operands[..] else {
        return Run::fail(
            1,
            format!(
                "Error: {verb} command needs one argument as key (the simulation takes no range_end)"
            ),
        );
    };
    let selected = |k: &str| if prefix { k.starts_with(key) } else { k == key };
    let state = ctx.state();
    // Every key in order, with the value when it is modelled.
    let mut matching: std::collections::BTreeMap<String, Option<String>> = state
        .etcd_keys
        .iter()
        .filter(|k| selected(k))
        .map(|k| (k.clone(), None))
        .collect();
    matching.extend(
        state
            .api_objects
            .iter()
            .map(object_key)
            .filter(|(k, _)| selected(k)),
    );
    match verb {
        "get" if keys_only => Run::out(
            matching
                .keys()
                .map(|k| format!("{k}\n\n"))
                .collect::<String>(),
        ),
        "get" => {
            let mut out = String::new();
            for (k, value) in &matching {
                let Some(value) = value else {
                    return Run::fail(
                        1,
                        format!(
                            "etcdctl get: the value of {k} is not simulated (protobuf), use --keys-only"
                        ),
                    );
                };
                out.push_str(&format!("{k}\n{value}\n"));
            }
            Run::out(out)
        }
        _ => {
            if !matching.is_empty() {
                let state = ctx.state_mut();
                let replaced: Vec<serde_json::Value> = state
                    .api_objects
                    .iter()
                    .filter(|o| matching.contains_key(&object_key(o).0))
                    .cloned()
                    .collect();
                state
                    .api_objects
                    .retain(|o| !matching.contains_key(&object_key(o).0));
                for k in matching.keys() {
                    state.etcd_keys.remove(k);
                }
                let history = &mut state.etcd_history;
                history.revision += 1;
                let revision = history.revision;
                history.revisions.extend(replaced.into_iter().map(|value| {
                    crate::guest::state::Replaced {
                        replaced_at: revision,
                        value,
                    }
                }));
            }
            Run::out(format!("{}\n", matching.len()))
        }
    }
}

/// `etcdctl compact REV`: the values replaced at or before `REV` leave the history for the
/// database's free pages.
fn compact(ctx: &mut Ctx<'_>, rest: &[String]) -> Run {
    let [revision] = rest else {
        return Run::fail(1, "Error: compact command needs 1 argument");
    };
    let Ok(revision) = revision.parse::<u64>() else {
        return Run::fail(1, format!("Error: bad revision {revision:?}"));
    };
    let history = &ctx.state().etcd_history;
    if revision > history.revision {
        return Run::fail(
            1,
            "Error: etcdserver: mvcc: required revision is a future revision",
        );
    }
    if revision <= history.compacted {
        return Run::fail(
            1,
            "Error: etcdserver: mvcc: required revision has been compacted",
        );
    }
    let history = &mut ctx.state_mut().etcd_history;
    let (freed, kept) = std::mem::take(&mut history.revisions)
        .into_iter()
        .partition(|r| r.replaced_at <= revision);
    history.revisions = kept;
    history.free_pages.extend(
        freed
            .into_iter()
            .map(|r: crate::guest::state::Replaced| r.value),
    );
    history.compacted = revision;
    Run::out(format!("compacted revision {revision}\n"))
}

/// `etcdctl defrag`: the database file rewritten without its free pages; the old file's blocks
/// are the filesystem's free space, untrimmed.
fn defrag(ctx: &mut Ctx<'_>) -> Run {
    let state = ctx.state_mut();
    let freed = std::mem::take(&mut state.etcd_history.free_pages);
    state.untrimmed_bytes += EtcdHistory::size(&freed);
    state.etcd_history.released.extend(freed);
    Run::out(format!("Finished defragmenting etcd member[{ENDPOINT}]\n"))
}

/// `etcdctl endpoint status -w json` (or `--write-out=json`): the revision, the database's size
/// and the part of it in use, as etcdctl prints them.
fn endpoint(ctx: &mut Ctx<'_>, rest: &[String]) -> Run {
    let json = matches!(
        rest.iter().map(String::as_str).collect::<Vec<_>>()[..],
        ["status", "-w", "json"]
            | ["status", "--write-out=json"]
            | ["status", "--write-out", "json"]
    );
    if !json {
        return Run::fail(
            1,
            format!(
                "etcdctl endpoint {} is not simulated (status -w json is)",
                rest.join(" ")
            ),
        );
    }
    let state = ctx.state();
    let history = &state.etcd_history;
    let live = EtcdHistory::size(&state.api_objects)
        + state.etcd_keys.iter().map(|k| k.len() as u64).sum::<u64>();
    let old: Vec<serde_json::Value> = history.revisions.iter().map(|r| r.value.clone()).collect();
    let in_use = live + EtcdHistory::size(&old);
    let size = in_use + EtcdHistory::size(&history.free_pages);
    let status = serde_json::json!([{
        "Endpoint": ENDPOINT,
        "Status": {
            "header": {"cluster_id": 1, "member_id": 1, "revision": history.revision, "raft_term": 2},
            "version": "3.5.21",
            "dbSize": size,
            "leader": 1,
            "raftIndex": history.revision,
            "raftTerm": 2,
            "raftAppliedIndex": history.revision,
            "dbSizeInUse": in_use,
        }
    }]);
    Run::out(format!("{status}\n"))
}
