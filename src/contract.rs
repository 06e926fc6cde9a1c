//! What the operator and the programs it runs as Jobs agree on: the environment a Job is given,
//! what it leaves behind for the operator to read (exit codes, the termination message, the
//! keys of the objects it publishes). The builders in `resources` and the readers in `actors`
//! use one side, `jobs` and `agent` the other; none of them imports another for it.

/// The termination message of a Job's container: one line, `<Reason>: <message>`, that the
/// operator reads back from the pod's status to say why a Job failed.
pub mod termination {
    /// The kubelet keeps at most this many bytes of a termination message.
    pub const MAX: usize = 4096;
    /// Where the kubelet reads it unless `terminationMessagePath` says otherwise; our Jobs state
    /// it explicitly.
    pub const DEFAULT_PATH: &str = "/dev/termination-log";
    /// The variable naming the file a Job writes its termination message to.
    pub const ENV_PATH: &str = "TERMINATION_MESSAGE_PATH";

    /// `<Reason>: <message>`.
    pub fn message(reason: &str, message: impl std::fmt::Display) -> String {
        format!("{reason}: {message}")
    }

    /// Writes the termination message of a Job container (or the crc-agent's): to
    /// `TERMINATION_MESSAGE_PATH` when set, else to `/dev/termination-log` only if it exists (the
    /// kubelet creates it), cut to [`MAX`] bytes on a character boundary. Errors are ignored: the
    /// log line carries the same text.
    pub fn write(message: &str) {
        let mut end = message.len().min(MAX);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let message = &message[..end];
        let _ = match std::env::var_os(ENV_PATH).filter(|p| !p.is_empty()) {
            Some(path) => std::fs::write(path, message),
            None => std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(DEFAULT_PATH)
                .and_then(|mut f| std::io::Write::write_all(&mut f, message.as_bytes())),
        };
    }
}

/// `guestcluster bundle-prep`, the prep Job of the download source.
pub mod bundle_prep {
    pub const ENV_BUNDLE_URL: &str = "BUNDLE_URL";
    pub const ENV_SHA256_URL: &str = "SHA256_URL";
    /// Namespace of the bundle's Secret and ConfigMap (the operator's).
    pub const ENV_NAMESPACE: &str = "NAMESPACE";
    pub const ENV_BUNDLE_NAME: &str = "BUNDLE_NAME";
    /// UID of the CRCBundle, the owner of what the Job publishes.
    pub const ENV_BUNDLE_UID: &str = "BUNDLE_UID";
    pub const ENV_SSH_SECRET_NAME: &str = "SSH_SECRET_NAME";
    pub const ENV_METADATA_CONFIGMAP_NAME: &str = "METADATA_CONFIGMAP_NAME";
    /// Where the golden PVC is mounted.
    pub const ENV_GOLDEN_DIR: &str = "GOLDEN_DIR";
    /// Where the scratch PVC is mounted.
    pub const ENV_SCRATCH_DIR: &str = "SCRATCH_DIR";
    /// The golden PVC's size in bytes (`spec.goldenVolumeSize`): the largest virtual size the
    /// raw disk may have.
    pub const ENV_GOLDEN_VOLUME_BYTES: &str = "GOLDEN_VOLUME_BYTES";
    /// `true` when `spec.allowHTTP` accepts plain-http URLs.
    pub const ENV_ALLOW_HTTP: &str = "ALLOW_HTTP";
    /// Which part of the preparation a container runs: `fetch` (download, check, unpack and
    /// convert, with no API token), `publish` (the Secret and ConfigMap, with the token), or
    /// both when unset (a Job of an earlier operator version).
    pub const ENV_STAGE: &str = "PREP_STAGE";
    pub const STAGE_FETCH: &str = "fetch";
    pub const STAGE_PUBLISH: &str = "publish";

    /// Data key of the bundle's private key in the SSH Secret.
    pub const SECRET_KEY: &str = "id_ecdsa";
    /// Keys of the metadata ConfigMap.
    pub const CM_OCP_VERSION: &str = "ocpVersion";
    pub const CM_SHA256: &str = "sha256";
    pub const CM_DISK_SHA256: &str = "diskSHA256";
    pub const CM_DISK_VIRTUAL_SIZE: &str = "diskVirtualSize";

    /// Every reason of a failed prep, in exit-code order ([`exit_code_of`]).
    pub const REASONS: &[&str] = &[
        "InvalidConfig",
        "HttpError",
        "DownloadInterrupted",
        "ChecksumMissing",
        "ChecksumMismatch",
        "TooLarge",
        "ArchiveInvalid",
        "MissingMember",
        "UnsafeMember",
        "BundleInfoUnreadable",
        "KeyUnreadable",
        "ConvertFailed",
        "PublishFailed",
        "StorageError",
    ];

    /// Reasons a retry of the same Job cannot fix (bad input, not a flaky network): the prep
    /// Job's `podFailurePolicy` fails the Job at once on their exit codes.
    pub const PERMANENT_REASONS: &[&str] = &[
        "InvalidConfig",
        "ChecksumMissing",
        "ChecksumMismatch",
        "TooLarge",
        "ArchiveInvalid",
        "MissingMember",
        "UnsafeMember",
        "BundleInfoUnreadable",
        "KeyUnreadable",
    ];

    /// The process exit code of `reason`: 10 + its index in [`REASONS`].
    pub fn exit_code_of(reason: &str) -> Option<u8> {
        let index = REASONS.iter().position(|r| *r == reason)?;
        u8::try_from(index).ok().map(|i| 10 + i)
    }
}

/// `guestcluster agent`, the crc-agent Job of one VMI.
pub mod agent {
    pub const ENV_INSTANCE_NAME: &str = "INSTANCE_NAME";
    pub const ENV_INSTANCE_NAMESPACE: &str = "INSTANCE_NAMESPACE";
    pub const ENV_INSTANCE_UID: &str = "INSTANCE_UID";
    pub const ENV_VM_NAME: &str = "CRC_VM_NAME";
    pub const ENV_SSH_HOST: &str = "CRC_SSH_HOST";
    pub const ENV_VMI_UID: &str = "CRC_VMI_UID";
    pub const ENV_SSH_USER: &str = "CRC_SSH_USER";
    /// The bundle's key, which a fresh clone of its disk authorizes (absent once the guest
    /// authorizes only the instance key).
    pub const ENV_SSH_KEY_PATH: &str = "CRC_SSH_KEY_PATH";
    /// The instance's own key, the only one the guest authorizes after the agent's step 9.
    pub const ENV_GUEST_KEY_PATH: &str = "CRC_GUEST_KEY_PATH";
    pub const ENV_IDENTITY_PATH: &str = "CRC_IDENTITY_PATH";
    pub const ENV_PULL_SECRET_PATH: &str = "PULL_SECRET_PATH";
    pub const ENV_API_HOSTNAME: &str = "CRC_API_HOSTNAME";

    /// Keys of the handoff Secret the agent publishes (the operator's published kubeconfig
    /// Secret of the instance uses the same keys, without the VMI UID).
    pub const KUBECONFIG_KEY: &str = "kubeconfig";
    pub const OCP_VERSION_KEY: &str = "ocpVersion";
    pub const VMI_UID_KEY: &str = "vmiUID";
}

/// `guestcluster installer`, the Prepare stage's Job of a build (`docs/architecture.md`, "The
/// build source").
pub mod installer {
    use serde::{Deserialize, Serialize};

    /// The release pull spec as given in `spec.build.releaseImage`.
    pub const ENV_RELEASE_IMAGE: &str = "RELEASE_IMAGE";
    /// `amd64` or `arm64`.
    pub const ENV_ARCH: &str = "ARCH";
    /// Where the installer Secret is mounted (read-only).
    pub const ENV_INPUTS_DIR: &str = "INPUTS_DIR";
    /// Where the work PVC is mounted.
    pub const ENV_WORK_DIR: &str = "WORK_DIR";
    /// Where the ISO PVC is mounted; the Job writes `disk.img` there.
    pub const ENV_ISO_DIR: &str = "ISO_DIR";

    /// Keys of the installer Secret, which the operator renders from the admitted inputs.
    pub const KEY_PULL_SECRET: &str = "pull-secret.json";
    pub const KEY_GENERATOR_IGNITION: &str = "generator.ign";
    /// The staging directory: a JSON list of [`StagedFile`].
    pub const KEY_STAGING: &str = "staging.json";
    /// The user's post-install manifests, for the Customize step of the build helper: a JSON
    /// list of [`PostInstallManifest`]. In this Secret because a manifest may hold secrets.
    pub const KEY_POST_INSTALL: &str = "post-install.json";

    /// One data key of a `postInstallManifestRefs` source: a YAML document stream.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct PostInstallManifest {
        /// The ConfigMap or Secret it came from.
        pub source: String,
        pub key: String,
        pub text: String,
    }

    /// Under the work PVC: the extracted installer, the staging directory, the stock ISO.
    pub const WORK_BIN: &str = "bin";
    pub const WORK_STAGING: &str = "staging";
    pub const WORK_STOCK_ISO: &str = "rhcos-live.iso";

    /// One file of the staging directory, relative to it (`install-config.yaml`,
    /// `manifests/…`, `openshift/…`).
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct StagedFile {
        pub path: String,
        pub text: String,
    }

    /// The installer Job's result: its termination message when it succeeds (JSON, one line).
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Outcome {
        /// `sha256:…` of the release the pull spec resolved to.
        pub release_digest: String,
        /// OpenShift version of the release (`openshift-install version`).
        pub version: String,
        pub rhcos_version: String,
        /// SHA-256 of the stock live ISO, as the stream JSON gives it and as verified.
        #[serde(rename = "isoSHA256")]
        pub iso_sha256: String,
    }

    /// Every reason of a failed installer Job.
    pub const REASONS: &[&str] = &[
        "InvalidConfig",
        "ReleaseUnavailable",
        "InstallerExtractFailed",
        "StreamUnavailable",
        "DownloadFailed",
        "ChecksumMismatch",
        "EmbedFailed",
        "StorageError",
    ];
}

/// `guestcluster build-helper`, the Install stage's guest session of a build: one Job per step
/// and VMI (`docs/design/certificates-and-time.md`, "2. Generator boot" to "4. Cold restart").
pub mod build_helper {
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    /// [`Step`] in its serialized form (`generator`, `install`, `certificates`).
    pub const ENV_STEP: &str = "BUILD_STEP";
    /// The operator namespace: the VMI and the credentials Secret live there.
    pub const ENV_NAMESPACE: &str = "NAMESPACE";
    pub const ENV_VM_NAME: &str = "BUILD_VM_NAME";
    /// The VMI the Job works for; another UID (or none) ends the work without effect.
    pub const ENV_VMI_UID: &str = "BUILD_VMI_UID";
    /// The VMI's address, where the guest's sshd listens.
    pub const ENV_SSH_HOST: &str = "BUILD_SSH_HOST";
    /// The bundle's private key (`id_ecdsa` of the key Secret, mounted).
    pub const ENV_SSH_KEY_PATH: &str = "BUILD_SSH_KEY_PATH";
    /// The release as pinned by the installer Job (`…@sha256:…`).
    pub const ENV_RELEASE_IMAGE: &str = "RELEASE_IMAGE";
    /// Generator step: where the work PVC is mounted (installer and staging directory, read).
    pub const ENV_WORK_DIR: &str = "WORK_DIR";
    /// Generator step: where the install ISO PVC is mounted (`disk.img` written).
    pub const ENV_ISO_DIR: &str = "ISO_DIR";
    /// Name of the credentials Secret the helper fills (generator, install step).
    pub const ENV_CREDENTIALS_SECRET: &str = "CREDENTIALS_SECRET";
    /// Every step after the generator: where the credentials Secret is mounted (read).
    pub const ENV_CREDENTIALS_DIR: &str = "CREDENTIALS_DIR";
    /// Customize, validate and aged steps: where the installer Secret is mounted (read; only the
    /// key the step needs: the post-install manifests, or the pull secret the startup path
    /// injects).
    pub const ENV_INPUTS_DIR: &str = "INPUTS_DIR";
    /// Milliseconds between the reads that find the guest cluster settled ([`Settle`]); unset is
    /// [`Settle::UPSTREAM`]'s 30 s.
    pub const ENV_SETTLE_INTERVAL_MS: &str = "BUILD_SETTLE_INTERVAL_MS";

    /// How a settled cluster is recognised: `checks` consecutive reads `interval` apart that find
    /// every operator settled. SNC (`snc-library.sh` `wait_till_cluster_stable`) and `crc start`
    /// (`pkg/crc/cluster/status.go` `WaitForClusterStable`) both take three reads 30 s apart: an
    /// operator that is Available for one read may still roll out a new revision.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Settle {
        pub checks: u32,
        pub interval: Duration,
    }

    impl Settle {
        /// Upstream's: three reads 30 s apart.
        pub const UPSTREAM: Settle = Settle::every(Duration::from_secs(30));

        /// Three reads `interval` apart (a shorter interval only for tests on a simulated guest).
        pub const fn every(interval: Duration) -> Settle {
            Settle {
                checks: 3,
                interval,
            }
        }

        /// From the first settled read to the last.
        pub fn span(&self) -> Duration {
            self.interval * self.checks.saturating_sub(1)
        }
    }

    /// Keys of the credentials Secret.
    pub const KEY_KUBECONFIG: &str = "kubeconfig";
    pub const KEY_KUBEADMIN_PASSWORD: &str = "kubeadmin-password";
    /// The issuer of the kubelet client certificate at the end of the install boot: the
    /// installer's CSR signer, which the certificates step must see replaced.
    pub const KEY_INSTALLER_SIGNER: &str = "installer-signer";

    /// The guest steps, one Job each.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Step {
        Generator,
        Install,
        Certificates,
        /// Stage 3: the profile's post-install steps and the user's manifests.
        Customize,
        /// Stage 4: the guest sealed and powered off.
        Seal,
        /// Stage 6, first boot of the validation clone: what sealing promised is read in the
        /// guest, then the crc-agent's startup path runs.
        Validate,
        /// Stage 6, the clone booted again 20 days ahead: the startup path runs again.
        Aged,
    }

    impl Step {
        pub const ALL: [Step; 7] = [
            Step::Generator,
            Step::Install,
            Step::Certificates,
            Step::Customize,
            Step::Seal,
            Step::Validate,
            Step::Aged,
        ];

        pub fn as_str(self) -> &'static str {
            match self {
                Step::Generator => "generator",
                Step::Install => "install",
                Step::Certificates => "certificates",
                Step::Customize => "customize",
                Step::Seal => "seal",
                Step::Validate => "validate",
                Step::Aged => "aged",
            }
        }

        pub fn parse(text: &str) -> Option<Step> {
            Step::ALL.into_iter().find(|s| s.as_str() == text)
        }
    }

    /// A successful run's termination message (JSON, one line).
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Outcome {
        pub step: Step,
        /// Set when the VMI stopped being the Job's before it finished: nothing was done that
        /// counts, and the operator starts the step again for the current VMI.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub vmi_gone: Option<String>,
        /// What the step established, for the stage's condition message.
        #[serde(default)]
        pub summary: String,
    }

    /// Every reason of a failed helper Job.
    pub const REASONS: &[&str] = &[
        "InvalidConfig",
        "VMIUnreadable",
        "GuestUnreachable",
        "ClockNotShifted",
        "GuestStepFailed",
        "InstallerFailed",
        "EmbedFailed",
        "CredentialsUnavailable",
        "GuestAPIUnavailable",
        "InstallIncomplete",
        "CertificatesNotRotated",
        "ManifestRejected",
        "RolloutIncomplete",
        "SealIncomplete",
        "SealBroken",
        "StartupFailed",
        "StorageError",
    ];
}

/// `guestcluster disk`, the Publish stage's Job of a build (`docs/architecture.md`, "The build
/// source"): copies the stopped build VM's raw root disk into the golden PVC, sparsely, with its
/// digest.
pub mod disk {
    use serde::{Deserialize, Serialize};

    /// Where the build VM's root disk volume is mounted (read-only); the disk is `disk.img` in
    /// it (KubeVirt's filesystem-mode layout).
    pub const ENV_SOURCE_DIR: &str = "SOURCE_DIR";
    /// Where the golden PVC is mounted; the Job leaves `disk.img` there.
    pub const ENV_TARGET_DIR: &str = "TARGET_DIR";
    /// The raw disk file in both volumes.
    pub const DISK_FILE: &str = "disk.img";
    /// What the copy is written to before it is renamed to [`DISK_FILE`]: a golden PVC never
    /// shows a partial `disk.img`.
    pub const PARTIAL_FILE: &str = ".disk.img.partial";

    /// A successful copy's termination message (JSON, one line).
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Outcome {
        /// SHA-256 of the whole raw image, holes read as zeros (hex).
        pub disk_sha256: String,
        /// The raw image's size in bytes: the guest's disk size.
        pub disk_virtual_size: u64,
        /// Bytes the copy wrote (everything else is a hole).
        pub data_bytes: u64,
    }

    /// Every reason of a failed disk Job.
    pub const REASONS: &[&str] = &["InvalidConfig", "SourceUnreadable", "StorageError"];
}

#[cfg(test)]
mod tests {
    use super::bundle_prep::{PERMANENT_REASONS, REASONS, exit_code_of};

    #[test]
    fn every_prep_reason_has_its_own_exit_code_above_the_generic_ones() {
        let codes: Vec<u8> = REASONS.iter().filter_map(|r| exit_code_of(r)).collect();
        assert_eq!(codes.len(), REASONS.len());
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "{codes:?}");
        assert_eq!(codes[0], 10, "0-9 stay for the runtime and panics");
        assert!(PERMANENT_REASONS.iter().all(|r| REASONS.contains(r)));
        assert_eq!(exit_code_of("NoSuchReason"), None);
    }

    #[test]
    fn a_termination_message_is_reason_colon_message() {
        assert_eq!(
            super::termination::message("ChecksumMismatch", "want a, got b"),
            "ChecksumMismatch: want a, got b"
        );
    }
}
