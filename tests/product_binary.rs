//! The product binary is only the product: the simulation and the embedded control plane are
//! test equipment in their own crates, and nothing of them may reach the image every Job runs.

use std::process::Command;

/// `cargo tree` of the product's normal (non-dev) dependencies names neither member crate.
#[test]
fn the_product_depends_on_no_test_equipment() {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "guestcluster",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        tree.starts_with("guestcluster "),
        "unexpected tree:\n{tree}"
    );
    for crate_name in ["guestcluster-sim", "guestcluster-testenv"] {
        assert!(
            !tree
                .lines()
                .any(|l| l.starts_with(&format!("{crate_name} "))),
            "{crate_name} is a normal dependency of the product:\n{tree}"
        );
    }
}

/// `guestcluster --help` offers only production subcommands.
#[test]
fn the_product_binary_has_no_demo_or_dev_subcommand() {
    let output = Command::new(env!("CARGO_BIN_EXE_guestcluster"))
        .arg("--help")
        .output()
        .expect("run guestcluster --help");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for subcommand in ["operator", "agent", "bundle-prep", "crdgen"] {
        assert!(
            help.contains(subcommand),
            "{subcommand} missing from:\n{help}"
        );
    }
    for word in ["demo", "dev"] {
        assert!(
            !help.split_whitespace().any(|w| w == word),
            "`{word}` offered by:\n{help}"
        );
    }
}

/// The binary holds none of the simulation's marker strings (its simulated ISO header, the fake
/// tools' banner), so no simulation code was linked in.
#[test]
fn the_product_binary_carries_none_of_the_simulation() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_guestcluster")).expect("read the binary");
    for marker in [
        sim::tools::ISO_MAGIC.as_bytes(),
        b"Settings of the simulation's fake tools".as_slice(),
    ] {
        assert!(
            !binary.windows(marker.len()).any(|w| w == marker),
            "the product binary contains {:?}",
            String::from_utf8_lossy(marker)
        );
    }
}
