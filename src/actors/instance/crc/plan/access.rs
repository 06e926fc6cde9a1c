//! The walk's way into the guest and out to the user: the agent's RBAC, the Service and Route,
//! the instance identity and guest key, the crc-agent Job, and the published kubeconfig.

use super::*;

impl Walk<'_> {
    /// The agent's Role (its VMI and that VMI's handoff, by name), ServiceAccount and
    /// RoleBinding, all the instance's own.
    pub(super) fn agent_access(&mut self, vmi_uid: &str) -> Flow<()> {
        let o = self.o;
        let wanted_role = res::agent_role(self.instance, vmi_uid);
        let role_name = res::agent_role_name(&self.name);
        match &o.agent_role {
            None => self.create(New::Role(Box::new(wanted_role))),
            Some(role) if !self.controlled(role) => return Err(self.conflict(role)),
            Some(role)
                if !res::rules_match(
                    role.rules.as_deref().unwrap_or_default(),
                    wanted_role.rules.as_deref().unwrap_or_default(),
                ) =>
            {
                // A new VMI names a new handoff; anything else is put back.
                self.actions.push(Action::RepairRole {
                    name: role_name,
                    rules: wanted_role.rules.unwrap_or_default(),
                });
            }
            Some(_) => {}
        }
        match &o.agent_account {
            None => self.create(New::ServiceAccount(Box::new(res::agent_service_account(
                self.instance,
            )))),
            Some(sa) if !self.controlled(sa) => return Err(self.conflict(sa)),
            Some(_) => {}
        }
        let wanted = res::agent_role_binding(self.instance);
        let binding_name = res::agent_binding_name(&self.name);
        match &o.agent_binding {
            None => self.create(New::RoleBinding(Box::new(wanted))),
            Some(rb) if !self.controlled(rb) => return Err(self.conflict(rb)),
            Some(rb) if rb.role_ref != wanted.role_ref => {
                // Ours, bound elsewhere (an earlier version bound every agent to one
                // ClusterRole): a roleRef cannot change, so it is made again.
                self.actions.push(Action::Delete(Delete {
                    kind: DeleteKind::RoleBinding,
                    name: binding_name.clone(),
                    uid: rb.uid().unwrap_or_default(),
                }));
                return Err(Stop::recorded(format!(
                    "replacing RoleBinding {}/{binding_name}, bound to {} {}, with one to the instance's Role",
                    self.ns, rb.role_ref.kind, rb.role_ref.name
                )));
            }
            Some(rb) if rb.subjects != wanted.subjects => {
                self.actions.push(Action::RepairRoleBinding {
                    name: binding_name,
                    subjects: wanted.subjects.unwrap_or_default(),
                });
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// The Route and its host: kept once chosen, recorded in `apiEndpoint` before the Route is
    /// created, and unique across the cluster.
    pub(super) fn ensure_route(&mut self) -> Flow<String> {
        let o = self.o;
        let route_name = res::api_route_name(&self.name);
        if let Some(route) = &o.route
            && !self.controlled(route)
        {
            return Err(self.conflict(route));
        }
        let recorded = self
            .status
            .api_endpoint
            .as_deref()
            .and_then(|e| e.strip_prefix("https://"))
            .map(str::to_owned);
        let from_identity = o
            .identity
            .as_ref()
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(identity::SERVING_CRT))
            .and_then(|ByteString(b)| identity::serving_host(&String::from_utf8_lossy(b)));
        let known = o
            .route
            .as_ref()
            .and_then(|r| r.spec.host.clone())
            .filter(|h| !h.is_empty())
            .or(from_identity)
            .or(recorded.clone());
        let host = match (known, &o.ingress_domain) {
            (Some(host), _) => host,
            (None, Some(domain)) => res::route_host(&self.ns, &self.name, domain)
                .map_err(|e| Stop::failed(reasons::API_ENDPOINT_CONFLICT, e.to_string()))?,
            (None, None) => {
                return Err(Stop::pending(
                    reasons::CRC_BACKING_PENDING,
                    "the cluster ingress domain is unknown: ingresses.config.openshift.io/cluster \
                     has no spec.domain",
                ));
            }
        };
        if let Some(recorded) = &recorded
            && recorded != &host
        {
            return Err(Stop::failed(
                reasons::API_ENDPOINT_CONFLICT,
                format!(
                    "the API endpoint https://{recorded} recorded in status disagrees with host \
                     {host} of Route {route_name} or of the identity Secret"
                ),
            ));
        }
        // Uniqueness is checked before our Route exists; afterwards the router admits the oldest
        // Route of a host, which is ours.
        if o.route.is_some() {
            return Ok(host);
        }
        if let Some(other) = o.route_hosts.iter().find(|r| r.host == host) {
            return Err(Stop::failed(
                reasons::API_ENDPOINT_CONFLICT,
                format!(
                    "host {host} is already used by Route {}/{}",
                    other.namespace, other.name
                ),
            ));
        }
        if recorded.is_none() {
            self.status.api_endpoint = Some(format!("https://{host}"));
            return Err(Stop::recorded(format!(
                "API endpoint https://{host} chosen"
            )));
        }
        let route = res::api_route(self.instance, &host);
        self.create(New::Route(Box::new(route)));
        Ok(host)
    }

    /// The identity Secret: created once, then validated on every pass, never replaced.
    pub(super) fn ensure_identity(&mut self, host: &str) -> Flow<Option<Identity>> {
        let name = res::identity_secret_name(&self.name);
        match &self.o.identity {
            None => {
                self.actions.push(Action::CreateIdentity {
                    host: host.to_owned(),
                });
                Ok(None)
            }
            Some(secret) if !self.controlled(secret) => Err(self.conflict(secret)),
            Some(secret) => {
                let data = secret.data.clone().unwrap_or_default();
                Identity::from_secret_data(&data)
                    .and_then(|i| {
                        identity::validate(&i, host, self.now.0.as_second()).map(|()| Some(i))
                    })
                    .map_err(|e| {
                        Stop::failed(
                            reasons::RECONCILE_ERROR,
                            format!(
                                "identity Secret {}/{name} is not valid for {host}: {e}; it is \
                                 never replaced automatically because published kubeconfigs \
                                 trust it",
                                self.ns
                            ),
                        )
                    })
            }
        }
    }

    /// The instance's guest key Secret: created once, then checked on every pass, never
    /// replaced (the guest authorizes only it).
    pub(super) fn ensure_guest_key(&mut self) -> Flow<()> {
        let name = res::guest_key_secret_name(&self.name);
        match &self.o.guest_key {
            // The guest authorizes only the lost key: a new one would never open it, and the
            // bundle key was revoked. Only a fresh clone of the disk is reachable again.
            None if self.keyed() => Err(Stop::failed(
                reasons::BOOT_KEY_UNAVAILABLE,
                format!(
                    "guest key Secret {}/{name} is gone, and the guest on DataVolume {} \
                         authorizes only that key; the crc-agent can never reach it again: \
                         delete the DataVolume (the instance clones a fresh disk) or the instance",
                    self.ns,
                    res::root_disk_name(&self.name)
                ),
            )),
            None => {
                self.actions.push(Action::CreateGuestKey);
                Ok(())
            }
            Some(secret) if !self.controlled(secret) => Err(self.conflict(secret)),
            Some(secret) => {
                let key = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(res::GUEST_KEY_PRIVATE))
                    .map(|ByteString(b)| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                match crate::guest::keys::parse_private_key(&key) {
                    Ok(_) => Ok(()),
                    Err(e) => Err(Stop::failed(
                        reasons::RECONCILE_ERROR,
                        format!(
                            "guest key Secret {}/{name} holds no usable {}: {e}; it is never \
                             replaced automatically because the guest authorizes only that \
                             key (delete the Secret and the root DataVolume {} to start the \
                             guest over)",
                            self.ns,
                            res::GUEST_KEY_PRIVATE,
                            res::root_disk_name(&self.name)
                        ),
                    )),
                }
            }
        }
    }

    /// No handoff yet: the agent Job for this VMI exists (or is created), and how it is doing.
    pub(super) fn agent(&mut self, inputs: &AgentJobInputs) -> Stop {
        let job_name = res::agent_job_name(&self.name, &inputs.vmi_uid);
        let Some(job) = &self.o.agent_job else {
            self.create(New::Job(Box::new(res::agent_job(self.instance, inputs))));
            let message = format!("crc-agent Job {job_name} created");
            self.condition(
                types::CRC_AGENT,
                "Unknown",
                reasons::AGENT_POD_PENDING,
                &message,
            );
            // The Job's events (owned) wake the instance.
            return Stop::watched(reasons::AGENT_POD_PENDING, message);
        };
        if !self.controlled(job) {
            return self.conflict(job);
        }
        let diagnosis = agent::diagnose(job, &self.o.agent_pods, &self.o.agent_events, self.now.0);
        self.condition(
            types::CRC_AGENT,
            diagnosis.status,
            diagnosis.reason,
            &diagnosis.message,
        );
        Stop {
            reason: diagnosis.reason,
            message: diagnosis.message,
            failed: diagnosis.failed,
            // The Job and the handoff Secret are watched, but the diagnosis also reads the
            // agent's pods and Events, which are not.
            requeue: Some(UNWATCHED_RECHECK),
        }
    }

    /// `<instance>-kubeconfig` holds the operator's kubeconfig (rebuilt if deleted or drifted;
    /// one the instance does not control is a conflict, never taken over).
    pub(super) fn publish_kubeconfig(&mut self, kubeconfig: &[u8], ocp_version: &str) -> Flow<()> {
        let wanted = res::kubeconfig_secret(self.instance, kubeconfig, ocp_version);
        match &self.o.kubeconfig {
            None => self.create(New::Secret(Box::new(wanted))),
            Some(existing) => {
                if !self.controlled(existing) {
                    return Err(self.conflict(existing));
                }
                if existing.data != wanted.data {
                    self.actions
                        .push(Action::UpdateKubeconfig(Box::new(wanted)));
                }
            }
        }
        Ok(())
    }
}
