//! The product binary's subcommands as clap names them, read from `src/main.rs` (shared by the
//! tests that hold the docs to the CLI).

use std::collections::BTreeSet;
use std::path::Path;

/// `enum Command`'s variants of `src/main.rs`, as clap names them (kebab-case).
pub fn subcommands() -> BTreeSet<String> {
    let main = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/main.rs"))
        .expect("main.rs");
    let body = main
        .split("enum Command {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("enum Command in main.rs");
    body.lines()
        .filter_map(|line| {
            let line = line.strip_prefix("    ")?;
            let first = line.chars().next()?;
            if !first.is_ascii_uppercase() {
                return None;
            }
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            let mut kebab = String::new();
            for (i, c) in name.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    kebab.push('-');
                }
                kebab.push(c.to_ascii_lowercase());
            }
            Some(kebab)
        })
        .collect()
}
