//! Where a CRC pass reads and writes (the instance's namespace), and the errors it returns
//! that are not a condition of the instance.

use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::api::instance::ClusterInstance;

/// Errors of a CRC pass that are not a condition of the instance: API calls that failed and
/// will be retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("reading a shared view for ClusterInstance {instance}: {source}")]
    View {
        instance: String,
        source: crate::actors::runtime::views::Error,
    },
    #[error("generating the guest SSH key of ClusterInstance {instance}: {source}")]
    GuestKey {
        instance: String,
        source: crate::guest::keys::KeyError,
    },
    #[error("generating the identity of ClusterInstance {instance}: {source}")]
    Identity {
        instance: String,
        source: crate::identity::Error,
    },
}

impl Error {
    /// The reason it is reported under.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Api(err) => err.reason(),
            _ => crate::api::conditions::reasons::RECONCILE_ERROR,
        }
    }
}

/// Where a pass reads and writes: the instance's namespace, and errors that name the instance.
pub struct Scope<'a> {
    pub ctx: &'a Context,
    pub name: String,
    pub namespace: String,
}

impl<'a> Scope<'a> {
    pub fn new(instance: &ClusterInstance, ctx: &'a Context) -> Self {
        Self {
            ctx,
            name: instance.name_any(),
            namespace: instance.namespace().unwrap_or_default(),
        }
    }

    pub fn ns<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ctx.client.clone(), &self.namespace)
    }

    pub fn err(&self, doing: Doing, what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let err = ApiError::on("ClusterInstance", &self.name, doing, what);
        move |source| Error::Api(err(source))
    }
}
