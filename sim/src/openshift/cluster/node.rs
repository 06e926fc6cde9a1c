//! The kubelet's Node. A kubelet registers its Node when it starts (kubernetes
//! `pkg/kubelet/kubelet_node_status.go`, `registerWithAPIServer`) and reports its addresses
//! through the status setter `NodeAddress` (`pkg/kubelet/nodestatus/setters.go`): with
//! `--node-ip` — on an OpenShift node `KUBELET_NODE_IP` from the kubelet's drop-ins — the
//! InternalIP is that address, alongside a Hostname address; and it posts `Ready`.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Controllers, Error, MANAGER, now_rfc3339, post_params};
use crate::guest::state::{GuestState, paths};

impl Controllers {
    /// Registers the node and its status once per kubelet start (and when its name or address
    /// changes); nothing while the kubelet is down.
    pub(super) async fn node(&mut self, state: &GuestState) -> Result<(), Error> {
        if self.kubelet_since.is_none() || state.openshift_version.is_none() {
            self.node_registered = None;
            return Ok(());
        }
        let authenticated =
            kubelet_authenticates(state, self.guest.guest_now(), self.csr_trusted.as_deref());
        let wanted = (
            state.kubelet.node_name.clone(),
            state.kubelet.node_ip.clone(),
            authenticated,
        );
        if self.node_registered.as_ref() == Some(&wanted) {
            return Ok(());
        }
        let (name, ip, _) = &wanted;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "node-role.kubernetes.io/master": "",
                    "node-role.kubernetes.io/control-plane": "",
                    "node-role.kubernetes.io/worker": "",
                },
            },
        }))
        .map_err(|e| Error::Client(e.to_string()))?;
        match nodes.create(&post_params(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => return Err(Error::Kube(err)),
        }
        let now = now_rfc3339();
        // A kubelet the API server no longer accepts posts nothing; the node lifecycle
        // controller then marks the Node Unknown (after its grace period, not waited here).
        let ready = if authenticated {
            json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now, "lastTransitionTime": now})
        } else {
            tracing::warn!(
                "guest kubelet: Unauthorized (x509: certificate signed by unknown authority): its client certificate's issuer is no longer trusted"
            );
            json!({"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": now})
        };
        let status = json!({"status": {
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [ready],
        }});
        nodes
            .patch_status(
                name,
                &PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&status),
            )
            .await?;
        self.node_registered = Some(wanted);
        Ok(())
    }
}

/// Whether the API server accepts the kubelet's client certificate: valid at guest time `now`
/// and, when a CSR signer issued it (`kube-csr-signer_@…`), that signer in `trusted` (the CNs of
/// `csr-controller-ca`; `None` while the cluster has no CSR signer chain). Other issuers (the
/// installer's `kubelet-signer`) are outside the model and trusted.
pub fn kubelet_authenticates(state: &GuestState, now: i64, trusted: Option<&[String]>) -> bool {
    let Some(cert) = state.certificates.get(paths::KUBELET_CLIENT_CERT) else {
        return false;
    };
    let issuer = cert.issuer.trim_start_matches("CN=");
    let issuer = issuer.split(',').next().unwrap_or_default().trim();
    let valid = cert.not_before <= now && now < cert.not_after;
    valid
        && match trusted {
            Some(trusted) if issuer.starts_with("kube-csr-signer_@") => {
                trusted.iter().any(|cn| cn == issuer)
            }
            _ => true,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::state::Certificate;

    #[test]
    fn a_kubelet_signed_by_an_untrusted_csr_signer_cannot_post() {
        let mut state = GuestState::default();
        let now = 1_800_000_000;
        assert!(!kubelet_authenticates(&state, now, None), "no certificate");
        state.add_certificate(
            paths::KUBELET_CLIENT_CERT,
            Certificate {
                not_before: now - 60,
                not_after: now + 86_400,
                issuer: "CN=kube-csr-signer_@1".into(),
                subject: "O=system:nodes, CN=system:node:crc".into(),
            },
        );
        assert!(
            kubelet_authenticates(&state, now, None),
            "no chain modelled"
        );
        let trusted = ["kube-csr-signer_@1".to_owned()];
        assert!(kubelet_authenticates(&state, now, Some(&trusted)));
        let others = ["kube-csr-signer_@2".to_owned()];
        assert!(!kubelet_authenticates(&state, now, Some(&others)));
        assert!(
            !kubelet_authenticates(&state, now + 86_400, Some(&trusted)),
            "expired"
        );
    }
}
