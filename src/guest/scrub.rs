//! What sealing removes from the disk besides credentials and logs, as SNC's `snc.sh` and
//! `createdisk.sh` do (`docs/decisions.md`, "Customize, Seal, Publish, Validate, Ready"), done in
//! the guest:
//!
//! - **The image cache** keeps what the cluster runs and drops what only the install needed
//!   (`crictl rmi --prune`). `nodeip-configuration.service` runs before the kubelet and needs the
//!   `baremetal-runtimecfg` image, which no pod uses: an idle podman container pins it through the
//!   prune. A sealed disk cannot pull (its pull secret is `{}`), so a pruned runtimecfg image
//!   would leave every clone without a node IP.
//! - **etcd** loses its pod records (all but `openshift-network*`) and its leases, so a clone's
//!   first start does not wait for the build VM's pods and leaders to expire. The pods keep
//!   running when the kubelet stops (conmon holds them), so they are removed first; then a
//!   throwaway etcd from the cluster's own image serves `/var/lib/etcd` for `etcdctl`.
//!
//! The image references are read from the guest (the unit and the static pod manifest name them),
//! never from a release lookup on the host: the host has no pull secret to spare for it.

use super::cluster::{self, Patience, retry};
use super::{Command, Guest, GuestError};

/// The unit that needs the runtimecfg image before the kubelet starts.
/// What the kubelet pulls with on the node; a sealed disk holds `{}` there.
pub const KUBELET_PULL_SECRET: &str = "/var/lib/kubelet/config.json";
pub const NODE_IP_UNIT_FILE: &str = "/etc/systemd/system/nodeip-configuration.service";
/// The podman container that keeps the runtimecfg image through the prune (SNC's name).
pub const PIN_CONTAINER: &str = "baremetal_runtimecfg";
/// etcd's static pod manifest (JSON, as the static pod installer writes it).
pub const ETCD_MANIFEST: &str = "/etc/kubernetes/manifests/etcd-pod.yaml";
/// The throwaway etcd over `/var/lib/etcd`.
pub const SCRUB_CONTAINER: &str = "etcd-scrub";
const PODS: &str = "/kubernetes.io/pods/";
/// Pods of these namespaces stay: the network operator's pods hold the node's OVN state.
const KEPT_PODS: &str = "/kubernetes.io/pods/openshift-network";
const LEASES: &str = "/kubernetes.io/leases/";
/// etcd's answer to a compaction at or below the last one (`mvcc.ErrCompacted`).
const ALREADY_COMPACTED: &str = "required revision has been compacted";

/// Why a scrub failed; [`Error::reason`] is its helper reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step}: {source}")]
    Guest {
        step: &'static str,
        source: GuestError,
    },
    #[error("{path} names no {what} image")]
    NoImage {
        path: &'static str,
        what: &'static str,
    },
    #[error("the throwaway etcd did not answer: {0}")]
    Etcd(#[from] cluster::Error),
    #[error("etcd still holds {0} after the scrub")]
    NotScrubbed(String),
    #[error("`etcdctl endpoint status -w json` printed no revision: {0}")]
    NoRevision(String),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Guest { .. } | Error::Etcd(_) | Error::NoRevision(_) => "GuestStepFailed",
            Error::NoImage { .. } => "GuestLayoutUnexpected",
            Error::NotScrubbed(_) => "SealIncomplete",
        }
    }
}

fn guest_err(step: &'static str) -> impl Fn(GuestError) -> Error {
    move |source| Error::Guest { step, source }
}

async fn sudo<G: Guest>(guest: &G, step: &'static str, argv: &[&str]) -> Result<String, Error> {
    guest
        .run_checked(&Command::sudo(argv.iter().copied()))
        .await
        .map(|o| o.stdout_text())
        .map_err(guest_err(step))
}

/// The payload image a unit file runs (OpenShift references payload images by digest): the first
/// digest reference in an `ExecStart` command, whose continuation lines (a line ending in `\`)
/// are joined as systemd joins them — the MCO's `nodeip-configuration.service` puts the image
/// alone on a continuation line.
pub fn image_in_unit(unit: &str) -> Option<String> {
    let joined = unit.replace("\\\n", " ");
    joined
        .lines()
        .filter(|l| l.trim_start().starts_with("ExecStart"))
        .flat_map(|l| l.split(|c: char| c.is_whitespace() || c == '"' || c == '='))
        .find(|token| token.contains("@sha256:"))
        .map(str::to_owned)
}

/// The image of the container named `etcd` in etcd's static pod.
pub fn etcd_image(manifest: &[u8]) -> Option<String> {
    let pod: serde_json::Value = serde_json::from_slice(manifest).ok()?;
    pod.pointer("/spec/containers")?
        .as_array()?
        .iter()
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some("etcd"))?
        .get("image")?
        .as_str()
        .map(str::to_owned)
}

/// The podman containers by name, stopped ones too.
async fn containers<G: Guest>(guest: &G) -> Result<Vec<String>, Error> {
    let names = sudo(
        guest,
        "list the podman containers",
        &["podman", "ps", "-a", "--format", "{{.Names}}"],
    )
    .await?;
    Ok(names.lines().map(|l| l.trim().to_owned()).collect())
}

/// The runtimecfg image this guest's node IP unit needs.
pub async fn node_ip_image<G: Guest>(guest: &G) -> Result<String, Error> {
    let unit = guest
        .read_file(NODE_IP_UNIT_FILE)
        .await
        .map_err(guest_err("read the node IP unit"))?;
    image_in_unit(&String::from_utf8_lossy(&unit)).ok_or(Error::NoImage {
        path: NODE_IP_UNIT_FILE,
        what: "baremetal-runtimecfg",
    })
}

/// As SNC does after the install: the runtimecfg image pinned, every image no container uses
/// pruned, the pin removed. Runs while the kubelet runs, so the cluster's own images are in use
/// and stay.
/// Returns how many images the prune deleted.
pub async fn prune_images<G: Guest>(guest: &G) -> Result<usize, Error> {
    let image = node_ip_image(guest).await?;
    // A step retried after a crash finds its pin already there.
    if !containers(guest).await?.iter().any(|n| n == PIN_CONTAINER) {
        sudo(
            guest,
            "pin the node IP image",
            &[
                "podman",
                "create",
                "--authfile",
                KUBELET_PULL_SECRET,
                "--name",
                PIN_CONTAINER,
                &image,
            ],
        )
        .await?;
    }
    let pruned = sudo(
        guest,
        "prune the image cache",
        &["crictl", "rmi", "--prune"],
    )
    .await?;
    sudo(
        guest,
        "unpin the node IP image",
        &["podman", "rm", PIN_CONTAINER],
    )
    .await?;
    Ok(pruned.lines().filter(|l| l.starts_with("Deleted")).count())
}

/// Where an administrator's unit replaces CRI-O's `crio-wipe.service`.
pub const CRIO_WIPE_UNIT_FILE: &str = "/etc/systemd/system/crio-wipe.service";

/// SNC's stand-in for `crio-wipe.service` (snc `crio-wipe.service`, installed by
/// `createdisk.sh`): after a stop that was not clean, the stock unit removes CRI-O's whole
/// storage at the next boot (cri-o `internal/criocli/wipe.go`), and a sealed disk cannot pull
/// the images back. A lessee's VM killed rather than shut down would then come up without the
/// node IP image.
pub const NOOP_CRIO_WIPE: &str = "[Unit]\nDescription=crio-wipe replaced: a sealed CRC disk keeps its image store\nBefore=crio.service\nRequiresMountsFor=/var/lib/containers\n\n[Service]\nType=oneshot\nExecStart=/bin/true\n\n[Install]\nWantedBy=multi-user.target\n";

/// Puts [`NOOP_CRIO_WIPE`] in place of the stock unit.
pub async fn keep_image_store<G: Guest>(guest: &G) -> Result<(), Error> {
    guest
        .write_file(CRIO_WIPE_UNIT_FILE, NOOP_CRIO_WIPE.as_bytes(), 0o644)
        .await
        .map_err(guest_err("replace crio-wipe.service"))?;
    sudo(guest, "reload systemd", &["systemctl", "daemon-reload"]).await?;
    Ok(())
}

/// Whether the unit in place of `crio-wipe.service` is [`NOOP_CRIO_WIPE`].
pub async fn image_store_kept<G: Guest>(guest: &G) -> Result<bool, Error> {
    if !guest
        .exists(CRIO_WIPE_UNIT_FILE)
        .await
        .map_err(guest_err("look for the crio-wipe unit"))?
    {
        return Ok(false);
    }
    let unit = guest
        .read_file(CRIO_WIPE_UNIT_FILE)
        .await
        .map_err(guest_err("read the crio-wipe unit"))?;
    Ok(unit == NOOP_CRIO_WIPE.as_bytes())
}

/// Whether the node IP image is in the cache.
pub async fn node_ip_image_cached<G: Guest>(guest: &G) -> Result<bool, Error> {
    let image = node_ip_image(guest).await?;
    let output = guest
        .run(&Command::sudo([
            "podman",
            "image",
            "exists",
            image.as_str(),
        ]))
        .await
        .map_err(guest_err("look for the node IP image"))?;
    Ok(output.status == 0)
}

/// What the throwaway etcd prints for `etcdctl get --prefix PREFIX` (with `--keys-only`: each
/// key then an empty line; otherwise each key then its value).
async fn get<G: Guest>(guest: &G, prefix: &str, keys_only: bool) -> Result<String, GuestError> {
    let mut argv = vec![
        "podman",
        "exec",
        SCRUB_CONTAINER,
        "etcdctl",
        "get",
        "--prefix",
    ];
    if keys_only {
        argv.push("--keys-only");
    }
    argv.push(prefix);
    Ok(guest.run_checked(&Command::sudo(argv)).await?.stdout_text())
}

/// The etcd keys under `prefix`.
async fn keys<G: Guest>(guest: &G, prefix: &str) -> Result<Vec<String>, GuestError> {
    Ok(get(guest, prefix, true)
        .await?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The namespaces whose pod records go: every one but the network operator's.
pub fn scrubbed_pod_prefixes(keys: &[String]) -> Vec<String> {
    let mut prefixes: Vec<String> = keys
        .iter()
        .filter(|k| !k.starts_with(KEPT_PODS))
        .filter_map(|k| {
            let namespace = k.strip_prefix(PODS)?.split('/').next()?;
            Some(format!("{PODS}{namespace}/"))
        })
        .collect();
    prefixes.sort();
    prefixes.dedup();
    prefixes
}

/// Starts a throwaway etcd from the cluster's own image over `/var/lib/etcd`, once nothing holds
/// it (the kubelet stopped and its pods removed, or never started this boot).
pub async fn start_throwaway_etcd<G: Guest>(guest: &G) -> Result<(), Error> {
    let manifest = guest
        .read_file(ETCD_MANIFEST)
        .await
        .map_err(guest_err("read etcd's static pod"))?;
    let image = etcd_image(&manifest).ok_or(Error::NoImage {
        path: ETCD_MANIFEST,
        what: "etcd",
    })?;
    // A step retried after a crash may find the last throwaway etcd still running.
    if containers(guest)
        .await?
        .iter()
        .any(|n| n == SCRUB_CONTAINER)
    {
        sudo(
            guest,
            "remove the last throwaway etcd",
            &["podman", "rm", "-f", SCRUB_CONTAINER],
        )
        .await?;
    }
    sudo(
        guest,
        "start a throwaway etcd",
        &[
            "podman",
            "run",
            "-d",
            "--rm",
            "--name",
            SCRUB_CONTAINER,
            "--network",
            "host",
            "--privileged",
            "--entrypoint",
            "etcd",
            "-v",
            "/var/lib/etcd:/store",
            &image,
            "--data-dir",
            "/store",
        ],
    )
    .await?;
    Ok(())
}

/// Stops the throwaway etcd (`--rm`: it goes).
pub async fn stop_throwaway_etcd<G: Guest>(guest: &G) -> Result<(), Error> {
    sudo(
        guest,
        "stop the throwaway etcd",
        &["podman", "stop", SCRUB_CONTAINER],
    )
    .await
    .map(drop)
}

/// The values under `prefix`, as `etcdctl get --prefix` prints them (a key line, then its value
/// line), retried while the throwaway etcd comes up.
pub async fn values<G: Guest>(
    guest: &G,
    prefix: &str,
    ready: Patience,
) -> Result<Vec<(String, String)>, Error> {
    let text = retry("read etcd's values", ready, || get(guest, prefix, false)).await?;
    let mut lines = text.lines();
    let mut pairs = Vec::new();
    while let (Some(key), Some(value)) = (lines.next(), lines.next()) {
        pairs.push((key.to_owned(), value.to_owned()));
    }
    Ok(pairs)
}

/// The revision in `etcdctl endpoint status -w json` output.
pub fn status_revision(status: &str) -> Option<u64> {
    let parsed: serde_json::Value = serde_json::from_str(status.trim()).ok()?;
    parsed.get(0)?.pointer("/Status/header/revision")?.as_u64()
}

/// etcd keeps every value a write replaced until a compaction, and a compacted value's bytes
/// stay in the database file until a defragmentation: without both, the pull secret emptied in
/// the cluster and the renderings pruned would still be on the disk for every lessee to read.
/// The old database file's blocks are then free space for the trim that follows.
/// Returns the revision compacted at.
async fn compact_and_defragment<G: Guest>(guest: &G) -> Result<u64, Error> {
    let status = sudo(
        guest,
        "read etcd's revision",
        &[
            "podman",
            "exec",
            SCRUB_CONTAINER,
            "etcdctl",
            "endpoint",
            "status",
            "-w",
            "json",
        ],
    )
    .await?;
    let revision = status_revision(&status)
        .ok_or_else(|| Error::NoRevision(status.trim().chars().take(200).collect()))?;
    let compacted = guest
        .run(&Command::sudo([
            "podman",
            "exec",
            SCRUB_CONTAINER,
            "etcdctl",
            "compact",
            &revision.to_string(),
        ]))
        .await
        .map_err(guest_err("compact etcd"))?;
    // A step retried after a crash finds its compaction done (deleting nothing writes nothing).
    if !compacted.success() && !compacted.stderr_text().contains(ALREADY_COMPACTED) {
        return Err(Error::Guest {
            step: "compact etcd",
            source: GuestError::Failed {
                command: format!("etcdctl compact {revision}"),
                status: compacted.status,
                stderr: crate::text::tail_excerpt(&compacted.stderr_text()),
            },
        });
    }
    sudo(
        guest,
        "defragment etcd",
        &["podman", "exec", SCRUB_CONTAINER, "etcdctl", "defrag"],
    )
    .await?;
    Ok(revision)
}

/// What [`scrub_etcd`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdScrub {
    /// How many namespaces' pod records went.
    pub pod_namespaces: usize,
    /// The revision etcd was compacted at before its defragmentation.
    pub revision: u64,
}

/// SNC's etcd scrub (`createdisk.sh`), after the kubelet is stopped: the pods removed, a
/// throwaway etcd over `/var/lib/etcd`, pod records (but the network operator's) and leases
/// deleted and read back; then, beyond SNC, the history compacted away and the database
/// defragmented ([`compact_and_defragment`]).
pub async fn scrub_etcd<G: Guest>(guest: &G, ready: Patience) -> Result<EtcdScrub, Error> {
    sudo(
        guest,
        "remove the pods",
        &["crictl", "rmp", "--all", "--force"],
    )
    .await?;
    start_throwaway_etcd(guest).await?;
    let scrubbed = async {
        let pods = retry("read etcd's pod records", ready, || keys(guest, PODS)).await?;
        let prefixes = scrubbed_pod_prefixes(&pods);
        for prefix in prefixes.iter().map(String::as_str).chain([LEASES]) {
            sudo(
                guest,
                "delete etcd records",
                &[
                    "podman",
                    "exec",
                    SCRUB_CONTAINER,
                    "etcdctl",
                    "del",
                    "--prefix",
                    prefix,
                ],
            )
            .await?;
        }
        let read_back = guest_err("read etcd back");
        let mut left = keys(guest, PODS).await.map_err(&read_back)?;
        left.extend(keys(guest, LEASES).await.map_err(&read_back)?);
        left.retain(|k| !k.starts_with(KEPT_PODS));
        if let Some(first) = left.first() {
            return Err(Error::NotScrubbed(format!(
                "{} records, the first {first}",
                left.len()
            )));
        }
        let revision = compact_and_defragment(guest).await?;
        Ok(EtcdScrub {
            pod_namespaces: prefixes.len(),
            revision,
        })
    }
    .await;
    // Stopped whatever happened: a running etcd would hold the data directory.
    let stopped = stop_throwaway_etcd(guest).await;
    let scrubbed = scrubbed?;
    stopped?;
    Ok(scrubbed)
}

/// What [`start_throwaway_etcd`] runs on a guest with no container yet, answered.
#[cfg(test)]
pub(crate) fn expect_throwaway_etcd_start(guest: &super::fake::ScriptedGuest) {
    use super::Output;
    guest.expect(
        "sudo cat /etc/kubernetes/manifests/etcd-pod.yaml",
        Output::ok(r#"{"spec":{"containers":[{"name":"etcd","image":"e@sha256:1"}]}}"#),
    );
    guest.expect("sudo podman ps -a --format '{{.Names}}'", Output::ok(""));
    guest.expect(
        "sudo podman run -d --rm --name etcd-scrub --network host --privileged --entrypoint etcd -v /var/lib/etcd:/store e@sha256:1 --data-dir /store",
        Output::ok("abc\n"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtimecfg_image_is_read_from_the_unit_and_etcds_from_its_pod() {
        let unit = "[Service]\nType=oneshot\nExecStart=/bin/bash -c \"until /usr/bin/podman run --rm --authfile /var/lib/kubelet/config.json --net=host quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:abc node-ip set 192.168.126.11; do sleep 5; done\"\n";
        assert_eq!(
            image_in_unit(unit).as_deref(),
            Some("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:abc")
        );
        assert_eq!(image_in_unit("[Service]\nExecStart=/bin/true\n"), None);
        // As the MCO renders it: the command continued over lines, the image alone on one, and a
        // digest in a comment or another key is not the command's.
        let rendered = "[Service]\n# was @sha256:old\nType=oneshot\nExecStart=/bin/bash -c \" \\\n  until \\\n  /usr/bin/podman run --rm \\\n  --net=host \\\n  quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:def \\\n  node-ip \\\n  set; \\\n  do \\\n  sleep 5; \\\n  done\"\nExecStart=/bin/systemctl daemon-reload\n";
        assert_eq!(
            image_in_unit(rendered).as_deref(),
            Some("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:def")
        );

        let pod = br#"{"spec":{"containers":[{"name":"etcdctl","image":"a@sha256:1"},{"name":"etcd","image":"b@sha256:2"}]}}"#;
        assert_eq!(etcd_image(pod).as_deref(), Some("b@sha256:2"));
        assert_eq!(etcd_image(b"kind: Pod"), None);
    }

    #[tokio::test]
    async fn a_record_left_after_the_scrub_fails_it_and_the_throwaway_etcd_still_stops() {
        use crate::guest::Output;
        use crate::guest::fake::ScriptedGuest;

        let guest = ScriptedGuest::new();
        guest.expect("sudo crictl rmp --all --force", Output::ok(""));
        expect_throwaway_etcd_start(&guest);
        let get = |prefix: &str| {
            format!("sudo podman exec etcd-scrub etcdctl get --prefix --keys-only {prefix}")
        };
        // Not up yet, then up.
        guest.expect(get(PODS), Output::failed(1, "connection refused"));
        guest.expect(
            get(PODS),
            Output::ok("/kubernetes.io/pods/openshift-etcd/etcd-crc\n\n/kubernetes.io/pods/openshift-network-operator/n\n"),
        );
        guest.expect(
            "sudo podman exec etcd-scrub etcdctl del --prefix /kubernetes.io/pods/openshift-etcd/",
            Output::ok("1\n"),
        );
        guest.expect(
            "sudo podman exec etcd-scrub etcdctl del --prefix /kubernetes.io/leases/",
            Output::ok("0\n"),
        );
        guest.expect(
            get(PODS),
            Output::ok("/kubernetes.io/pods/openshift-network-operator/n\n"),
        );
        guest.expect(
            get(LEASES),
            Output::ok("/kubernetes.io/leases/kube-node-lease/crc\n"),
        );
        guest.expect("sudo podman stop etcd-scrub", Output::ok(""));
        let patience = Patience::new(
            std::time::Duration::from_millis(1),
            std::time::Duration::from_secs(5),
        );
        let err = scrub_etcd(&guest, patience).await.unwrap_err();
        assert!(
            matches!(&err, Error::NotScrubbed(left) if left.contains("kube-node-lease")),
            "{err}"
        );
        assert_eq!(err.reason(), "SealIncomplete");
        assert_eq!(
            guest.calls().last().map(String::as_str),
            Some("sudo podman stop etcd-scrub")
        );
    }

    #[test]
    fn pod_records_go_by_namespace_except_the_network_operators() {
        let keys: Vec<String> = [
            "/kubernetes.io/pods/openshift-etcd/etcd-crc",
            "/kubernetes.io/pods/openshift-etcd/installer-1-crc",
            "/kubernetes.io/pods/openshift-network-operator/network-operator-x",
            "/kubernetes.io/pods/openshift-network-diagnostics/check-y",
            "/kubernetes.io/pods/openshift-ingress/router-default-z",
        ]
        .map(str::to_owned)
        .to_vec();
        assert_eq!(
            scrubbed_pod_prefixes(&keys),
            [
                "/kubernetes.io/pods/openshift-etcd/",
                "/kubernetes.io/pods/openshift-ingress/"
            ]
        );
    }

    #[tokio::test]
    async fn a_retried_compaction_finds_it_done_and_any_other_refusal_fails() {
        use crate::guest::Output;
        use crate::guest::fake::ScriptedGuest;

        let status = "sudo podman exec etcd-scrub etcdctl endpoint status -w json";
        let answer = r#"[{"Endpoint":"127.0.0.1:2379","Status":{"header":{"cluster_id":1,"member_id":1,"revision":412,"raft_term":2},"version":"3.5.21","dbSize":9000,"dbSizeInUse":4000}}]"#;
        let compact = "sudo podman exec etcd-scrub etcdctl compact 412";
        let defrag = "sudo podman exec etcd-scrub etcdctl defrag";
        let guest = ScriptedGuest::new();
        guest.expect(status, Output::ok(answer));
        guest.expect(compact, Output::ok("compacted revision 412\n"));
        guest.expect(defrag, Output::ok(""));
        guest.expect(status, Output::ok(answer));
        guest.expect(
            compact,
            Output::failed(
                1,
                "Error: etcdserver: mvcc: required revision has been compacted",
            ),
        );
        guest.expect(defrag, Output::ok(""));
        guest.expect(status, Output::ok(answer));
        guest.expect(
            compact,
            Output::failed(
                1,
                "Error: etcdserver: mvcc: required revision is a future revision",
            ),
        );
        assert_eq!(compact_and_defragment(&guest).await.unwrap(), 412);
        assert_eq!(compact_and_defragment(&guest).await.unwrap(), 412);
        let err = compact_and_defragment(&guest).await.unwrap_err();
        assert!(err.to_string().contains("future revision"), "{err}");
        assert_eq!(
            guest.calls().last().map(String::as_str),
            Some(compact),
            "no defrag"
        );

        assert_eq!(status_revision("[]"), None);
        assert_eq!(status_revision("not json"), None);
    }
}
