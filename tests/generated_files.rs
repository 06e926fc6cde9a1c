//! The generated files committed in the repository (`crds/*.yaml`, `docs/api.md`) match what the
//! code renders, so that a change to `src/api` cannot be merged without regenerating them.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use guestcluster::{api, apidocs, crdgen};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn crds_match_the_api() {
    let dir: PathBuf = repo().join("crds");
    let mut drifted = crdgen::drift(&dir).expect("rendering the CRDs");
    // Files that are no longer rendered (a removed or renamed kind) are drift too.
    let rendered: Vec<String> = (crdgen::render_all().expect("rendering the CRDs"))
        .into_iter()
        .map(|f| f.file_name)
        .collect();
    for entry in std::fs::read_dir(&dir).expect("reading crds/") {
        let name = entry
            .expect("reading crds/")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".yaml") && !rendered.contains(&name) {
            drifted.push(format!("{name} (not rendered any more)"));
        }
    }
    assert!(
        drifted.is_empty(),
        "generated CRDs drifted from src/api: {}; run `make crds`",
        drifted.join(", ")
    );
}

#[test]
fn api_reference_matches_the_api() {
    let path = repo().join("docs/api.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let rendered = apidocs::render(&api::crds());
    if committed != rendered {
        let line = committed
            .lines()
            .zip(rendered.lines())
            .take_while(|(a, b)| a == b)
            .count()
            + 1;
        panic!(
            "generated docs/api.md drifted from src/api (first difference at line {line}); run `make crds`"
        );
    }
}
