//! The build's stage children: each follows the one object of its stage recorded in
//! `status.build.resources` (the machinery is [`crate::actors::runtime::stage`]).

pub mod build_vm;
pub mod disk_copy;
pub mod guest_session;
pub mod installer_job;
