//! The temporary objects of a build attempt as one table: per object, its Kubernetes kind, the
//! name a new one gets and its slot in `status.build.resources`. Which stage makes each one, with
//! which builder, and which child follows it, is the stage table's ([`super::stages`]).

use crate::api::bundle::BuildResources;
use crate::api::common::ObjectIdentity;
use crate::resources::build::Names;

/// Declares [`Temp`] from one row per temporary object, in creation order: its [`Kind`], the
/// name a new object gets (`<bundle>-b<attempt>-<suffix>`), and its slot in
/// `status.build.resources`.
macro_rules! temps {
    ($($(#[$doc:meta])* $temp:ident: $kind:ident, $suffix:literal, $slot:ident;)+) => {
        /// The temporary objects of an attempt, in the order they are created.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub enum Temp {
            $($(#[$doc])* $temp,)+
        }

        impl Temp {
            /// Every temporary object, in creation order.
            pub const ALL: &[Temp] = &[$(Temp::$temp,)+];

            pub fn kind(self) -> Kind {
                match self {
                    $(Temp::$temp => Kind::$kind,)+
                }
            }

            /// The name a new object gets (the helper Job's depends on its step and VMI: see
            /// [`Names::helper_job`]).
            pub fn name(self, names: &Names) -> String {
                match self {
                    $(Temp::$temp => names.of_attempt($suffix),)+
                }
            }

            pub fn slot(self, resources: &BuildResources) -> Option<&ObjectIdentity> {
                match self {
                    $(Temp::$temp => resources.$slot.as_ref(),)+
                }
            }

            pub fn slot_mut(self, resources: &mut BuildResources) -> &mut Option<ObjectIdentity> {
                match self {
                    $(Temp::$temp => &mut resources.$slot,)+
                }
            }
        }
    };
}

temps! {
    ServiceAccount: ServiceAccount, "installer", service_account;
    InstallerSecret: Secret, "installer", installer_auth_secret;
    WorkPvc: PersistentVolumeClaim, "work", work_pvc;
    IsoPvc: PersistentVolumeClaim, "iso", iso_pvc;
    InstallerJob: Job, "installer", installer_job;
    HelperAccount: ServiceAccount, "helper", helper_account;
    HelperRole: Role, "helper", helper_role;
    HelperRoleBinding: RoleBinding, "helper", helper_role_binding;
    CredentialsSecret: Secret, "credentials", credentials_secret;
    /// Made before either VM, so no guest of the attempt is reachable from any other pod.
    GuestPolicy: NetworkPolicy, "guests", guest_policy;
    RootDataVolume: DataVolume, "root", root_data_volume;
    InstallIsoPvc: PersistentVolumeClaim, "install-iso", install_iso_pvc;
    BuildVm: VirtualMachine, "build", build_vm;
    /// The helper Job of the current step and VMI; its name is recorded with it.
    HelperJob: Job, "build", helper_job;
    DiskJob: Job, "disk", disk_job;
    ValidationDataVolume: DataVolume, "validation", validation_data_volume;
    ValidationVm: VirtualMachine, "validation", validation_vm;
}

impl Temp {
    /// Made again for each boot by the guest session ([`super::session`]), never up front.
    pub fn per_boot(self) -> bool {
        self == Temp::HelperJob
    }

    /// Of `temps`, what a stage makes up front (not per boot), in order.
    pub fn up_front(temps: &[Temp]) -> Vec<Temp> {
        temps.iter().copied().filter(|t| !t.per_boot()).collect()
    }

    /// Carries the installer's inputs rendered from the admitted inputs (the pull secret among
    /// them), so it is built only in a pass that admitted them.
    pub fn carries_inputs(self) -> bool {
        self == Temp::InstallerSecret
    }
}

/// Declares [`Kind`] and [`Built`] from one row per Kubernetes kind a temporary object has.
macro_rules! kinds {
    ($($kind:ident: $ty:ty;)+) => {
        /// The Kubernetes kinds of the temporary objects.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Kind {
            $($kind,)+
        }

        impl Kind {
            /// Its name, for messages.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$kind => stringify!($kind),)+
                }
            }
        }

        /// A temporary object as its stage's builder made it, ready to be created (boxed: the
        /// kinds differ much in size).
        #[derive(Clone, Debug)]
        pub enum Built {
            $($kind(Box<$ty>),)+
        }

        $(impl From<$ty> for Built {
            fn from(object: $ty) -> Self {
                Built::$kind(Box::new(object))
            }
        })+

        /// Runs `$body` with `$k` the Rust type of Kubernetes kind `$kind`.
        macro_rules! of_kind {
            ($of:expr, $k:ident => $body:expr) => {
                match $of {
                    $($crate::actors::bundle::build_source::temps::Kind::$kind => {
                        type $k = $ty;
                        $body
                    })+
                }
            };
        }
        pub(crate) use of_kind;

        /// Runs `$body` with `$o` a reference to the typed object a [`Built`] holds.
        macro_rules! with_built {
            ($built:expr, $o:ident => $body:expr) => {
                match $built {
                    $($crate::actors::bundle::build_source::temps::Built::$kind($o) => {
                        let $o = &*$o;
                        $body
                    })+
                }
            };
        }
        pub(crate) use with_built;
    };
}

kinds! {
    ServiceAccount: k8s_openapi::api::core::v1::ServiceAccount;
    Secret: k8s_openapi::api::core::v1::Secret;
    PersistentVolumeClaim: k8s_openapi::api::core::v1::PersistentVolumeClaim;
    Job: k8s_openapi::api::batch::v1::Job;
    Role: k8s_openapi::api::rbac::v1::Role;
    RoleBinding: k8s_openapi::api::rbac::v1::RoleBinding;
    NetworkPolicy: k8s_openapi::api::networking::v1::NetworkPolicy;
    DataVolume: crate::cdi::DataVolume;
    VirtualMachine: crate::kubevirt::VirtualMachine;
}
