//! Names of a CRC instance's backing objects and its API host, as the Go operator names them.
//! These strings are the compatibility contract with the Go operator: existing objects are found
//! by them.

use sha2::{Digest, Sha256};

use super::Error;

/// Longest Kubernetes object name we generate (a DNS-1123 label).
pub const MAX_NAME: usize = 63;
/// Longest instance-name prefix of an agent Job name.
pub const AGENT_JOB_PREFIX_MAX: usize = 40;
/// Longest DNS label of a host name.
pub const MAX_DNS_LABEL: usize = 63;
/// Longest host name.
pub const MAX_FQDN: usize = 253;

/// The VirtualMachine (and VMI) of an instance: the instance name.
pub fn vm_name(instance: &str) -> String {
    instance.to_owned()
}

/// The root DataVolume (and its PVC): `<instance>-rootdisk`.
pub fn root_disk_name(instance: &str) -> String {
    format!("{instance}-rootdisk")
}

/// The instance-owned copy of the bundle's SSH key: `<instance>-crc-boot-key`.
pub fn boot_key_secret_name(instance: &str) -> String {
    format!("{instance}-crc-boot-key")
}

/// The instance's own guest SSH key, the only one its guest authorizes after the crc-agent's
/// first run: `<instance>-crc-guest-key`.
pub fn guest_key_secret_name(instance: &str) -> String {
    format!("{instance}-crc-guest-key")
}

/// The Service exposing the guest API: `<instance>-crc-api`.
pub fn api_service_name(instance: &str) -> String {
    format!("{instance}-crc-api")
}

/// The Route exposing the guest API: `<instance>-crc-api` (same as the Service).
pub fn api_route_name(instance: &str) -> String {
    api_service_name(instance)
}

/// The guest identity (client CA, admin client cert, serving cert): `<instance>-crc-identity`.
pub fn identity_secret_name(instance: &str) -> String {
    format!("{instance}-crc-identity")
}

/// The published kubeconfig: `<instance>-kubeconfig`.
pub fn kubeconfig_secret_name(instance: &str) -> String {
    format!("{instance}-kubeconfig")
}

/// The crc-agent's handoff for one VMI: `<instance>-crc-raw-kubeconfig-<vmiUID>`.
pub fn handoff_secret_name(instance: &str, vmi_uid: &str) -> String {
    format!("{instance}-crc-raw-kubeconfig-{vmi_uid}")
}

/// The legacy unsuffixed handoff Secret, deleted during teardown: `<instance>-crc-raw-kubeconfig`.
pub fn legacy_handoff_secret_name(instance: &str) -> String {
    format!("{instance}-crc-raw-kubeconfig")
}

/// The crc-agent's per-instance ServiceAccount: `<prefix>-crc-agent-<h12>`.
pub fn agent_account_name(instance: &str) -> String {
    hashed_name(instance, "-crc-agent-", &h12(instance), MAX_NAME)
}

/// The NetworkPolicy around the guest: `<prefix>-crc-guest-<h12>`.
pub fn guest_policy_name(instance: &str) -> String {
    hashed_name(instance, "-crc-guest-", &h12(instance), MAX_NAME)
}

/// The agent's Role: `<prefix>-crc-agent-role-<h12>`.
pub fn agent_role_name(instance: &str) -> String {
    hashed_name(instance, "-crc-agent-role-", &h12(instance), MAX_NAME)
}

/// The RoleBinding of the agent's ServiceAccount: `<prefix>-crc-agent-binding-<h12>`.
pub fn agent_binding_name(instance: &str) -> String {
    hashed_name(instance, "-crc-agent-binding-", &h12(instance), MAX_NAME)
}

/// The crc-agent Job of one VMI: `<prefix≤40>-crc-agent-<h12(vmiUID)>` (≤ 63).
pub fn agent_job_name(instance: &str, vmi_uid: &str) -> String {
    let prefix = truncate_prefix(instance, AGENT_JOB_PREFIX_MAX);
    hashed_name(prefix, "-crc-agent-", &h12(vmi_uid), MAX_NAME)
}

/// The guest API host of a new Route: `api-<label>-<hash16>.<domain>`, where `hash16` is the first
/// 16 hex digits of SHA-256(`<namespace>` NUL `<name>`) and `label` the instance name lowercased,
/// non-alphanumeric runs turned into one `-`, trimmed, and truncated so that the first DNS label
/// stays ≤ 63 and the whole host ≤ 253. An error when the domain leaves no room for a label.
pub fn route_host(namespace: &str, name: &str, domain: &str) -> Result<String, Error> {
    let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
    if domain.is_empty() {
        return Err(Error::NoRoomForHost {
            name: name.to_owned(),
            domain,
        });
    }
    let hash16 = &sha256_hex(format!("{namespace}\0{name}").as_bytes())[..16];
    // "api-" + label + "-" + hash16
    let fixed_label = "api-".len() + 1 + hash16.len();
    let room_in_label = MAX_DNS_LABEL - fixed_label;
    let room_in_fqdn = MAX_FQDN.saturating_sub(fixed_label + 1 + domain.len());
    let room = room_in_label.min(room_in_fqdn);
    let label = dns_label(name);
    let label = label[..label.len().min(room)].trim_matches('-');
    if label.is_empty() {
        return Err(Error::NoRoomForHost {
            name: name.to_owned(),
            domain,
        });
    }
    Ok(format!("api-{label}-{hash16}.{domain}"))
}

/// The host of instances created before the hashed rule: `api-<instance>.<domain>`.
pub fn legacy_route_host(name: &str, domain: &str) -> String {
    format!("api-{name}.{domain}")
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// First 12 hex digits of SHA-256(`text`).
fn h12(text: &str) -> String {
    sha256_hex(text.as_bytes())[..12].to_owned()
}

/// `<prefix><infix><hash>` with `prefix` cut so the whole fits `max`.
fn hashed_name(prefix: &str, infix: &str, hash: &str, max: usize) -> String {
    let room = max - infix.len() - hash.len();
    format!("{}{infix}{hash}", truncate_prefix(prefix, room))
}

/// `name` cut to at most `max` bytes (names are ASCII), trailing `-`/`.` trimmed.
fn truncate_prefix(name: &str, max: usize) -> &str {
    let mut end = name.len().min(max);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].trim_end_matches(['-', '.'])
}

/// Lowercase ASCII alphanumerics; every run of anything else becomes one `-`; trimmed.
fn dns_label(name: &str) -> String {
    let mut label = String::with_capacity(name.len());
    let mut dash = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if dash && !label.is_empty() {
                label.push('-');
            }
            dash = false;
            label.push(c.to_ascii_lowercase());
        } else {
            dash = true;
        }
    }
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_names_follow_upstream() {
        assert_eq!(vm_name("crc-1"), "crc-1");
        assert_eq!(root_disk_name("crc-1"), "crc-1-rootdisk");
        assert_eq!(boot_key_secret_name("crc-1"), "crc-1-crc-boot-key");
        assert_eq!(api_service_name("crc-1"), "crc-1-crc-api");
        assert_eq!(api_route_name("crc-1"), "crc-1-crc-api");
        assert_eq!(identity_secret_name("crc-1"), "crc-1-crc-identity");
        assert_eq!(kubeconfig_secret_name("crc-1"), "crc-1-kubeconfig");
        assert_eq!(
            handoff_secret_name("crc-1", "1111-2222"),
            "crc-1-crc-raw-kubeconfig-1111-2222"
        );
        assert_eq!(
            legacy_handoff_secret_name("crc-1"),
            "crc-1-crc-raw-kubeconfig"
        );
    }

    #[test]
    fn sha256_hex_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn agent_names_hash_the_instance_name() {
        let h = &sha256_hex(b"crc-1")[..12];
        assert_eq!(agent_account_name("crc-1"), format!("crc-1-crc-agent-{h}"));
        assert_eq!(
            agent_binding_name("crc-1"),
            format!("crc-1-crc-agent-binding-{h}")
        );
    }

    #[test]
    fn long_instance_names_are_cut_and_trimmed() {
        // 70 characters; the cut lands right after a '-' (position 40 = 'x').
        let name = format!("{}-{}", "a".repeat(39), "x".repeat(30));
        let sa = agent_account_name(&name);
        assert_eq!(sa.len(), 62);
        assert_eq!(sa, format!("{}-crc-agent-{}", "a".repeat(39), h12(&name)));
        let binding = agent_binding_name(&name);
        assert!(binding.len() <= 63);
        assert_eq!(
            binding,
            format!("{}-crc-agent-binding-{}", "a".repeat(32), h12(&name))
        );
        // Trailing dots are trimmed as well.
        let dotted = format!("{}..b", "c".repeat(31));
        assert_eq!(
            agent_binding_name(&dotted),
            format!("{}-crc-agent-binding-{}", "c".repeat(31), h12(&dotted))
        );
        // Exactly 63 when nothing needs trimming.
        let plain = "z".repeat(100);
        assert_eq!(agent_account_name(&plain).len(), 63);
        assert_eq!(agent_binding_name(&plain).len(), 63);
    }

    #[test]
    fn agent_job_names_hash_the_vmi_uid() {
        let uid = "6f1c1e64-2b1a-4c55-9a3e-0d4f5c7b8a90";
        assert_eq!(
            agent_job_name("crc-1", uid),
            format!("crc-1-crc-agent-{}", &sha256_hex(uid.as_bytes())[..12])
        );
        let long = "q".repeat(63);
        let job = agent_job_name(&long, uid);
        assert_eq!(job.len(), 63);
        assert!(job.starts_with(&"q".repeat(40)));
        assert_ne!(
            agent_job_name("crc-1", "other"),
            agent_job_name("crc-1", uid)
        );
    }

    #[test]
    fn route_host_is_hashed_and_sanitised() {
        let hash = &sha256_hex(b"team-a\0crc-1")[..16];
        assert_eq!(
            route_host("team-a", "crc-1", "apps.example.com").unwrap(),
            format!("api-crc-1-{hash}.apps.example.com")
        );
        let hash = &sha256_hex(b"ns\0My..Odd__Name")[..16];
        assert_eq!(
            route_host("ns", "My..Odd__Name", "apps.example.com.").unwrap(),
            format!("api-my-odd-name-{hash}.apps.example.com")
        );
        // Namespace and name are separated by NUL, so ("a", "bc") and ("ab", "c") hash apart.
        let tail = |ns: &str, n: &str| route_host(ns, n, "d.example").unwrap()[..].to_owned();
        assert_ne!(tail("a", "bc")[7..], tail("ab", "c")[6..]);
    }

    #[test]
    fn route_host_respects_dns_limits() {
        let name = "n".repeat(253);
        let host = route_host("ns", &name, "apps.example.com").unwrap();
        let first = host.split('.').next().unwrap();
        assert_eq!(first.len(), 63);
        assert!(first.starts_with(&format!("api-{}", "n".repeat(42))));

        // A long domain leaves room for a 3-character label only.
        let domain = format!("{}.com", "d".repeat(253 - 22 - 3 - 4));
        let host = route_host("ns", "crc-instance", &domain).unwrap();
        assert_eq!(host.len(), 253);
        assert!(host.starts_with("api-crc-"));

        // A cut that ends in '-' is trimmed.
        let domain = format!("{}.com", "d".repeat(253 - 22 - 4 - 4));
        let host = route_host("ns", "crc-instance", &domain).unwrap();
        assert!(host.starts_with("api-crc-"), "{host}");
        assert!(!host.starts_with("api-crc--"), "{host}");
    }

    #[test]
    fn route_host_without_room_is_an_error() {
        let domain = format!("{}.com", "d".repeat(253 - 22 - 4));
        assert!(matches!(
            route_host("ns", "crc-1", &domain),
            Err(Error::NoRoomForHost { .. })
        ));
        assert!(route_host("ns", "crc-1", "").is_err());
        assert!(route_host("ns", "---", "apps.example.com").is_err());
    }
}
