//! Errors of a build pass: the API's or the operator's, never the build's (those fail the
//! attempt with a condition instead), so each is retried by the bundle's actor.

use crate::actors::runtime::api_error::ApiError;
use crate::api::conditions::reasons;

/// Errors of a build pass; each is retried by the bundle's actor (the attempt does not fail on
/// them: they are the API's or the operator's, not the build's).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("rendering the installer inputs of CRCBundle {name}: {detail}")]
    Render { name: String, detail: String },
    #[error(transparent)]
    Status(#[from] crate::actors::bundle::Error),
}

impl Error {
    /// The reason it is reported under.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Api(err) => err.reason(),
            Error::Status(err) => crate::actors::runtime::object_actor::ReconcileError::reason(err),
            Error::Render { .. } => reasons::RECONCILE_ERROR,
        }
    }
}

/// The kind, for errors.
pub(super) const KIND: &str = "CRCBundle";
