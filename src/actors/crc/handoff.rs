//! From the agent to Ready: the crc-agent Job of the current VMI and its diagnosis while no
//! handoff exists, then the published kubeconfig and the Ready status.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};

use super::{Error, Flow, PROVISIONING_REQUEUE, Pass, Stop, agent, go, stop};
use crate::api::common::LocalRef;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::InstancePhase;
use crate::resources::instance::{self as res, AgentJobInputs};

impl Pass<'_> {
    /// No handoff yet: make sure the agent Job for this VMI exists and say how it is doing.
    pub(super) async fn agent(&mut self, inputs: &AgentJobInputs) -> Flow<()> {
        let jobs = self.api::<Job>();
        let job_name = res::agent_job_name(&self.name, &inputs.vmi_uid);
        let Some(job) = self.get(&jobs, &job_name).await? else {
            self.create(&jobs, &res::agent_job(self.instance, inputs))
                .await?;
            self.condition(
                types::CRC_AGENT,
                "Unknown",
                reasons::AGENT_POD_PENDING,
                &format!("crc-agent Job {job_name} created"),
            );
            return stop(Stop::pending(
                reasons::AGENT_POD_PENDING,
                format!("crc-agent Job {job_name} created"),
            ));
        };
        if !self.controlled(&job) {
            return stop(self.conflict(&job));
        }
        let pods = self
            .api::<Pod>()
            .list(
                &ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job_name}")),
            )
            .await
            .map_err(self.err("listing", format!("pods of Job {job_name}")))?
            .items;
        let events = self.agent_events(&job_name, &pods).await?;
        let diagnosis = agent::diagnose(&job, &pods, &events, self.now.0);
        self.condition(
            types::CRC_AGENT,
            diagnosis.status,
            diagnosis.reason,
            &diagnosis.message,
        );
        stop(Stop {
            reason: diagnosis.reason,
            message: diagnosis.message,
            failed: diagnosis.failed,
            requeue: PROVISIONING_REQUEUE,
        })
    }

    /// Events that explain a pod that is not created (the Job's, while it has no pod) or does not
    /// start (a Pending pod's); a running or finished agent needs none, so none are read.
    pub(super) async fn agent_events(&self, job: &str, pods: &[Pod]) -> Result<Vec<Event>, Error> {
        let names: Vec<String> = if pods.is_empty() {
            vec![job.to_owned()]
        } else {
            pods.iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
                .map(|p| p.name_any())
                .collect()
        };
        let mut events = Vec::new();
        for name in names {
            let selector = format!("involvedObject.name={name}");
            events.extend(
                self.api::<Event>()
                    .list(&ListParams::default().fields(&selector))
                    .await
                    .map_err(self.err("listing", format!("Events of {name}")))?
                    .items,
            );
        }
        Ok(events)
    }

    /// `<instance>-kubeconfig` holds the handoff's kubeconfig (rebuilt if deleted or drifted).
    pub(super) async fn publish_kubeconfig(&self, handoff: &agent::Handoff) -> Flow<()> {
        let secrets = self.api::<Secret>();
        let wanted =
            res::kubeconfig_secret(self.instance, &handoff.kubeconfig, &handoff.ocp_version);
        let name = res::kubeconfig_secret_name(&self.name);
        match self.get(&secrets, &name).await? {
            None => self.create(&secrets, &wanted).await?,
            Some(existing) => {
                let owners = existing.owner_references();
                if !owners.is_empty() && !self.controlled(&existing) {
                    return stop(self.conflict(&existing));
                }
                if existing.data != wanted.data || owners.is_empty() {
                    let patch = serde_json::json!({
                        "metadata": {"ownerReferences": wanted.metadata.owner_references,
                                     "labels": wanted.metadata.labels},
                        "data": wanted.data,
                    });
                    secrets
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(self.err("updating", format!("Secret {name}")))?;
                }
            }
        }
        go(())
    }

    pub(super) fn mark_ready(&mut self, ocp_version: &str, host: &str) {
        let name = self.name.clone();
        conditions::remove(&mut self.status.conditions, types::CRC_AGENT);
        self.status.phase = Some(InstancePhase::Ready);
        self.status.ocp_version = Some(ocp_version.to_owned()).filter(|v| !v.is_empty());
        self.status.topology = Some(self.instance.spec.type_);
        self.status.api_endpoint = Some(format!("https://{host}"));
        self.status.kubeconfig_secret_ref = Some(LocalRef {
            name: res::kubeconfig_secret_name(&name),
        });
        self.condition(
            types::READY,
            "True",
            reasons::BACKING_RESOURCES_AVAILABLE,
            &format!(
                "the guest API at https://{host} is ready; kubeconfig in Secret {}",
                res::kubeconfig_secret_name(&name)
            ),
        );
        let wanted = self.instance.spec.template.ocp_version.clone();
        let mismatch = !wanted.is_empty() && !ocp_version.is_empty() && wanted != ocp_version;
        let (status, reason, message) = if mismatch {
            (
                "True",
                reasons::OCP_VERSION_MISMATCH,
                format!("the template asks for {wanted} but the guest runs {ocp_version}"),
            )
        } else {
            (
                "False",
                reasons::OCP_VERSION_MATCHES,
                format!("the guest runs {ocp_version}"),
            )
        };
        self.condition(types::VERSION_MISMATCH, status, reason, &message);
    }
}
