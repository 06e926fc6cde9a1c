//! Golden files of the profile, under `src/resources/golden/crc-kubevirt-v1/`. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test --lib resources` and review the diff like code.

use std::path::PathBuf;

pub fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/resources/golden/crc-kubevirt-v1")
}

/// Compares `rendered` with the golden file `relative` (written first under `UPDATE_GOLDEN`).
pub fn check_golden_text(relative: &str, rendered: &str) {
    let path = golden_dir().join(relative);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, rendered).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing {}; run `UPDATE_GOLDEN=1 cargo test --lib resources` and review it",
            path.display()
        )
    });
    assert_eq!(
        rendered,
        golden,
        "{} changed; review and run `UPDATE_GOLDEN=1 cargo test --lib resources`",
        path.display()
    );
}

/// [`check_golden_text`] of `objects` (a list of Kubernetes objects) as YAML.
pub fn check_golden_objects(relative: &str, objects: &serde_json::Value) {
    check_golden_text(relative, &serde_saphyr::to_string(objects).unwrap());
}
