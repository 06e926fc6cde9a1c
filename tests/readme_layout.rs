//! The README's "Layout" section and its subcommand list agree with the tree and `src/main.rs`,
//! so a moved module or a new subcommand cannot leave the README behind.

use std::collections::BTreeSet;
use std::path::Path;

#[path = "support/cli.rs"]
mod cli;
use cli::subcommands;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The fenced block under `## Layout` of the README.
fn layout_block() -> String {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Layout\n")
        .nth(1)
        .expect("README has a Layout section");
    let block = section
        .split("```")
        .nth(1)
        .expect("the Layout section has a fenced block");
    block.to_owned()
}

/// Every `src/...` path the block names.
fn named_paths(block: &str) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for (i, _) in block.match_indices("src/") {
        // Only at the start of a word: `sim/src/demo.rs` is the sim's, not the product's.
        let start_of_word = i == 0 || block[..i].ends_with([' ', '\n', '(', '`', ',']);
        if !start_of_word {
            continue;
        }
        let rest = &block[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
            .unwrap_or(rest.len());
        paths.insert(rest[..end].trim_end_matches(['.', ',']).to_owned());
    }
    paths
}

#[test]
fn every_path_the_layout_names_exists_and_every_top_level_module_is_named() {
    let block = layout_block();
    let named = named_paths(&block);
    for path in &named {
        assert!(
            Path::new(ROOT).join(path).exists(),
            "README Layout names {path}, which does not exist"
        );
    }
    let entries = std::fs::read_dir(Path::new(ROOT).join("src")).expect("src/");
    for entry in entries {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let candidates = if entry.path().is_dir() {
            vec![format!("src/{name}/"), format!("src/{name}.rs")]
        } else {
            vec![format!("src/{name}")]
        };
        assert!(
            candidates.iter().any(|c| named.contains(c)),
            "src/{name} is not in the README's Layout section (one of {candidates:?})"
        );
    }
}

#[test]
fn the_layout_lists_the_binarys_subcommands() {
    let block = layout_block();
    let line = block
        .split("src/main.rs")
        .nth(1)
        .and_then(|rest| rest.split("\nsrc/").next())
        .expect("a src/main.rs entry");
    let listed: BTreeSet<String> = line
        .split(':')
        .nth(1)
        .expect("`the product binary: <subcommands>`")
        .split([',', '\n'])
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let actual = subcommands();
    assert!(
        actual.contains("operator") && actual.len() >= 2,
        "{actual:?}"
    );
    assert_eq!(listed, actual, "README's src/main.rs entry vs enum Command");
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn comments_cite_documents_of_the_repository() {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        let shown = file
            .strip_prefix(ROOT)
            .unwrap_or(&file)
            .display()
            .to_string();
        // Section numbers belong to specifications outside the repository.
        assert!(
            !text.contains('§'),
            "{shown} cites a section number (§); cite a file in docs/ by heading instead"
        );
        for (i, _) in text.match_indices("docs/") {
            let rest = &text[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
                .unwrap_or(rest.len());
            let cited = rest[..end].trim_end_matches('.');
            if cited.ends_with(".md") {
                assert!(
                    Path::new(ROOT).join(cited).exists(),
                    "{shown} cites {cited}, which does not exist"
                );
            }
        }
    }
}
