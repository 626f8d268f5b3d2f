//! The book (`docs/`) and the README against the code: the configuration reference is generated
//! from the configuration types themselves (their fields, doc comments and defaults) and must
//! match `docs/src/configuration.md`, and every key it lists must be in `relay.toml`; the admin
//! API chapter's route table is generated from the OpenAPI document; every internal link of the
//! book and the README resolves, to a file and to a heading; every chapter is in SUMMARY.md; the
//! README stays a front door.
//!
//! `HEARTH_BLESS=1 cargo test --test docs` writes the generated parts after a change to the code.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One field of a configuration struct: its name, its type's last identifiers, its doc comment.
struct Field {
    name: String,
    types: Vec<String>,
    doc: String,
    skipped: bool,
}

/// Every struct under `src/config/`, by name.
fn config_structs() -> BTreeMap<String, Vec<Field>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root().join("src/config")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let file = syn::parse_file(&std::fs::read_to_string(&path).unwrap()).unwrap();
            for item in file.items {
                let syn::Item::Struct(s) = item else { continue };
                let syn::Fields::Named(fields) = s.fields else { continue };
                let fields = fields.named.iter().map(field).collect();
                out.insert(s.ident.to_string(), fields);
            }
        }
    }
    out
}

fn field(f: &syn::Field) -> Field {
    let mut doc = Vec::new();
    let mut skipped = false;
    for attr in &f.attrs {
        if attr.path().is_ident("doc")
            && let syn::Meta::NameValue(nv) = &attr.meta
            && let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value
        {
            doc.push(s.value().trim().to_string());
        }
        if attr.path().is_ident("serde") {
            let text = quote_tokens(&attr.meta);
            skipped |= text.contains("skip");
        }
    }
    let mut types = Vec::new();
    collect_types(&f.ty, &mut types);
    Field { name: f.ident.as_ref().unwrap().to_string(), types, doc: doc.join(" "), skipped }
}

fn quote_tokens(meta: &syn::Meta) -> String {
    match meta {
        syn::Meta::List(list) => list.tokens.to_string(),
        _ => String::new(),
    }
}

/// The identifiers of a type, outermost first (`Vec<SyncPeer>` → `Vec`, `SyncPeer`).
fn collect_types(ty: &syn::Type, out: &mut Vec<String>) {
    if let syn::Type::Path(p) = ty
        && let Some(last) = p.path.segments.last()
    {
        out.push(last.ident.to_string());
        if let syn::PathArguments::AngleBracketed(args) = &last.arguments {
            for arg in &args.args {
                if let syn::GenericArgument::Type(t) = arg {
                    collect_types(t, out);
                }
            }
        }
    }
}

/// A value as TOML writes it.
fn toml(value: &Value) -> String {
    match value {
        Value::Null => "(unset)".into(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => format!("[{}]", items.iter().map(toml).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

/// One documented key: its section, name, default, doc.
struct Key {
    section: String,
    name: String,
    default: String,
    doc: String,
}

/// Every key of the configuration, by walking `Config` and its sections' structs.
fn keys() -> Vec<Key> {
    let structs = config_structs();
    let defaults = serde_json::to_value(hearth::config::Config::default()).unwrap();
    let mut out = Vec::new();
    for section in &structs["Config"] {
        if section.skipped {
            continue;
        }
        walk(&structs, section.name.clone(), section.types.last().unwrap(), &defaults[&section.name], &mut out);
    }
    out
}

fn walk(structs: &BTreeMap<String, Vec<Field>>, section: String, ty: &str, defaults: &Value, out: &mut Vec<Key>) {
    for f in &structs[ty] {
        if f.skipped {
            continue;
        }
        let inner = f.types.last().unwrap();
        let table = structs.contains_key(inner.as_str());
        if table && f.types[0] == "Vec" {
            // An array of tables ([[sync.peers]]): its keys, with the defaults each entry takes.
            let name = format!("{section}.{}", f.name);
            out.push(Key { section: section.clone(), name: f.name.clone(), default: "[]".into(), doc: f.doc.clone() });
            for sub in &structs[inner.as_str()] {
                out.push(Key {
                    section: format!("[{name}]"),
                    name: sub.name.clone(),
                    default: "—".into(),
                    doc: sub.doc.clone(),
                });
            }
        } else if table {
            walk(structs, format!("{section}.{}", f.name), inner, &defaults[&f.name], out);
        } else {
            out.push(Key {
                section: section.clone(),
                name: f.name.clone(),
                default: toml(&defaults[&f.name]),
                doc: f.doc.clone(),
            });
        }
    }
}

fn env_name(section: &str, key: &str) -> String {
    if section.starts_with("[[") || section.starts_with('[') {
        return "—".into();
    }
    format!("HEARTH_{}__{}", section.replace('.', "__"), key).to_uppercase()
}

/// The generated configuration reference.
fn reference() -> String {
    let mut text = String::new();
    let mut section = String::new();
    for key in keys() {
        if key.section != section {
            section = key.section.clone();
            let heading = format!("[{section}]");
            text.push_str(&format!(
                "\n### `{heading}`\n\n| Key | Default | Environment | What it is |\n|---|---|---|---|\n"
            ));
        }
        let doc = key.doc.replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;");
        let default = key.default.replace('|', "\\|");
        text.push_str(&format!(
            "| `{}` | `{}` | `{}` | {} |\n",
            key.name,
            default,
            env_name(&key.section, &key.name),
            doc
        ));
    }
    text
}

/// The admin API's routes from the OpenAPI document.
fn routes() -> String {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("src/rest/openapi.json")).unwrap()).unwrap();
    let mut text = String::from("\n| Method | Path | Credentials | What it does |\n|---|---|---|---|\n");
    for (path, methods) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/admin") && path != "/" {
            continue;
        }
        for (method, op) in methods.as_object().unwrap() {
            let security: Vec<String> = op["security"]
                .as_array()
                .map(|s| s.iter().flat_map(|e| e.as_object().unwrap().keys().cloned()).collect())
                .unwrap_or_default();
            if path == "/" && security.is_empty() {
                continue;
            }
            let who = if security.is_empty() { "none".to_string() } else { security.join(" or ") };
            let summary =
                op["summary"].as_str().unwrap_or("").replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;");
            text.push_str(&format!("| {} | `{path}` | {who} | {summary} |\n", method.to_uppercase()));
        }
    }
    text
}

/// The floors of `tests/layers.rs` (its `FLOORS`, read with a Rust parser), top first, each room
/// with the first sentence of its module's `//!` doc: the architecture chapter's table.
fn floors() -> String {
    let layers = syn::parse_file(&std::fs::read_to_string(root().join("tests/layers.rs")).unwrap()).unwrap();
    let floors = layers
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Const(c) if c.ident == "FLOORS" => Some(&*c.expr),
            _ => None,
        })
        .expect("tests/layers.rs has no FLOORS");
    fn strings(expr: &syn::Expr) -> Vec<&syn::Expr> {
        let syn::Expr::Reference(r) = expr else { panic!("FLOORS is not a slice of slices") };
        let syn::Expr::Array(a) = &*r.expr else { panic!("FLOORS is not a slice of slices") };
        a.elems.iter().collect()
    }
    let mut text = String::from("\n| floor | room | what it owns (its module's first sentence) |\n|---|---|---|\n");
    for (n, floor) in strings(floors).into_iter().enumerate() {
        for room in strings(floor) {
            let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(room), .. }) = room else {
                panic!("a room is a string")
            };
            let room = room.value();
            let path = room.replace("::", "/");
            let file = [format!("src/{path}.rs"), format!("src/{path}/mod.rs")]
                .into_iter()
                .map(|f| root().join(f))
                .find(|f| f.exists())
                .unwrap_or_else(|| panic!("room {room} has no module file"));
            let doc: Vec<String> = std::fs::read_to_string(&file)
                .unwrap()
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .map(|l| l.trim_start_matches("//!").trim().to_string())
                .take_while(|l| !l.is_empty())
                .collect();
            let doc = doc.join(" ");
            let first = doc.find(". ").map_or(doc.as_str(), |at| &doc[..=at]).trim_end_matches('.');
            // Rustdoc's links are plain code here.
            let first = first.replace("[`", "`").replace("`]", "`").replace('|', "\\|");
            text.push_str(&format!("| {n} | `{room}` | {first} |\n"));
        }
    }
    text
}

#[test]
fn the_architecture_chapter_draws_the_floors_of_tests_layers() {
    check_generated(&root().join("docs/src/architecture.md"), "floors", &floors());
}

/// Replaces what lies between `<!-- generated: NAME -->` and `<!-- end: NAME -->` in `file` with
/// `generated`; fails (or, with HEARTH_BLESS=1, writes) when it differs.
fn check_generated(file: &Path, name: &str, generated: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    let (start, end) = (format!("<!-- generated: {name} -->"), format!("<!-- end: {name} -->"));
    let a = text.find(&start).unwrap_or_else(|| panic!("{}: no {start}", file.display())) + start.len();
    let b = text.find(&end).unwrap_or_else(|| panic!("{}: no {end}", file.display()));
    if text[a..b] == *generated {
        return;
    }
    if std::env::var("HEARTH_BLESS").is_ok() {
        std::fs::write(file, format!("{}{generated}{}", &text[..a], &text[b..])).unwrap();
        return;
    }
    panic!(
        "{} is not what the code says ({name}); run `HEARTH_BLESS=1 cargo test --test docs` and read the change",
        file.display()
    );
}

#[test]
fn the_configuration_reference_relay_toml_and_the_code_agree() {
    check_generated(&root().join("docs/src/configuration.md"), "reference", &reference());
    // Every key the code reads is in relay.toml, under its section (set, or shown in a comment).
    let relay_toml = std::fs::read_to_string(root().join("relay.toml")).unwrap();
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    // The section of a line that sets a key, and of one that shows a key in a comment (an
    // example `[[sync.peers]]` entry is all comments).
    let (mut section, mut shown) = (String::new(), String::new());
    for line in relay_toml.lines() {
        let commented = line.starts_with('#');
        let bare = line.trim_start_matches('#').trim();
        if let Some(name) = bare.strip_prefix("[[").and_then(|s| s.strip_suffix("]]")) {
            shown = format!("[{name}]");
        } else if let Some(name) = bare.strip_prefix('[').and_then(|s| s.strip_suffix(']'))
            && !commented
        {
            section = name.to_string();
            shown = section.clone();
        } else if let Some((key, _)) = bare.split_once(" = ")
            && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            seen.insert((if commented { shown.clone() } else { section.clone() }, key.to_string()));
        }
    }
    let missing: Vec<String> = keys()
        .into_iter()
        .filter(|k| !seen.contains(&(k.section.clone(), k.name.clone())))
        .map(|k| format!("{}.{}", k.section, k.name))
        .collect();
    assert!(missing.is_empty(), "keys the code reads that relay.toml does not show: {missing:?}");
}

#[test]
fn the_admin_api_chapter_lists_every_route_of_the_openapi_document() {
    check_generated(&root().join("docs/src/admin-api.md"), "routes", &routes());
}

/// mdBook's id of a heading: lower case, spaces as `-`, only letters, digits, `-` and `_` kept.
fn heading_id(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The lines of a markdown file outside its fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchors of a markdown file: its headings' ids (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .filter(|line| line.starts_with('#'))
        .map(|line| heading_id(line.trim_start_matches('#').replace('`', "").as_str()))
        .collect()
}

/// The link targets of a markdown file (outside code blocks and code spans).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let before = &rest[..i];
            // Not inside a code span.
            if before.matches('`').count() % 2 == 0 {
                out.push(after[..end].to_string());
            }
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_internal_link_of_the_book_and_the_readme_resolves() {
    let book = root().join("docs/src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&book)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    let summary = std::fs::read_to_string(book.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        assert!(name == "SUMMARY.md" || listed.contains(&name), "{name} is not in SUMMARY.md");
    }
    files.push(root().join("README.md"));
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", file.display()));
                continue;
            }
            if !anchor.is_empty() {
                let body = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&body).contains(anchor) {
                    broken.push(format!("{}: {link}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 260, "README.md has {lines} lines: move the detail into the book (docs/src)");
    for needed in ["cargo run --release", "hearth --config relay.toml", "docs/src/SUMMARY.md"] {
        assert!(readme.contains(needed), "README.md does not show {needed}");
    }
}
