//! The shape of the code, held by a test: no import circle between the product's modules, no
//! source file over its size cap, every write through `src/write/`, and docs that name only
//! paths and Rust names that exist. Each failure says what to do. No cluster needed.
//!
//! Imports are read from the text (`use` trees and inline `crate::`/`super::` paths): an edge
//! goes from a file to the module file that defines what it names. A file naming one of its
//! own ancestors (`super::`) is how Rust shares a parent's items and is no edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "support/cli.rs"]
mod cli;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A production source file over this many lines (its inline `mod tests` not counted) is two.
const SOURCE_CAP: usize = 800;
/// A test file over this many lines is two.
const TEST_CAP: usize = 1500;

/// Where a write to the Kubernetes API may be spelled out (`Patch`, `PatchParams`,
/// `PostParams`, `DeleteParams`), and why.
const WRITERS: &[(&str, &str)] = &[
    ("src/write.rs", "the write path"),
    ("src/write/", "the write path"),
    (
        "src/guest/",
        "clients of the guest cluster, as its admin (not the management cluster)",
    ),
    (
        "src/manifests.rs",
        "applies manifests to the guest cluster for the build helper",
    ),
    (
        "src/operator/leader.rs",
        "leader election: the Lease's compare-and-swap by resourceVersion is the protocol",
    ),
];

/// Upstream files the docs cite by their path in upstream's repository, which begins like one
/// of ours.
const UPSTREAM_PATHS: &[&str] = &[
    "src/live/util.rs",  // coreos-installer (docs/simulation.md)
    "docs/composefs.md", // ostree (docs/simulation.md)
];

/// Backticked snake_case names in the docs that are upstream's, not ours.
const UPSTREAM_NAMES: &[&str] = &[
    "serde_yaml",        // the crate (docs/decisions.md)
    "metadata_watcher",  // kube-runtime (docs/performance.md)
    "persist_noclobber", // upstream's name (docs/simulation.md)
];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` (relative to the repository) with extension `ext`.
fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(ROOT).join(dir), ext, &mut out);
    out.sort();
    out.into_iter()
        .map(|p| p.strip_prefix(ROOT).expect("under the root").to_path_buf())
        .collect()
}

/// A file's production part: up to its inline `#[cfg(test)] mod …`.
fn production(text: &str) -> &str {
    let mut offset = 0;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            return &text[..offset];
        }
        offset += line.len();
    }
    text
}

fn is_test_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs") || path.starts_with("tests")
}

// ---------------------------------------------------------------------------------------------
// Modules and imports
// ---------------------------------------------------------------------------------------------

/// The module path of a product file (`src/a/b.rs` and `src/a/b/mod.rs` are `a::b`).
fn module_of(path: &Path) -> Vec<String> {
    let rel = path.strip_prefix("src").expect("a product file");
    let mut segs: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
        segs.pop();
    }
    segs
}

/// The file of module `segs` under `base`, if there is one.
fn module_file(base: &str, segs: &[String]) -> Option<PathBuf> {
    if segs.is_empty() {
        return Some(PathBuf::from(base).join("lib.rs"));
    }
    let stem = PathBuf::from(base).join(segs.join("/"));
    [stem.with_extension("rs"), stem.join("mod.rs")]
        .into_iter()
        .find(|p| Path::new(ROOT).join(p).is_file())
}

/// Expands one `use` tree (`a::{b, c::{d, e}}`) into full paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.to_owned()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| match p.as_str() {
            "self" => prefix.to_owned(),
            _ => format!("{prefix}::{p}"),
        })
        .collect()
}

/// The paths a file names: its `use` trees, and inline `crate::`/`super::`/`self::` paths.
fn named_paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut paths = Vec::new();
    for statement in code.split(';') {
        let words = statement.trim_start();
        let rest = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| words.strip_prefix(p));
        if let Some(tree) = rest {
            let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
            paths.extend(expand(&tree));
        }
    }
    for root in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(root) {
            let before = code[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push(path.trim_end_matches(':').to_owned());
        }
    }
    paths
}

/// The child modules a file declares (`mod x;`).
fn child_modules(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            l.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

/// The product file a path named in `from` (module `here`) resolves to: the deepest module
/// file along it. `None` when it is not the product's.
fn resolve(here: &[String], children: &BTreeSet<String>, path: &str) -> Option<PathBuf> {
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut module: Vec<String> = match segs.first().copied()? {
        "crate" => {
            segs.remove(0);
            Vec::new()
        }
        "self" => {
            segs.remove(0);
            here.to_vec()
        }
        "super" => {
            let mut m = here.to_vec();
            while segs.first() == Some(&"super") {
                segs.remove(0);
                m.pop()?;
            }
            m
        }
        first if children.contains(first) => here.to_vec(),
        _ => return None,
    };
    let mut file = module_file("src", &module)?;
    for seg in segs {
        module.push(seg.to_owned());
        match module_file("src", &module) {
            Some(f) => file = f,
            None => break,
        }
    }
    Some(file)
}

/// Import edges between product files, with the paths behind each.
fn import_graph() -> BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>> {
    let mut graph: BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>> = BTreeMap::new();
    for path in files("src", "rs") {
        if is_test_file(&path) || path.ends_with("main.rs") {
            continue;
        }
        let text = read(&Path::new(ROOT).join(&path));
        let text = production(&text);
        let here = module_of(&path);
        let children = child_modules(text);
        let edges = graph.entry(path.clone()).or_default();
        for named in named_paths(text) {
            let Some(target) = resolve(&here, &children, &named) else {
                continue;
            };
            let target_module = module_of(&target);
            let ancestor = here.starts_with(&target_module);
            if target != path && !ancestor {
                edges.entry(target).or_default().insert(named);
            }
        }
    }
    graph
}

/// The strongly connected components of more than one file (Tarjan).
fn circles(graph: &BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(BTreeMap::keys) {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[w].min(self.low[v]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].min(self.low[v]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn the_products_modules_import_each_other_in_one_direction() {
    let graph = import_graph();
    let mut report = String::new();
    for circle in circles(&graph) {
        report.push_str("import circle:\n");
        for from in &circle {
            for (to, names) in &graph[from] {
                if circle.contains(to) {
                    let names: Vec<_> = names.iter().map(String::as_str).collect();
                    report.push_str(&format!(
                        "  {} -> {}: {}\n",
                        from.display(),
                        to.display(),
                        names.join(", ")
                    ));
                }
            }
        }
    }
    assert!(
        report.is_empty(),
        "{report}Move what both sides need into a module both import (or down into the one that \
         owns it), so imports run one way."
    );
}

/// The actor kinds: each folder of `src/actors/` but the runtime they share.
const KINDS: [&str; 4] = ["bundle", "instance", "lease", "pool"];

/// The kind a product file belongs to, if any.
fn kind_of(path: &Path) -> Option<&'static str> {
    let rest = path.strip_prefix("src/actors").ok()?;
    let first = rest.components().next()?.as_os_str().to_string_lossy();
    KINDS.iter().copied().find(|k| *k == first)
}

#[test]
fn kinds_use_only_each_others_messages() {
    let graph = import_graph();
    let mut reaches = Vec::new();
    for (from, edges) in &graph {
        let Some(kind) = kind_of(from) else { continue };
        for (to, names) in edges {
            let Some(other) = kind_of(to) else { continue };
            let front = Path::new("src/actors").join(other).join("mod.rs");
            if other != kind && *to != front {
                let names: Vec<_> = names.iter().map(String::as_str).collect();
                reaches.push(format!(
                    "{} -> {}: {}",
                    from.display(),
                    to.display(),
                    names.join(", ")
                ));
            }
        }
    }
    assert!(
        reaches.is_empty(),
        "{}\nA kind talks to another through the messages and types its mod.rs offers (or the \
         views in actors::runtime); a rule both need belongs to the API (src/api), the builders \
         (src/resources) or the kind that decides it.",
        reaches.join("\n")
    );
}

#[test]
fn the_import_reader_sees_use_trees_and_inline_paths() {
    let text = "use crate::a::{b, c::{self, D}};\npub use status::X;\nfn f() { super::g(); }";
    let paths = named_paths(text);
    for expected in [
        "crate::a::b",
        "crate::a::c",
        "crate::a::c::D",
        "status::X",
        "super::g",
    ] {
        assert!(
            paths.iter().any(|p| p == expected),
            "{expected} in {paths:?}"
        );
    }
    let here = vec!["write".to_owned()];
    let children = BTreeSet::from(["status".to_owned()]);
    assert_eq!(
        resolve(&here, &children, "status::record_status"),
        Some(PathBuf::from("src/write/status.rs"))
    );
    assert_eq!(
        resolve(&here, &children, "crate::events::Events"),
        Some(PathBuf::from("src/events.rs"))
    );
    assert_eq!(resolve(&here, &children, "kube::Api"), None);
}

// ---------------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------------

#[test]
fn no_source_file_is_over_its_cap() {
    let mut over = Vec::new();
    for dir in ["src", "tests", "sim/src", "testenv/src", "benches"] {
        for path in files(dir, "rs") {
            let text = read(&Path::new(ROOT).join(&path));
            let (lines, cap) = if is_test_file(&path) {
                (text.lines().count(), TEST_CAP)
            } else if path.starts_with("src") {
                (production(&text).lines().count(), SOURCE_CAP)
            } else {
                continue;
            };
            if lines > cap {
                over.push(format!("{} has {lines} lines (cap {cap})", path.display()));
            }
        }
    }
    assert!(
        over.is_empty(),
        "{}\nSplit each by what its parts are about (a module per concern), not by moving its \
         tests out.",
        over.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------------------------

#[test]
fn every_write_goes_through_the_write_module() {
    let mut bypasses = Vec::new();
    for path in files("src", "rs") {
        let shown = path.to_string_lossy();
        if is_test_file(&path) || WRITERS.iter().any(|(p, _)| shown.starts_with(p)) {
            continue;
        }
        let text = read(&Path::new(ROOT).join(&path));
        for (n, line) in production(&text).lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for token in ["Patch::", "PatchParams", "PostParams", "DeleteParams"] {
                if code.contains(token) {
                    bypasses.push(format!("{shown}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        bypasses.is_empty(),
        "{}\nWrite through crate::write (create, replace, merge_patch, apply, delete_exact, \
         finalizer, record_status): it reads every write back and keeps them idempotent. A new \
         kind of writer goes into WRITERS of tests/structure.rs with its reason.",
        bypasses.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Names in the docs
// ---------------------------------------------------------------------------------------------

/// Our top-level folders: a backticked path that begins with one is ours.
const OURS: &[&str] = &[
    "src/", "sim/", "testenv/", "tests/", "docs/", "tools/", "helm/", "hack/", "benches/",
];

/// Every file of the repository (relative paths), for `.rs` names given without their folder.
fn repository_files() -> Vec<String> {
    let mut all = Vec::new();
    for dir in [
        "src", "sim", "testenv", "tests", "docs", "tools", "helm", "hack", "benches",
    ] {
        for ext in ["rs", "md", "go", "sh", "yaml", "json", "toml", "ign", "txt"] {
            all.extend(
                files(dir, ext)
                    .into_iter()
                    .map(|p| p.to_string_lossy().into_owned()),
            );
        }
    }
    all
}

/// The crate root a Rust path in the docs begins at, and the rest of the path.
fn crate_root(path: &str) -> Option<(&'static str, Vec<String>)> {
    let segs: Vec<String> = path.split("::").map(str::to_owned).collect();
    let first = segs.first()?.as_str();
    let (base, rest) = match first {
        "crate" | "guestcluster" => ("src", &segs[1..]),
        "sim" => ("sim/src", &segs[1..]),
        "testenv" => ("testenv/src", &segs[1..]),
        _ if module_file("src", &segs[..1]).is_some() => ("src", &segs[..]),
        _ => return None,
    };
    Some((base, rest.to_vec()))
}

/// Whether `name` is defined (an item, a variant or a field) in `text`.
fn defines(text: &str, name: &str) -> bool {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| {
            w[1] == name
                && matches!(
                    w[0],
                    "fn" | "struct"
                        | "enum"
                        | "const"
                        | "static"
                        | "type"
                        | "trait"
                        | "mod"
                        | "macro_rules"
                )
        })
        || text.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with(name) && l[name.len()..].starts_with([',', '(', ' ', '{', ':'])
        })
}

/// Whether the Rust path `path` (`sim::volumes`, `write::record_status`, `Type::method`) names
/// something that exists; `None` when it is not ours.
fn rust_path_exists(path: &str) -> Option<bool> {
    let (base, segs) = crate_root(path)?;
    let mut depth = 0;
    while depth < segs.len() && module_file(base, &segs[..=depth]).is_some() {
        depth += 1;
    }
    let rest = &segs[depth..];
    let Some(item) = rest.last() else {
        return Some(true);
    };
    // The module's own files, then (for `Type::method`, impls live elsewhere) the whole crate.
    let module = module_file(base, &segs[..depth]).expect("a crate root");
    let dir = if depth == 0 {
        PathBuf::from(base)
    } else {
        PathBuf::from(base).join(segs[..depth].join("/"))
    };
    let mut texts = vec![read(&Path::new(ROOT).join(&module))];
    let scope = if rest.len() > 1 {
        PathBuf::from(base)
    } else {
        dir
    };
    for file in files(&scope.to_string_lossy(), "rs") {
        texts.push(read(&Path::new(ROOT).join(file)));
    }
    Some(texts.iter().any(|t| defines(t, item)))
}

/// What a doc names that does not exist: backticked paths of ours, Rust paths, and snake_case
/// names (which must appear in our code, tests or tools).
fn missing_names(doc: &str, text: &str, all: &[String], code: &str) -> Vec<String> {
    let mut missing = Vec::new();
    for (i, quoted) in text.split('`').enumerate() {
        if i % 2 == 0 || quoted.contains('\n') {
            continue;
        }
        let t = quoted.trim();
        let pathlike = t.chars().all(|c| c.is_alphanumeric() || "_./-".contains(c));
        if pathlike && OURS.iter().any(|p| t.starts_with(p)) {
            if !Path::new(ROOT).join(t.trim_end_matches('/')).exists()
                && !UPSTREAM_PATHS.contains(&t)
            {
                missing.push(format!("{doc}: `{t}` does not exist"));
            }
        } else if pathlike && t.ends_with(".rs") {
            if !all.iter().any(|f| f == t || f.ends_with(&format!("/{t}"))) {
                missing.push(format!("{doc}: no file is `{t}`"));
            }
        } else if is_rust_path(t) {
            let bare = t.trim_end_matches("()");
            if bare.contains("::") {
                if rust_path_exists(bare) == Some(false) {
                    missing.push(format!("{doc}: `{t}` names nothing in the code"));
                }
            } else if bare.contains('_')
                && !UPSTREAM_NAMES.contains(&bare)
                && !appears(code, all, bare)
            {
                missing.push(format!("{doc}: `{t}` appears nowhere in the code"));
            }
        }
    }
    missing
}

fn is_rust_path(t: &str) -> bool {
    let bare = t.trim_end_matches("()");
    let mut segs = bare.split("::");
    let first = segs.next().unwrap_or_default();
    first
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && first
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && segs.all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
}

/// Whether a snake_case name is in our code (a word of it, or a metric's name without its
/// `guestcluster_` prefix and unit suffix) or is the stem of one of our files (a test binary).
fn appears(code: &str, all: &[String], name: &str) -> bool {
    let stem = |f: &String| {
        Path::new(f)
            .file_stem()
            .is_some_and(|s| s.to_string_lossy() == name)
    };
    let registered = name.strip_prefix("guestcluster_").unwrap_or(name);
    let without_unit = ["_total", "_seconds", "_bytes"]
        .iter()
        .fold(registered, |n, suffix| n.strip_suffix(suffix).unwrap_or(n));
    all.iter().any(stem)
        || [name, registered, without_unit]
            .iter()
            .any(|n| contains_word(code, n))
}

fn contains_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let edge = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        edge(before) && edge(after)
    })
}

#[test]
fn the_docs_name_only_what_exists() {
    let all = repository_files();
    let mut code = String::new();
    for f in all.iter().filter(|f| !f.ends_with(".md")) {
        code.push_str(&read(&Path::new(ROOT).join(f)));
        code.push('\n');
    }
    for root_file in ["Makefile", "Cargo.toml", "clippy.toml"] {
        code.push_str(&read(&Path::new(ROOT).join(root_file)));
    }
    let mut missing = Vec::new();
    let docs = files("docs", "md")
        .into_iter()
        .chain([PathBuf::from("README.md")]);
    for doc in docs {
        let text = read(&Path::new(ROOT).join(&doc));
        missing.extend(missing_names(&doc.to_string_lossy(), &text, &all, &code));
    }
    // Module docs: the paths and `crate::` names they give.
    for path in files("src", "rs") {
        let text = read(&Path::new(ROOT).join(&path));
        let docs: String = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        for name in missing_names(&path.to_string_lossy(), &docs, &all, &code) {
            if name.contains("`src/") || name.contains("`crate::") || name.contains(".rs`") {
                missing.push(name);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{}\nName what the code has now (or, for an upstream name, qualify it with its crate or \
         file).",
        missing.join("\n")
    );
}

#[test]
fn the_architectures_subcommand_table_is_the_binarys() {
    let doc = read(&Path::new(ROOT).join("docs/architecture.md"));
    let table = doc
        .split("`guestcluster` has these subcommands today:")
        .nth(1)
        .and_then(|rest| {
            rest.split("\n\n")
                .find(|block| block.contains("| subcommand |"))
        })
        .expect("docs/architecture.md has the subcommand table");
    let listed: BTreeSet<String> = table
        .lines()
        .filter_map(|row| row.strip_prefix("| `"))
        .filter_map(|row| row.split('`').next())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        listed,
        cli::subcommands(),
        "docs/architecture.md's subcommand table vs enum Command in src/main.rs: add or remove rows"
    );
}
