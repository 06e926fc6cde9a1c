//! The external programs production code runs, one narrow module each, so tests can put a fake
//! executable of the same name first on `PATH` without the product code knowing.

pub mod coreos_installer;
pub mod qemu_img;
pub mod release;
pub mod run;
