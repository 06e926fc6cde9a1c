//! The environment of a container process.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, EnvVar, ObjectFieldSelector, Pod};

use super::super::expand::expand;
use super::volumes::source_data;
use super::{Host, Inputs, Mount, PlanError, rewrite};

/// An environment in definition order; a redefined name keeps its place and takes the new
/// value, as in a container.
#[derive(Debug, Default)]
pub(super) struct Env {
    vars: Vec<EnvEntry>,
}

#[derive(Debug)]
struct EnvEntry {
    name: String,
    value: String,
    /// Set by the container (a container path to rewrite), not by the simulation (a host path).
    from_container: bool,
}

impl Env {
    fn set(&mut self, name: &str, value: String, from_container: bool) {
        match self.vars.iter_mut().find(|v| v.name == name) {
            Some(entry) => {
                entry.value = value;
                entry.from_container = from_container;
            }
            None => self.vars.push(EnvEntry {
                name: name.to_owned(),
                value,
                from_container,
            }),
        }
    }

    pub(super) fn get(&self, name: &str) -> Option<String> {
        self.vars
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.clone())
    }
}

/// The container's environment as the container sees it (before path rewriting): the
/// simulation's defaults, then `envFrom`, then `env`, each `env` value expanded against the
/// variables defined before it.
pub(super) fn container_env(
    pod: &Pod,
    container: &Container,
    inputs: &Inputs,
    host: &Host,
) -> Result<Env, PlanError> {
    let meta = &pod.metadata;
    let mut env = Env::default();
    let sandbox = |sub: &str| host.sandbox.join(sub).display().to_string();
    env.set("HOSTNAME", meta.name.clone().unwrap_or_default(), false);
    env.set("HOME", sandbox("home"), false);
    env.set("TMPDIR", sandbox("tmp"), false);
    env.set(
        "POD_NAMESPACE",
        meta.namespace.clone().unwrap_or_default(),
        false,
    );
    for (name, value) in env_from(container, inputs)? {
        env.set(&name, value, true);
    }
    for var in container.env.as_deref().unwrap_or_default() {
        if let Some(value) = env_value(pod, var, &env, inputs, host)? {
            env.set(&var.name, value, true);
        }
    }
    Ok(env)
}

/// The final environment: container values with container paths rewritten, then what the
/// simulation must control (`KUBECONFIG` standing in for in-cluster config when the container
/// has service account credentials, `PATH` for the fake tools).
pub(super) fn process_env(
    env: &Env,
    mounts: &[Mount],
    kubeconfig: Option<&Path>,
    host: &Host,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env
        .vars
        .iter()
        .filter(|v| v.name != "KUBECONFIG" && v.name != "PATH")
        .map(|v| {
            let value = if v.from_container {
                rewrite(&v.value, mounts)
            } else {
                v.value.clone()
            };
            (v.name.clone(), value)
        })
        .collect();
    if let Some(kubeconfig) = kubeconfig {
        out.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    }
    out.push((
        "PATH".into(),
        format!("{}:{}", host.tools_bin.display(), host.host_path),
    ));
    out
}

fn env_from(container: &Container, inputs: &Inputs) -> Result<Vec<(String, String)>, PlanError> {
    let mut vars = Vec::new();
    for from in container.env_from.as_deref().unwrap_or_default() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(secret) = &from.secret_ref {
            source_data("secret", &secret.name, &inputs.secrets, secret.optional)?
        } else if let Some(cm) = &from.config_map_ref {
            source_data("configmap", &cm.name, &inputs.config_maps, cm.optional)?
        } else {
            continue;
        };
        for (key, value) in data {
            vars.push((
                format!("{prefix}{key}"),
                String::from_utf8_lossy(&value).into_owned(),
            ));
        }
    }
    Ok(vars)
}

/// The value of one `env` entry; `None` for an optional reference that is missing.
fn env_value(
    pod: &Pod,
    var: &EnvVar,
    defined: &Env,
    inputs: &Inputs,
    host: &Host,
) -> Result<Option<String>, PlanError> {
    let Some(source) = &var.value_from else {
        let value = var.value.as_deref().unwrap_or_default();
        return Ok(Some(expand(value, |n| defined.get(n))));
    };
    if let Some(field) = &source.field_ref {
        return field_value(pod, field, host).map(Some);
    }
    let (kind, all, name, key, optional) = if let Some(sel) = &source.secret_key_ref {
        ("secret", &inputs.secrets, &sel.name, &sel.key, sel.optional)
    } else if let Some(sel) = &source.config_map_key_ref {
        (
            "configmap",
            &inputs.config_maps,
            &sel.name,
            &sel.key,
            sel.optional,
        )
    } else {
        return Err(PlanError::Unsupported(format!(
            "env {:?}: only fieldRef, secretKeyRef and configMapKeyRef are simulated",
            var.name
        )));
    };
    match all.get(name).and_then(|data| data.get(key)) {
        Some(value) => Ok(Some(String::from_utf8_lossy(value).into_owned())),
        None if optional == Some(true) => Ok(None),
        None => Err(PlanError::Missing(format!(
            "env {:?}: {kind} {name:?} key {key:?} not found",
            var.name
        ))),
    }
}

/// A downward-API field of the pod.
pub(super) fn field_value(
    pod: &Pod,
    field: &ObjectFieldSelector,
    host: &Host,
) -> Result<String, PlanError> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let path = field.field_path.as_str();
    let from_map = |map: &Option<BTreeMap<String, String>>, prefix: &str| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.as_ref()?.get(key).cloned().unwrap_or_default())
    };
    let value = match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => Some(host.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" | "status.podIPs" => Some(host.pod_ip.to_string()),
        "status.hostIP" | "status.hostIPs" => Some(host.host_ip.to_string()),
        _ => from_map(&meta.labels, "metadata.labels['")
            .or_else(|| from_map(&meta.annotations, "metadata.annotations['")),
    };
    value.ok_or_else(|| PlanError::Unsupported(format!("fieldRef {path:?}")))
}
