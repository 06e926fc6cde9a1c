//! The bodies of the Jobs the operator runs, one subcommand each (`guestcluster <job>`).

pub mod build_helper;
pub mod bundle_prep;
pub mod disk;
pub mod exit;
pub mod extents;
pub mod installer;
