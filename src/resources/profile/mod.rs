//! Profile `crc-kubevirt-v1`: the versioned, code-defined recipe of a built bundle — the VM
//! shapes (build, validation, instance), the install-config, the manifests added before the
//! Ignition is created, the Ignition of the generator boot and the patches to the installer's
//! live Ignition. Pure builders only; the design is in `docs/design/certificates-and-time.md`
//! and `docs/design/network.md`. Changing what a profile yields changes every disk built with
//! it afterwards: a change that matters to a built disk belongs in a new profile version.

pub mod guest_files;
pub mod ignition;
pub mod ignition_config;
pub mod inputs;
pub mod install_config;
pub mod manifests;
pub mod network;
pub mod post_install;
pub mod vm;

#[cfg(test)]
mod golden;
#[cfg(test)]
pub(crate) use golden::check_golden_objects as golden_check_objects;

/// The profile's name, as `spec.build.profile` and `status.vmProfile` spell it.
pub const NAME: &str = "crc-kubevirt-v1";

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::path::Path;

    use super::golden::golden_dir;

    /// Every IPv4 literal in `text` (dotted quads not part of a longer dotted run, e.g. not a
    /// version string).
    fn ipv4_literals(text: &str) -> Vec<Ipv4Addr> {
        text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|token| token.split('.').count() == 4)
            .filter_map(|token| token.parse().ok())
            .collect()
    }

    fn files(dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else {
                let text = std::fs::read_to_string(&path).unwrap();
                // Data URLs are percent-encoded; decode the separators that matter here.
                let text = text
                    .replace("%0A", "\n")
                    .replace("%20", " ")
                    .replace("%2F", "/");
                out.push((path.display().to_string(), text));
            }
        }
    }

    /// No artefact of the profile holds an address other than the profile's own: the node IP
    /// and the network addresses of the guest's networks. A launcher-pod IP cannot appear.
    #[test]
    fn artefacts_hold_only_the_profiles_addresses() {
        let allowed: [Ipv4Addr; 5] = [
            Ipv4Addr::new(192, 168, 126, 11),
            Ipv4Addr::new(192, 168, 126, 0),
            Ipv4Addr::new(10, 0, 2, 0),
            Ipv4Addr::new(10, 217, 0, 0),
            Ipv4Addr::new(10, 217, 4, 0),
        ];
        let mut all = Vec::new();
        files(&golden_dir(), &mut all);
        assert!(all.len() >= 10, "golden files: {}", all.len());
        let mut seen = Vec::new();
        for (path, text) in &all {
            for ip in ipv4_literals(text) {
                assert!(allowed.contains(&ip), "{path} holds {ip}");
                seen.push(ip);
            }
        }
        assert!(seen.contains(&Ipv4Addr::new(192, 168, 126, 11)));
    }

    #[test]
    fn ipv4_literals_skip_versions() {
        assert_eq!(
            ipv4_literals("a 10.0.2.0/24 b 4.22.0.1.2 c 3.2.0 d 1.2.3.4:6443"),
            [Ipv4Addr::new(10, 0, 2, 0), Ipv4Addr::new(1, 2, 3, 4)]
        );
    }
}
