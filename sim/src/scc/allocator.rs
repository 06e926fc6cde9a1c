//! cluster-policy-controller's namespace SCC allocation: every namespace without ranges gets the
//! lowest free block of 10,000 IDs from 1,000,000,000 (as its UID range and its group range) and
//! an SELinux MCS level of its own, as annotations; admission reads them from there.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::{Block, MCS, NamespaceRanges, Namespaces, SUPPLEMENTAL_GROUPS, UID_RANGE};
use crate::Error;

/// The default range: `1000000000-1999999999/10000`.
const FIRST_ID: u32 = 1_000_000_000;
const BLOCK_SIZE: u32 = 10_000;
const BLOCKS: u32 = 100_000;
const FIELD_MANAGER: &str = "guestcluster-sim-scc";

/// Block `index` of the default range.
pub fn block(index: u32) -> Block {
    Block {
        first: FIRST_ID + index * BLOCK_SIZE,
        size: BLOCK_SIZE,
    }
}

/// Labels per namespace: block `i` takes the `5 i`-th label (`MCSLabelsPerProject`).
const LABELS_PER_BLOCK: u32 = 5;

/// The MCS level of block `index`: two categories, the `5 index`-th pair in co-lexicographic
/// order (`{0,1}`, `{0,2}`, `{1,2}`, `{0,3}`, …), printed larger first: `s0:c1,c0`, `s0:c3,c2`.
pub fn mcs_level(index: u32) -> String {
    let rank = index * LABELS_PER_BLOCK;
    let mut high = 1;
    let mut before = 0;
    while before + high <= rank {
        before += high;
        high += 1;
    }
    format!("s0:c{high},c{}", rank - before)
}

/// The block index of an allocated UID range, if it is one of the default range's.
fn index_of(range: &str) -> Option<u32> {
    let block = Block::parse(range)?;
    let offset = block.first.checked_sub(FIRST_ID)?;
    (block.size == BLOCK_SIZE && offset % BLOCK_SIZE == 0).then_some(offset / BLOCK_SIZE)
}

/// The lowest block no namespace holds.
pub fn next_free(used: &BTreeSet<u32>) -> Option<u32> {
    (0..BLOCKS).find(|i| !used.contains(i))
}

/// Watches namespaces: records every namespace's ranges for admission and allocates ranges to
/// those without. Level-triggered: allocations are re-derived from the annotations, so a restart
/// never hands out a block twice.
pub async fn run(client: Client, namespaces: Namespaces) -> Result<(), Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut known: BTreeMap<String, NamespaceRanges> = BTreeMap::new();
    let mut events = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                tracing::debug!("scc allocator: watch: {err}");
                continue;
            }
        };
        match event {
            watcher::Event::Apply(ns) | watcher::Event::InitApply(ns) => {
                if ns.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let ranges = NamespaceRanges::from_annotations(ns.annotations());
                namespaces.set(&ns.name_any(), ranges.clone());
                known.insert(ns.name_any(), ranges);
                if known.get(&ns.name_any()).is_some_and(|r| r.uids.is_none()) {
                    allocate(&client, &ns.name_any(), &mut known, &namespaces).await;
                }
            }
            watcher::Event::Delete(ns) => {
                namespaces.remove(&ns.name_any());
                known.remove(&ns.name_any());
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
    Ok(())
}

async fn allocate(
    client: &Client,
    name: &str,
    known: &mut BTreeMap<String, NamespaceRanges>,
    namespaces: &Namespaces,
) {
    let used: BTreeSet<u32> = known
        .values()
        .filter_map(|r| r.uids.as_deref().and_then(index_of))
        .collect();
    let Some(index) = next_free(&used) else {
        tracing::warn!(namespace = name, "scc allocator: no free UID block");
        return;
    };
    let range = block(index).to_string();
    let ranges = NamespaceRanges {
        uids: Some(range.clone()),
        groups: Some(range.clone()),
        mcs: Some(mcs_level(index)),
    };
    let patch = json!({"metadata": {"annotations": {
        UID_RANGE: range, SUPPLEMENTAL_GROUPS: range, MCS: ranges.mcs,
    }}});
    let api: Api<Namespace> = Api::all(client.clone());
    // A failed write is retried here: nothing else about the namespace may ever change again.
    for attempt in 1..=10 {
        match api
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                namespaces.set(name, ranges.clone());
                known.insert(name.to_owned(), ranges);
                return;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => return,
            Err(err) => {
                tracing::debug!(namespace = name, attempt, "scc allocator: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_levels_are_handed_out_lowest_first() {
        assert_eq!(block(0).to_string(), "1000000000/10000");
        assert_eq!(block(65).to_string(), "1000650000/10000");
        assert_eq!(index_of("1000650000/10000"), Some(65));
        assert_eq!(index_of("5/10000"), None);
        let used = BTreeSet::from([0, 1, 3]);
        assert_eq!(next_free(&used), Some(2));
        // Upstream's: 1000650000 → s0:c26,c0; 1000680000 → s0:c26,c15.
        let levels: Vec<String> = [0, 1, 65, 66, 68, 71].map(mcs_level).into();
        assert_eq!(
            levels,
            [
                "s0:c1,c0",
                "s0:c3,c2",
                "s0:c26,c0",
                "s0:c26,c5",
                "s0:c26,c15",
                "s0:c27,c4"
            ]
        );
    }
}
