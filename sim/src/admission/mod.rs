//! OpenShift's SCC admission, served as a mutating webhook (a plugin of the API server
//! upstream). CDI's admission is cdi-apiserver's own (`testenv::ControlPlane::cdi`), KubeVirt's
//! virt-api's (`testenv::ControlPlane::kubevirt`). See `docs/simulation.md` ("Admission").
//!
//! [`review`] turns an `AdmissionReview` into its answer; [`server`] serves it over HTTPS on
//! loopback and registers it with the real API server.

pub mod review;
pub mod server;
