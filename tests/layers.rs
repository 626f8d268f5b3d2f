//! The drawing of the house, made from the code's own imports: which module of the library
//! imports which, read from `src/` with a Rust parser, and checked against the floors below.
//!
//! Asserts what the layout promises (docs/src/architecture.md): no circle of imports anywhere, among the
//! files of one folder as much as between folders (a folder's `mod.rs` counts as a module of its
//! own); every import goes from a room to a room on a lower floor, or stays inside its room;
//! rooms on one floor (the transports, say) never import each other; every module is on a
//! floor; no source file over 450 lines (test files exempt); every module opens with a `//!`
//! saying what it owns. `cargo test --test layers -- --nocapture` prints the drawing (with
//! `LAYERS_EDGES=1`, every module's imports too).
//!
//! An import is a `use` or any path in the code (types, calls, patterns, impls) that names a
//! module of the crate: `crate::…`, `super::…`, `self::…`, a child module, or a name a `use`
//! brought in. Tests (`tests.rs` files and `#[cfg(test)]` items) are left out: they may reach
//! across floors to look at what they test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The floors, top first. A room is a module path: it holds that module and every module below
/// it that no longer room names. An import may go from a room to any room on a lower floor.
const FLOORS: &[&[&str]] = &[
    // The fuzz targets' entry points (the differential one runs a PostgreSQL of `testing`'s).
    &["fuzz"],
    // The library's entry points: the relay in other projects' tests, the throwaway relay, the
    // offline commands, the CLI's argument types.
    &["testing", "dev", "cli"],
    &["offline"],
    // A relay: the shared state built, the listener and the routes served.
    &["relay"],
    &["server"],
    &["listener"],
    // The transports: siblings, none imports another.
    &["ws", "rest", "admin", "media"],
    // What rest and admin share.
    &["http"],
    // NIP-77: the background peers over the one round every way of syncing runs.
    &["sync::peers"],
    &["sync"],
    // The gate every transport asks: may this principal publish this event, read with these
    // filters, and as which reader.
    &["gate"],
    // The one publish path (its kind rules one table) and the one read path.
    &["ingest", "query"],
    // NIP-43: join and leave requests, invites, the relay's signed member list.
    // NIP-29: what a group event does, and the relay's answers to it.
    // NIP-62: a request to vanish carried out; the automatic hold of reported events.
    // A whole community's backup read out of the shared state.
    &["membership", "groups::publish", "vanish", "report_hold", "backup"],
    // Live delivery across nodes: the one way an accepted event goes live, and the other nodes';
    // the one way the relay's own events are stored.
    &["delivery"],
    // The shared state and what it holds.
    &["app"],
    &["nip11", "frame_log", "stats", "identity", "sync::status"],
    // The media server's blobs on disk and their owners, beside the store's records.
    &["fanout", "moderation", "audit", "subscription_caps", "blobs"],
    // NIP-29: the groups' state, folded from their stored events, and who may read what.
    &["groups"],
    &["limiter", "metrics"],
    &["config"],
    // The Redis several nodes share: the limiter's buckets and moderation's document ride on it.
    &["cluster"],
    // NIP-77's initiator side, over the client library's socket.
    &["sync::reconcile"],
    // The client library: over the protocol only.
    &["client"],
    // The store, top to bottom: its API and what works over it, then the floors of its inside.
    &["store::check"],
    &["store"],
    // The store's two backends under its API, siblings that never import each other
    // (`APART`): the embedded one's calls into its parts below, and PostgreSQL's (whose whole
    // inside is its own folder). Each implements the contract's methods; `store` dispatches.
    &["store::embedded", "store::postgres"],
    &["store::embedded::open"],
    // NIP-50 in the embedded store: its index opened and caught up, and the search read path.
    &["store::embedded::search"],
    &["store::embedded::write"],
    &["store::embedded::write::writer"],
    &["store::embedded::write::remapping", "store::embedded::write::replay"],
    &["store::embedded::write::compact", "store::embedded::write::merger", "store::embedded::write::apply"],
    &["store::embedded::write::remap", "store::embedded::write::pending", "store::embedded::write::shared"],
    &["store::embedded::write::control"],
    // NIP-77's item sets: over the read path.
    &["store::embedded::items"],
    &["store::embedded::migrate", "store::embedded::query"],
    &["store::embedded::view", "store::embedded::plan"],
    // The index's own mod.rs is the base its two changing parts build on.
    &["store::embedded::index::open", "store::embedded::index::segments"],
    &["store::embedded::index"],
    &["store::embedded::index::meta", "store::embedded::index::memory", "store::embedded::index::merged"],
    &["store::embedded::catalogue"],
    // What both backends stand on: the contract's types, this node's media records and its
    // sled database, the one error, the bytes on disk.
    &["store::contract"],
    &["store::media"],
    &["store::db"],
    &["store::error", "store::progress"],
    &["store::format"],
    // NIP-50's index and the thread that writes it: the store's writer feeds it, so it sits
    // below the store.
    &["search"],
    &["protocol"],
];

/// Folders that never import each other, at any depth: the store's two backends implement one
/// contract side by side.
const APART: &[(&str, &str)] = &[("store::embedded", "store::postgres")];

/// The longest a source file may be (lines).
const MAX_LINES: usize = 450;

/// A module of the library: its path (`store::format::log`; the crate root is ``).
type Module = String;

/// Every file module of the library under `src/`, with its file (the binaries left out).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(src).unwrap().to_string_lossy().into_owned();
            if rel == "bin" || rel == "main.rs" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Some(stem) = rel.strip_suffix(".rs") else { continue };
            if stem.ends_with("tests") && (stem == "tests" || stem.ends_with("/tests")) {
                continue;
            }
            let mut parts: Vec<&str> = stem.split('/').collect();
            if parts.last() == Some(&"mod") || parts == ["lib"] {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// True for an item under `#[cfg(test)]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.parse_args::<syn::Meta>().is_ok_and(|m| m.path().is_ident("test")))
}

/// What one file imports: the absolute module paths its code names (not yet cut back to the
/// file modules that hold them).
struct Imports<'a> {
    known: &'a BTreeMap<Module, PathBuf>,
    /// Where the code being read is: the file's module, then any inline modules.
    here: Vec<String>,
    /// Names that `use` items of the current scope bound to an absolute path.
    aliases: BTreeMap<String, Vec<String>>,
    found: BTreeSet<Vec<String>>,
}

impl Imports<'_> {
    /// The absolute form of `segments`, read where the code is, if it names the crate.
    fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.here.clone(),
            "super" => {
                let mut base = self.here.clone();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                return Some([base, rest.to_vec()].concat());
            }
            _ => {
                if let Some(alias) = self.aliases.get(first) {
                    return Some([alias.clone(), segments[1..].to_vec()].concat());
                }
                let child = [self.here.clone(), vec![first.clone()]].concat();
                if self.known.contains_key(&child.join("::")) {
                    return Some([self.here.clone(), segments.to_vec()].concat());
                }
                return None;
            }
        };
        base.extend(segments[1..].iter().cloned());
        Some(base)
    }

    fn note(&mut self, segments: &[String]) {
        if let Some(abs) = self.absolute(segments) {
            self.found.insert(abs);
        }
    }

    /// Every path a use tree names, and the names it binds.
    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => self.use_tree(&[prefix, &[p.ident.to_string()]].concat(), &p.tree),
            syn::UseTree::Name(n) => self.bind(prefix, n.ident.to_string(), n.ident.to_string()),
            syn::UseTree::Rename(r) => self.bind(prefix, r.ident.to_string(), r.rename.to_string()),
            syn::UseTree::Glob(_) => self.note(prefix),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }

    fn bind(&mut self, prefix: &[String], name: String, bound: String) {
        let path = if name == "self" { prefix.to_vec() } else { [prefix, &[name]].concat() };
        if let Some(abs) = self.absolute(&path) {
            self.aliases.insert(bound, abs.clone());
            self.found.insert(abs);
        }
    }

    fn items(&mut self, items: &[syn::Item]) {
        // `use` items bind names for the whole scope, wherever they stand in it.
        for item in items {
            if let syn::Item::Use(u) = item
                && !is_test(&u.attrs)
            {
                self.use_tree(&[], &u.tree);
            }
        }
        for item in items {
            match item {
                syn::Item::Use(_) => {}
                syn::Item::Mod(m) if is_test(&m.attrs) => {}
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        let outer = std::mem::take(&mut self.aliases);
                        self.here.push(m.ident.to_string());
                        self.items(inner);
                        self.here.pop();
                        self.aliases = outer;
                    }
                }
                item if item_is_test(item) => {}
                item => self.visit_item(item),
            }
        }
    }
}

fn item_is_test(item: &syn::Item) -> bool {
    match item {
        syn::Item::Fn(i) => is_test(&i.attrs),
        syn::Item::Impl(i) => is_test(&i.attrs),
        syn::Item::Struct(i) => is_test(&i.attrs),
        syn::Item::Enum(i) => is_test(&i.attrs),
        syn::Item::Const(i) => is_test(&i.attrs),
        syn::Item::Static(i) => is_test(&i.attrs),
        syn::Item::Trait(i) => is_test(&i.attrs),
        syn::Item::Type(i) => is_test(&i.attrs),
        _ => false,
    }
}

impl<'ast> Visit<'ast> for Imports<'_> {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.note(&segments);
        syn::visit::visit_path(self, path);
    }

    // `pub(in crate::store)` says who may see an item; it imports nothing.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_field(&mut self, f: &'ast syn::Field) {
        if !is_test(&f.attrs) {
            syn::visit::visit_field(self, f);
        }
    }

    fn visit_stmt(&mut self, s: &'ast syn::Stmt) {
        let test = match s {
            syn::Stmt::Item(item) => item_is_test(item),
            syn::Stmt::Expr(syn::Expr::Block(b), _) => is_test(&b.attrs),
            syn::Stmt::Local(l) => is_test(&l.attrs),
            syn::Stmt::Macro(m) => is_test(&m.attrs),
            _ => false,
        };
        if !test {
            syn::visit::visit_stmt(self, s);
        }
    }
}

/// The file module that holds `path`: its longest prefix that is one.
fn holder(known: &BTreeMap<Module, PathBuf>, path: &[String]) -> Option<Module> {
    (0..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| known.contains_key(m))
}

/// Which file module imports which, tests left out.
fn edges(known: &BTreeMap<Module, PathBuf>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut out = BTreeMap::new();
    for (module, file) in known {
        let text = std::fs::read_to_string(file).unwrap();
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let here: Vec<String> = module.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
        let mut imports = Imports { known, here, aliases: BTreeMap::new(), found: BTreeSet::new() };
        imports.items(&parsed.items);
        let targets: BTreeSet<Module> =
            imports.found.iter().filter_map(|p| holder(known, p)).filter(|m| m != module).collect();
        out.insert(module.clone(), targets);
    }
    out
}

/// The room of `module` and its floor (0 is the top): the longest room path that holds it.
fn room(module: &str) -> Option<(usize, &'static str)> {
    let holds = |room: &str| room.is_empty() || module == room || module.starts_with(&format!("{room}::"));
    FLOORS
        .iter()
        .enumerate()
        .flat_map(|(floor, rooms)| rooms.iter().map(move |r| (floor, *r)))
        .filter(|(_, r)| holds(r))
        .max_by_key(|(_, r)| r.len())
}

/// The circles of the graph: its strongly connected parts of more than one module.
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            self.index.insert(v, (self.next, self.next));
            self.next += 1;
            self.stack.push(v);
            for w in self.edges.get(v).into_iter().flatten() {
                match self.index.get(w.as_str()) {
                    None => {
                        self.visit(w);
                        let low = self.index[w.as_str()].1.min(self.index[v].1);
                        self.index.get_mut(v).unwrap().1 = low;
                    }
                    Some(_) if self.stack.contains(&w.as_str()) => {
                        let low = self.index[w.as_str()].0.min(self.index[v].1);
                        self.index.get_mut(v).unwrap().1 = low;
                    }
                    Some(_) => {}
                }
            }
            let (index, low) = self.index[v];
            if index == low {
                let at = self.stack.iter().rposition(|m| *m == v).unwrap();
                let part: Vec<Module> = self.stack.drain(at..).map(String::from).collect();
                if part.len() > 1 {
                    self.out.push(part);
                }
            }
        }
    }
    let mut t = Tarjan { edges, index: BTreeMap::new(), stack: Vec::new(), next: 0, out: Vec::new() };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

fn name(module: &str) -> &str {
    if module.is_empty() { "(crate root)" } else { module }
}

#[test]
fn the_house_has_no_circles_and_every_import_goes_down_a_floor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src);
    let edges = edges(&known);
    let mut drawing = String::new();
    for (floor, rooms) in FLOORS.iter().enumerate() {
        for r in rooms.iter() {
            let inside: Vec<&str> =
                known.keys().filter(|m| room(m).map(|(_, of)| of) == Some(*r)).map(|m| name(m)).collect();
            drawing.push_str(&format!("{floor:>2}  {r:<26} {}\n", inside.join(" ")));
        }
    }
    println!("{drawing}");
    if std::env::var_os("LAYERS_EDGES").is_some() {
        for (from, targets) in &edges {
            println!("{} -> {}", name(from), targets.iter().map(|t| name(t)).collect::<Vec<_>>().join(", "));
        }
    }

    let found = circles(&edges);
    assert!(found.is_empty(), "circles of imports: {found:#?}");

    let mut wrong = Vec::new();
    for (from, targets) in &edges {
        // The crate root declares the modules and re-exports the API; nothing imports it.
        if from.is_empty() {
            continue;
        }
        let Some((from_floor, from_room)) = room(from) else {
            wrong.push(format!("{from} is on no floor"));
            continue;
        };
        for to in targets {
            let Some((to_floor, to_room)) = room(to) else {
                wrong.push(format!("{from} imports {} (on no floor)", name(to)));
                continue;
            };
            if to_room != from_room && to_floor <= from_floor {
                let how = if to_floor == from_floor { "a sibling" } else { "a higher floor" };
                wrong.push(format!("{from} (floor {from_floor}) imports {to} ({how}, floor {to_floor})"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that do not go down:\n{}", wrong.join("\n"));

    let inside = |m: &str, folder: &str| m == folder || m.starts_with(&format!("{folder}::"));
    let crossing: Vec<String> = edges
        .iter()
        .flat_map(|(from, targets)| targets.iter().map(move |to| (from, to)))
        .filter(|(from, to)| {
            APART.iter().any(|(a, b)| (inside(from, a) && inside(to, b)) || (inside(from, b) && inside(to, a)))
        })
        .map(|(from, to)| format!("{from} imports {to}"))
        .collect();
    assert!(crossing.is_empty(), "sibling backends import each other:\n{}", crossing.join("\n"));
}

/// Only the store's dispatch (`src/store/mod.rs`' `dispatch!`) tells the backends apart: no
/// other file names a variant of the store's `Backend`.
#[test]
fn only_the_store_dispatch_matches_on_the_backend() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let named: Vec<String> = modules(&src)
        .into_iter()
        .filter(|(m, _)| m != "store")
        .filter(|(_, file)| {
            let text = std::fs::read_to_string(file).unwrap();
            // `Backend::…` itself, not `StorageBackend::…` (the configuration's choice).
            text.match_indices("Backend::")
                .any(|(at, _)| !text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        })
        .map(|(m, _)| m)
        .collect();
    assert!(named.is_empty(), "files that match on the store's backend outside its dispatch: {named:?}");
    let store = std::fs::read_to_string(src.join("store/mod.rs")).unwrap();
    let arms = store.matches("Backend::Embedded(").count() + store.matches("Backend::Postgres(").count();
    // The macro's two arms, the constructors of `open_tuned`, `open_migrating` and `temporary`,
    // and the unit tests' accessor of the embedded backend's insides.
    assert_eq!(arms, 2 + 4 + 2, "store/mod.rs matches on the backend outside `dispatch!`");
}

#[test]
fn every_module_opens_with_what_it_owns_and_no_source_file_is_over_450_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && path.file_name().is_some_and(|n| n != "tests.rs") {
                files.push(path);
            }
        }
    }
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines = text.lines().count();
        let shown = file.strip_prefix(&src).unwrap().display();
        if lines > MAX_LINES {
            wrong.push(format!("{shown}: {lines} lines"));
        }
        if !text.starts_with("//!") {
            wrong.push(format!("{shown}: does not open with a //! saying what it owns"));
        }
    }
    assert!(files.len() > 100, "the walk found the source files ({})", files.len());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The transports that take events and reads from clients (WebSocket, REST, media) ask the gate
/// (`src/gate.rs`) who may publish, read and upload, and as which reader: none of them calls the
/// group viewer, the membership rules, the access mode or the operator's state itself.
#[test]
fn the_transports_ask_the_gate() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let asked_directly = ["groups.viewer(", "membership::", "access_refusal(", "needs_auth_to_read(", "moderation."];
    let mut found = Vec::new();
    for (module, file) in modules(&src) {
        if !["ws", "rest", "media"].iter().any(|t| module == *t || module.starts_with(&format!("{t}::"))) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        found.extend(asked_directly.iter().filter(|call| text.contains(*call)).map(|call| format!("{module}: {call}")));
    }
    assert!(found.is_empty(), "transports that decide without the gate:\n{}", found.join("\n"));
}
