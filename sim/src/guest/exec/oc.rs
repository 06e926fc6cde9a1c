//! `oc` (and `kubectl`) on the node. RHCOS carries the OpenShift client, and the documented way
//! to reach a node's API server from the node is `sudo oc --kubeconfig
//! /etc/kubernetes/static-pod-resources/kube-apiserver-certs/secrets/node-kubeconfigs/localhost.kubeconfig …`
//! (OpenShift docs, "Restoring to a previous cluster state" and "Recovering from expired control
//! plane certificates").
//!
//! The simulated guest plays it with the control plane's `kubectl` (the same verbs, flags and
//! output) against this guest's API server, with the credentials of the kubeconfig named —
//! read with the caller's permissions, so a missing `sudo` fails as it does on a node — and its
//! server resolved as the guest resolves names: only a name that reaches the guest itself
//! (`localhost`, or `api-int.crc.testing` once dnsmasq answers it) reaches its API server, and
//! only while that runs (the kubelet runs it as a static pod).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{Ctx, Run, net};

/// What plays `oc` in a guest: a `kubectl` binary and where the guest's API server listens as
/// seen from the host.
#[derive(Clone, Debug)]
pub struct OcBackend {
    pub kubectl: PathBuf,
    pub api: SocketAddr,
}

/// The port of the API server on a node.
pub const API_PORT: u16 = 6443;

pub fn oc(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let Some(backend) = ctx.runtime().oc.clone() else {
        return Run::fail(
            127,
            "oc: not available: this simulation serves no guest API (Sim::serve_guest_apis)",
        );
    };
    let (kubeconfig, rest) = match split_kubeconfig(args) {
        Ok(split) => split,
        Err(message) => return Run::fail(1, message),
    };
    let Some(kubeconfig) = kubeconfig else {
        // No in-cluster config and no ~/.kube/config on a node: kubectl's default server.
        return Run::fail(
            1,
            "The connection to the server localhost:8080 was refused - did you specify the right host or port?",
        );
    };
    let path = ctx.path(&kubeconfig);
    let text = match ctx.read(&path) {
        Ok(bytes) => bytes,
        Err(err) => {
            return Run::fail(
                1,
                format!("error: open {kubeconfig}: {}", err.message().to_lowercase()),
            );
        }
    };
    let (host, port) = match server(&text) {
        Ok(server) => server,
        Err(message) => return Run::fail(1, format!("error: {kubeconfig}: {message}")),
    };
    let reaches_guest = net::resolve(ctx.machine(), &host)
        .is_some_and(|address| ctx.machine().local_addresses().contains(&address));
    if !reaches_guest || port != API_PORT {
        return Run::fail(
            1,
            format!("Unable to connect to the server: dial tcp: {host}:{port}: no route to host"),
        );
    }
    run_kubectl(&backend, &text, &host, &rest)
}

/// `--kubeconfig PATH` / `--kubeconfig=PATH`, and the other arguments.
fn split_kubeconfig(args: &[String]) -> Result<(Option<String>, Vec<String>), String> {
    let mut kubeconfig = None;
    let mut rest = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--kubeconfig" {
            kubeconfig = Some(
                iter.next()
                    .cloned()
                    .ok_or("error: flag needs an argument: --kubeconfig")?,
            );
        } else if let Some(path) = arg.strip_prefix("--kubeconfig=") {
            kubeconfig = Some(path.to_owned());
        } else {
            rest.push(arg.clone());
        }
    }
    Ok((kubeconfig, rest))
}

/// The host and port of the current context's cluster.
fn server(kubeconfig: &[u8]) -> Result<(String, u16), String> {
    let text = String::from_utf8_lossy(kubeconfig);
    let config: Value = serde_saphyr::from_str(&text).map_err(|_| "not a kubeconfig".to_owned())?;
    let named = |list: &str, name: &str| {
        config[list]
            .as_array()
            .and_then(|items| items.iter().find(|i| i["name"] == name))
            .cloned()
    };
    let context = config["current-context"]
        .as_str()
        .and_then(|name| named("contexts", name))
        .ok_or("no current context")?;
    let cluster = context["context"]["cluster"]
        .as_str()
        .and_then(|name| named("clusters", name))
        .ok_or("the current context names no cluster")?;
    let url = cluster["cluster"]["server"]
        .as_str()
        .ok_or("the cluster has no server")?;
    let authority = url
        .strip_prefix("https://")
        .ok_or("the server is not https")?
        .split('/')
        .next()
        .unwrap_or_default();
    match authority.rsplit_once(':') {
        Some((host, port)) => Ok((
            host.to_owned(),
            port.parse().map_err(|_| format!("bad port in {url}"))?,
        )),
        None => Ok((authority.to_owned(), 443)),
    }
}

fn run_kubectl(backend: &OcBackend, kubeconfig: &[u8], host: &str, args: &[String]) -> Run {
    let file = match tempfile::NamedTempFile::new()
        .and_then(|mut file| std::io::Write::write_all(&mut file, kubeconfig).map(|()| file))
    {
        Ok(file) => file,
        Err(err) => return Run::fail(1, format!("oc: simulated: writing the kubeconfig: {err}")),
    };
    let mut command = Command::new(&backend.kubectl);
    command
        .arg("--kubeconfig")
        .arg(file.path())
        // The guest's address as the host reaches it, verified as the name the node used.
        .arg(format!("--server=https://{}", backend.api))
        .arg(format!("--tls-server-name={host}"))
        .arg("--request-timeout=30s")
        .args(args)
        .stdin(Stdio::null());
    let output = blocking(|| command.output());
    match output {
        Ok(output) => Run {
            code: output.status.code().map_or(1, |c| c as u32),
            stdout: output.stdout,
            stderr: output.stderr,
        },
        Err(err) => Run::fail(
            1,
            format!(
                "oc: simulated by {}: {err}",
                backend.kubectl.to_string_lossy()
            ),
        ),
    }
}

/// Runs `f`, letting a multi-threaded runtime move its other tasks off this thread meanwhile.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    const CONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://localhost:6443\n  name: lb\ncontexts:\n- context:\n    cluster: lb\n    user: admin\n  name: admin\ncurrent-context: admin\nusers:\n- name: admin\n  user: {}\n";

    #[test]
    fn the_server_is_the_current_contexts_clusters() {
        assert_eq!(
            server(CONFIG.as_bytes()),
            Ok(("localhost".to_owned(), 6443))
        );
        assert!(server(b"apiVersion: v1\nkind: Config\n").is_err());
    }

    #[test]
    fn the_kubeconfig_flag_is_taken_out_in_either_form() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (k, rest) = split_kubeconfig(&args(&["--kubeconfig", "/k", "get", "nodes"])).unwrap();
        assert_eq!((k.as_deref(), rest), (Some("/k"), args(&["get", "nodes"])));
        let (k, rest) = split_kubeconfig(&args(&["get", "--kubeconfig=/k"])).unwrap();
        assert_eq!((k.as_deref(), rest), (Some("/k"), args(&["get"])));
    }

    #[test]
    fn without_a_backend_or_with_an_unreadable_kubeconfig_oc_fails_as_on_a_node() {
        let mut m = sealed();
        let out = run(&mut m, "oc get nodes");
        assert_eq!(out.code, 127, "{}", stderr(&out));
        m.runtime.oc = Some(OcBackend {
            kubectl: "/nonexistent/kubectl".into(),
            api: "127.0.0.1:6443".parse().unwrap(),
        });
        let out = run(&mut m, "oc get nodes");
        assert!(stderr(&out).contains("localhost:8080 was refused"));
        let out = run(&mut m, "oc --kubeconfig /opt/kubeconfig get nodes");
        assert_eq!(out.code, 1);
        assert!(
            stderr(&out).contains("permission denied"),
            "{}",
            stderr(&out)
        );
        // api-int.crc.testing: dnsmasq is not configured on a sealed disk.
        let out = run(&mut m, "sudo oc --kubeconfig /opt/kubeconfig get nodes");
        assert!(
            stderr(&out).contains("api-int.crc.testing:6443: no route to host"),
            "{}",
            stderr(&out)
        );
    }
}
