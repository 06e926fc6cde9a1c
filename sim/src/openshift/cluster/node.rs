//! The kubelet's Node. A kubelet registers its Node when it starts (kubernetes
//! `pkg/kubelet/kubelet_node_status.go`, `registerWithAPIServer`) and reports its addresses
//! through the status setter `NodeAddress` (`pkg/kubelet/nodestatus/setters.go`): with
//! `--node-ip` — on an OpenShift node `KUBELET_NODE_IP` from the kubelet's drop-ins — the
//! InternalIP is that address, alongside a Hostname address; and it posts `Ready`.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Controllers, Error, MANAGER, now_rfc3339, post_params};
use crate::guest::state::GuestState;

impl Controllers {
    /// Registers the node and its status once per kubelet start (and when its name or address
    /// changes); nothing while the kubelet is down.
    pub(super) async fn node(&mut self, state: &GuestState) -> Result<(), Error> {
        if self.kubelet_since.is_none() || state.openshift_version.is_none() {
            self.node_registered = None;
            return Ok(());
        }
        let wanted = (
            state.kubelet.node_name.clone(),
            state.kubelet.node_ip.clone(),
        );
        if self.node_registered.as_ref() == Some(&wanted) {
            return Ok(());
        }
        let (name, ip) = &wanted;
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
        let status = json!({"status": {
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
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
