use serde_json::json;

use super::*;

const BIN: &str = "/build/target/debug/guestcluster";

fn host() -> Host {
    Host {
        guestcluster_bin: PathBuf::from(BIN),
        api_server: "https://127.0.0.1:6443".into(),
        tools_bin: PathBuf::from("/sim/tools/bin"),
        host_path: "/usr/bin:/bin".into(),
        sandbox: PathBuf::from("/sim/pods/ns_p_u1"),
        node_name: "sim-node".into(),
        host_ip: Ipv4Addr::LOCALHOST,
        pod_ip: Ipv4Addr::new(127, 10, 0, 9),
    }
}

/// A pod with one container `main` (merged over a minimal container) and the given volumes.
fn pod(container: serde_json::Value, volumes: serde_json::Value) -> Pod {
    let mut c = json!({ "name": "main", "image": "quay.io/opdev/guestcluster:dev" });
    if let (Some(c), Some(extra)) = (c.as_object_mut(), container.as_object()) {
        c.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": "p", "namespace": "ns", "uid": "u1",
            "labels": { "app": "builder" },
        },
        "spec": {
            "serviceAccountName": "builder",
            "containers": [c],
            "volumes": volumes,
        },
    }))
    .expect("pod")
}

fn inputs() -> Inputs {
    let mut inputs = Inputs::default();
    inputs.secrets.insert(
        "pull".into(),
        BTreeMap::from([
            (".dockerconfigjson".into(), b"{\"auths\":{}}".to_vec()),
            ("token".into(), b"s3cret".to_vec()),
        ]),
    );
    inputs.config_maps.insert(
        "settings".into(),
        BTreeMap::from([
            ("level".into(), b"debug".to_vec()),
            ("blob".into(), vec![0, 1, 2]),
        ]),
    );
    inputs.claims.insert(
        "golden".into(),
        ClaimVolume {
            dir: PathBuf::from("/sim/volumes/pvc-uid"),
            mode: VolumeMode::Filesystem,
        },
    );
    inputs.claims.insert(
        "raw".into(),
        ClaimVolume {
            dir: PathBuf::from("/sim/volumes/raw-uid"),
            mode: VolumeMode::Block,
        },
    );
    inputs.tokens.insert(String::new(), "jwt".into());
    inputs
}

fn process(pod: &Pod) -> ProcessPlan {
    let plan = plan_pod(pod, &inputs(), &host()).expect("plan");
    plan.processes.into_iter().next().expect("one process")
}

fn env(process: &ProcessPlan, name: &str) -> Option<String> {
    process
        .env
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

fn empty_dir(name: &str) -> serde_json::Value {
    json!({ "name": name, "emptyDir": {} })
}

#[test]
fn without_command_the_image_entrypoint_is_our_binary() {
    let p = process(&pod(json!({ "args": ["crdgen"] }), json!([])));
    assert_eq!(p.program, PathBuf::from(BIN));
    assert_eq!(p.args, ["crdgen"]);
}

#[test]
fn a_command_naming_our_binary_runs_it() {
    for command in ["guestcluster", "/usr/local/bin/guestcluster"] {
        let p = process(&pod(
            json!({ "command": [command, "installer"], "args": ["--x"] }),
            json!([]),
        ));
        assert_eq!(p.program, PathBuf::from(BIN), "{command}");
        assert_eq!(p.args, ["installer", "--x"]);
    }
}

#[test]
fn any_other_command_runs_the_host_program_of_that_name() {
    let p = process(&pod(
        json!({ "command": ["sleep"], "args": ["600"] }),
        json!([]),
    ));
    assert_eq!(p.program, PathBuf::from("sleep"));
    assert_eq!(p.args, ["600"]);
    assert!(!is_our_binary("guestcluster-helper") && is_our_binary("./guestcluster"));
}

#[test]
fn args_expand_variables_from_env_and_field_refs() {
    let container = json!({
        "args": ["crdgen", "--out-dir", "$(DIR)/$(NS)", "$(UNDEFINED)", "$$(DIR)"],
        "env": [
            { "name": "DIR", "value": "/out" },
            { "name": "NS", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
        ],
        "volumeMounts": [{ "name": "out", "mountPath": "/out" }],
    });
    let p = process(&pod(container, json!([empty_dir("out")])));
    assert_eq!(
        p.args,
        [
            "crdgen",
            "--out-dir",
            "/sim/pods/ns_p_u1/volumes/out/ns",
            "$(UNDEFINED)",
            "$(DIR)"
        ]
    );
    assert_eq!(
        env(&p, "DIR").as_deref(),
        Some("/sim/pods/ns_p_u1/volumes/out")
    );
}

#[test]
fn env_values_expand_earlier_variables_only() {
    let container = json!({ "env": [
        { "name": "A", "value": "$(B)-a" },
        { "name": "B", "value": "b" },
        { "name": "C", "value": "$(B)-c" },
    ]});
    let p = process(&pod(container, json!([])));
    assert_eq!(env(&p, "A").as_deref(), Some("$(B)-a"));
    assert_eq!(env(&p, "C").as_deref(), Some("b-c"));
}

#[test]
fn paths_under_mounts_are_rewritten_at_path_boundaries() {
    let container = json!({
        "args": ["/work/x", "/work", "--to=/work/bin", "/workspace", "-o", "/golden/disk.img",
                 "/golden/cache/f", "relative/work", "--name=/other"],
        "volumeMounts": [
            { "name": "work", "mountPath": "/work/" },
            { "name": "golden", "mountPath": "/golden" },
            { "name": "work", "mountPath": "/golden/cache", "subPath": "cache" },
        ],
    });
    let volumes = json!([
        empty_dir("work"),
        { "name": "golden", "persistentVolumeClaim": { "claimName": "golden" } },
    ]);
    let plan = plan_pod(&pod(container, volumes), &inputs(), &host()).expect("plan");
    let work = "/sim/pods/ns_p_u1/volumes/work";
    assert_eq!(
        plan.processes[0].args,
        [
            format!("{work}/x"),
            work.to_string(),
            format!("--to={work}/bin"),
            "/workspace".into(),
            "-o".into(),
            "/sim/volumes/pvc-uid/disk.img".into(),
            format!("{work}/cache/f"),
            "relative/work".into(),
            "--name=/other".into(),
        ]
    );
    assert!(
        plan.dirs
            .iter()
            .any(|d| d.path == Path::new(&format!("{work}/cache")))
    );
}

#[test]
fn block_devices_map_to_the_claims_device() {
    let container = json!({
        "args": ["disk", "--device", "/dev/raw"],
        "volumeDevices": [{ "name": "raw", "devicePath": "/dev/raw" }],
    });
    let volumes = json!([{ "name": "raw", "persistentVolumeClaim": { "claimName": "raw" } }]);
    let p = process(&pod(container, volumes));
    assert_eq!(p.args[2], "/sim/volumes/raw-uid/device");
}

#[test]
fn a_claim_used_in_the_other_mode_is_refused_like_the_volume_manager() {
    let volumes =
        |claim: &str| json!([{ "name": "disk", "persistentVolumeClaim": { "claimName": claim } }]);
    let mounted = json!({ "volumeMounts": [{ "name": "disk", "mountPath": "/disk" }] });
    let err = plan_pod(&pod(mounted, volumes("raw")), &inputs(), &host()).unwrap_err();
    assert_eq!(err.reason(), "ContainerCreating");
    assert_eq!(
        err.to_string(),
        "unmounted volumes=[disk], unattached volumes=[disk], failed to process volumes=[disk]: \
         volume disk has volumeMode Block, but is specified in volumeMounts"
    );
    let mapped = json!({ "volumeDevices": [{ "name": "disk", "devicePath": "/dev/disk" }] });
    let err = plan_pod(&pod(mapped, volumes("golden")), &inputs(), &host()).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("volume disk has volumeMode Filesystem, but is specified in volumeDevices"),
        "{err}"
    );
}

#[test]
fn the_simulation_controls_kubeconfig_and_path() {
    let container = json!({ "env": [
        { "name": "KUBECONFIG", "value": "/var/run/kubeconfig" },
        { "name": "PATH", "value": "/usr/local/bin" },
    ]});
    let p = process(&pod(container, json!([])));
    // No service account credentials mounted: no way to the API server, whatever it asks for.
    assert_eq!(env(&p, "KUBECONFIG"), None);
    assert_eq!(
        env(&p, "PATH").as_deref(),
        Some("/sim/tools/bin:/usr/bin:/bin")
    );
    assert_eq!(env(&p, "POD_NAMESPACE").as_deref(), Some("ns"));
    assert_eq!(env(&p, "HOME").as_deref(), Some("/sim/pods/ns_p_u1/home"));
    let names: Vec<_> = p.env.iter().map(|(n, _)| n).collect();
    let unique: BTreeSet<_> = names.iter().collect();
    assert_eq!(
        names.len(),
        unique.len(),
        "no duplicate variables: {names:?}"
    );
}

#[test]
fn host_paths_of_the_simulation_are_not_rewritten() {
    // A mount at /sim would capture the sandbox's own paths if they were rewritten.
    let container = json!({ "volumeMounts": [{ "name": "v", "mountPath": "/sim" }] });
    let p = process(&pod(container, json!([empty_dir("v")])));
    assert_eq!(env(&p, "HOME").as_deref(), Some("/sim/pods/ns_p_u1/home"));
}

#[test]
fn service_account_credentials_become_the_containers_only_kubeconfig() {
    let container = json!({ "volumeMounts": [
        { "name": "kube-api-access-x", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": true },
    ]});
    let volumes = json!([{ "name": "kube-api-access-x", "projected": { "sources": [
        { "serviceAccountToken": { "path": "token", "expirationSeconds": 3607 } },
    ]}}]);
    let mut inputs = inputs();
    inputs.tokens.insert(String::new(), "tok".into());
    let plan = plan_pod(&pod(container, volumes), &inputs, &host()).expect("plan");
    let p = &plan.processes[0];
    let path = "/sim/pods/ns_p_u1/main.in-cluster.kubeconfig";
    assert_eq!(env(p, "KUBECONFIG").as_deref(), Some(path));
    let file = plan
        .files
        .iter()
        .find(|f| f.path == Path::new(path))
        .expect("kubeconfig written");
    assert_eq!(file.mode, 0o644);
    let config: serde_json::Value = serde_json::from_slice(&file.contents).expect("json");
    let volume = "/sim/pods/ns_p_u1/volumes/kube-api-access-x";
    assert_eq!(
        config["clusters"][0]["cluster"]["server"],
        "https://127.0.0.1:6443"
    );
    assert_eq!(
        config["clusters"][0]["cluster"]["certificate-authority"],
        format!("{volume}/ca.crt")
    );
    assert_eq!(
        config["users"][0]["user"]["tokenFile"],
        format!("{volume}/token")
    );
    assert_eq!(
        config["users"][0]["user"].as_object().map(|u| u.len()),
        Some(1),
        "only the token"
    );
    assert_eq!(config["contexts"][0]["context"]["namespace"], "ns");
}

#[test]
fn env_from_secrets_config_maps_and_the_pod() {
    let field = |path: &str| json!({ "fieldRef": { "fieldPath": path } });
    let container = json!({
        "env": [
            { "name": "TOKEN", "valueFrom": { "secretKeyRef": { "name": "pull", "key": "token" } } },
            { "name": "LEVEL", "valueFrom": { "configMapKeyRef": { "name": "settings", "key": "level" } } },
            { "name": "OPT", "valueFrom": { "secretKeyRef": { "name": "nope", "key": "k", "optional": true } } },
            { "name": "NAME", "valueFrom": field("metadata.name") },
            { "name": "UID", "valueFrom": field("metadata.uid") },
            { "name": "SA", "valueFrom": field("spec.serviceAccountName") },
            { "name": "IP", "valueFrom": field("status.podIP") },
            { "name": "APP", "valueFrom": field("metadata.labels['app']") },
        ],
        "envFrom": [{ "prefix": "CFG_", "configMapRef": { "name": "settings" } }],
    });
    let p = process(&pod(container, json!([])));
    let expected = [
        ("TOKEN", "s3cret"),
        ("LEVEL", "debug"),
        ("NAME", "p"),
        ("UID", "u1"),
        ("SA", "builder"),
        ("IP", "127.10.0.9"),
        ("APP", "builder"),
        ("CFG_level", "debug"),
    ];
    for (name, value) in expected {
        assert_eq!(env(&p, name).as_deref(), Some(value), "{name}");
    }
    assert_eq!(env(&p, "OPT"), None);
}

#[test]
fn a_missing_reference_is_waited_for() {
    let container = json!({ "env": [
        { "name": "T", "valueFrom": { "secretKeyRef": { "name": "pull", "key": "absent" } } },
    ]});
    let err = plan_pod(&pod(container, json!([])), &inputs(), &host()).expect_err("missing key");
    assert!(matches!(err, PlanError::Missing(_)), "{err}");
    let volumes = json!([{ "name": "w", "persistentVolumeClaim": { "claimName": "unbound" } }]);
    let err = plan_pod(&pod(json!({}), volumes), &inputs(), &host()).expect_err("unbound claim");
    assert!(matches!(err, PlanError::Missing(_)), "{err}");
    assert_eq!(err.reason(), "CreateContainerConfigError");
}

#[test]
fn secret_and_config_map_volumes_become_files() {
    let volumes = json!([
        { "name": "pull", "secret": {
            "secretName": "pull", "defaultMode": 0o400,
            "items": [{ "key": ".dockerconfigjson", "path": "auth/config.json" }],
        }},
        { "name": "settings", "configMap": { "name": "settings" } },
        { "name": "opt", "secret": { "secretName": "nope", "optional": true } },
        // Optional with items: an absent Secret leaves the volume empty, as the kubelet does.
        { "name": "opt-items", "secret": { "secretName": "nope", "optional": true,
            "items": [{ "key": "id_ecdsa", "path": "id_ecdsa" }] } },
    ]);
    let plan = plan_pod(&pod(json!({}), volumes), &inputs(), &host()).expect("plan");
    let dir = PathBuf::from("/sim/pods/ns_p_u1/volumes");
    let file = |p: &str| {
        plan.files
            .iter()
            .find(|f| f.path == dir.join(p))
            .unwrap_or_else(|| panic!("{p} in {:?}", plan.files))
    };
    assert_eq!(file("pull/auth/config.json").contents, b"{\"auths\":{}}");
    assert_eq!(file("pull/auth/config.json").mode, 0o400);
    assert_eq!(
        plan.files
            .iter()
            .filter(|f| f.path.starts_with(dir.join("pull")))
            .count(),
        1
    );
    assert_eq!(file("settings/level").contents, b"debug");
    assert_eq!(file("settings/blob").contents, vec![0, 1, 2]);
    assert_eq!(file("settings/level").mode, 0o644);
    assert!(plan.dirs.iter().any(|d| d.path == dir.join("opt")));
    assert!(plan.dirs.iter().any(|d| d.path == dir.join("opt-items")));
    assert!(
        !plan
            .files
            .iter()
            .any(|f| f.path.starts_with(dir.join("opt-items")))
    );
}

#[test]
fn the_service_account_volume_is_projected() {
    let volumes = json!([{ "name": "kube-api-access", "projected": {
        "defaultMode": 0o644,
        "sources": [
            { "serviceAccountToken": { "path": "token", "expirationSeconds": 3607 } },
            { "configMap": { "name": "settings", "items": [{ "key": "level", "path": "ca.crt" }] } },
            { "downwardAPI": { "items": [
                { "path": "namespace", "fieldRef": { "fieldPath": "metadata.namespace" } },
            ]}},
        ],
    }}]);
    let p = pod(json!({}), volumes);
    let refs = references(&p);
    assert_eq!(
        refs.token_audiences,
        BTreeMap::from([(String::new(), Some(3607))])
    );
    let plan = plan_pod(&p, &inputs(), &host()).expect("plan");
    let dir = PathBuf::from("/sim/pods/ns_p_u1/volumes/kube-api-access");
    let contents: BTreeMap<_, _> = plan
        .files
        .iter()
        .map(|f| (f.path.clone(), f.contents.clone()))
        .collect();
    assert_eq!(contents[&dir.join("token")], b"jwt");
    assert_eq!(contents[&dir.join("ca.crt")], b"debug");
    assert_eq!(contents[&dir.join("namespace")], b"ns");
}

#[test]
fn references_cover_volumes_env_and_env_from() {
    let container = json!({
        "env": [{ "name": "T", "valueFrom": { "secretKeyRef": { "name": "env-secret", "key": "k" } } }],
        "envFrom": [{ "configMapRef": { "name": "env-cm" } }],
    });
    let volumes = json!([
        { "name": "a", "secret": { "secretName": "vol-secret" } },
        { "name": "b", "configMap": { "name": "vol-cm" } },
        { "name": "c", "persistentVolumeClaim": { "claimName": "claim" } },
    ]);
    let refs = references(&pod(container, volumes));
    assert_eq!(
        refs.secrets,
        BTreeSet::from(["env-secret".to_string(), "vol-secret".to_string()])
    );
    assert_eq!(
        refs.config_maps,
        BTreeSet::from(["env-cm".to_string(), "vol-cm".to_string()])
    );
    assert_eq!(refs.claims, BTreeSet::from(["claim".to_string()]));
}

#[test]
fn unsupported_features_say_so() {
    let host_path = json!([{ "name": "kvm", "hostPath": { "path": "/dev/kvm" } }]);
    let err = plan_pod(&pod(json!({}), host_path), &inputs(), &host()).expect_err("hostPath");
    assert!(matches!(err, PlanError::Unsupported(_)), "{err}");
}

#[test]
fn init_containers_are_planned_apart_from_the_containers() {
    let mut with_init = pod(json!({}), json!([]));
    if let Some(spec) = with_init.spec.as_mut() {
        let mut init = spec.containers[0].clone();
        init.name = "fetch".into();
        spec.init_containers = Some(vec![init]);
    }
    let plan = plan_pod(&with_init, &inputs(), &host()).expect("plan");
    assert_eq!(plan.init_processes.len(), 1);
    assert_eq!(plan.init_processes[0].container, "fetch");
    assert_eq!(plan.processes.len(), 1);
    assert_ne!(plan.processes[0].container, "fetch");
}

#[test]
fn logs_and_working_directory() {
    let container = json!({
        "workingDir": "/work",
        "volumeMounts": [{ "name": "work", "mountPath": "/work" }],
    });
    let p = process(&pod(container, json!([empty_dir("work")])));
    assert_eq!(p.log, PathBuf::from("/sim/pods/ns_p_u1/main.log"));
    assert_eq!(p.cwd, PathBuf::from("/sim/pods/ns_p_u1/volumes/work"));
    let p = process(&pod(json!({}), json!([])));
    assert_eq!(p.cwd, PathBuf::from("/sim/pods/ns_p_u1"));
}

#[test]
fn sandbox_dir_names_namespace_pod_and_uid() {
    assert_eq!(
        sandbox_dir(Path::new("/root"), "ns", "pod", "uid"),
        PathBuf::from("/root/pods/ns_pod_uid")
    );
}

#[test]
fn the_memory_limit_is_the_containers_and_only_a_limit() {
    let limited = process(&pod(
        json!({"resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "1Gi", "cpu": "2"}}}),
        json!([]),
    ));
    assert_eq!(limited.memory_limit, Some(1 << 30));
    let requested = process(&pod(
        json!({"resources": {"requests": {"memory": "128Mi"}}}),
        json!([]),
    ));
    assert_eq!(requested.memory_limit, None);
}
