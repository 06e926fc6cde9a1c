//! The one error every object actor reports when the API server refuses or fails a request: the
//! kind and name of the object the actor works for, what it was doing and to what, and kube's
//! error. What it was doing is its reason, so the reconcile-error metric tells a failed status
//! write from a failed create or read, whichever kind it happened to.

use crate::api::conditions::reasons;

/// What an actor was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doing {
    Read,
    WriteStatus,
    UpdateFinalizers,
    Create,
    /// A patch or replace of an object that exists.
    Update,
    Delete,
}

impl Doing {
    /// The reason it is reported under.
    pub fn reason(self) -> &'static str {
        match self {
            Doing::Read => reasons::READ_FAILED,
            Doing::WriteStatus => reasons::STATUS_WRITE_FAILED,
            Doing::UpdateFinalizers => reasons::FINALIZER_UPDATE_FAILED,
            Doing::Create => reasons::CREATE_FAILED,
            Doing::Update => reasons::UPDATE_FAILED,
            Doing::Delete => reasons::DELETE_FAILED,
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Doing::Read => "reading",
            Doing::WriteStatus => "writing the status",
            Doing::UpdateFinalizers => "updating the finalizers",
            Doing::Create => "creating",
            Doing::Update => "updating",
            Doing::Delete => "deleting",
        }
    }
}

/// A request the API server refused or failed, for `kind` `name`.
#[derive(Debug, thiserror::Error)]
#[error("{}{}{what} for {kind} {name}: {source}", .doing.verb(), if .what.is_empty() { "" } else { " " })]
pub struct ApiError {
    /// The kind of the object the actor works for (`ClusterInstance`, `CRCBundle`, …).
    pub kind: &'static str,
    pub name: String,
    pub doing: Doing,
    /// What the request was for (`Secret ops/x`, `the key Secret`; empty for the object itself).
    pub what: String,
    #[source]
    pub source: Box<kube::Error>,
}

impl ApiError {
    /// A `map_err` adapter: the error of `doing` to `what` for `kind` `name`.
    pub fn on(
        kind: &'static str,
        name: &str,
        doing: Doing,
        what: impl Into<String>,
    ) -> impl FnOnce(kube::Error) -> ApiError {
        let (name, what) = (name.to_owned(), what.into());
        move |source| ApiError {
            kind,
            name,
            doing,
            what,
            source: Box::new(source),
        }
    }

    /// The reason it is reported under.
    pub fn reason(&self) -> &'static str {
        self.doing.reason()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_object_and_what_was_done_and_the_reason_what_failed() {
        let err = ApiError::on("ClusterPool", "p", Doing::Create, "ClusterInstance p-0")(
            kube::Error::Api(
                kube::core::Status::failure("forbidden", "Forbidden")
                    .with_code(403)
                    .boxed(),
            ),
        );
        assert_eq!(err.reason(), reasons::CREATE_FAILED);
        let message = err.to_string();
        assert!(
            message.starts_with("creating ClusterInstance p-0 for ClusterPool p: "),
            "{message}"
        );
        assert_ne!(Doing::Read.reason(), Doing::WriteStatus.reason());
        let own = ApiError::on("ClusterPool", "p", Doing::WriteStatus, "")(kube::Error::Api(
            kube::core::Status::failure("conflict", "Conflict")
                .with_code(409)
                .boxed(),
        ));
        assert!(
            own.to_string()
                .starts_with("writing the status for ClusterPool p: "),
            "{own}"
        );
    }
}
