//! The committed fuzz corpora (`fuzz/corpus/<target>/`), replayed on stable through the same
//! entry points the `cargo fuzz` targets call (`hearth::fuzz`): every input that ever found new
//! coverage keeps running on every change, without nightly or libFuzzer.

use std::path::Path;

type Target = fn(&[u8]);

const TARGETS: &[(&str, Target)] = &[
    ("client_message", hearth::fuzz::client_message),
    ("filter", hearth::fuzz::filter),
    ("event", hearth::fuzz::event),
    ("nip98_header", hearth::fuzz::nip98_header),
    ("record", hearth::fuzz::record),
    ("store_files", hearth::fuzz::store_files),
    ("config", hearth::fuzz::config),
    ("blossom_auth", hearth::fuzz::blossom_auth),
    ("range", hearth::fuzz::range),
    ("strip", hearth::fuzz::strip),
    ("nip29_action", hearth::fuzz::nip29_action),
    ("backup_restore", hearth::fuzz::backup_restore),
    ("store_differential", hearth::fuzz::store_differential),
];

#[test]
fn every_committed_fuzz_input_runs_clean_through_its_target() {
    // The differential target runs a PostgreSQL of its own.
    let install = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/postgres/install.sh");
    assert!(std::process::Command::new("bash").arg(install).status().unwrap().success(), "{install}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut targets =
        std::fs::read_dir(&root).unwrap().map(|d| d.unwrap().file_name().into_string().unwrap()).collect::<Vec<_>>();
    targets.sort();
    let mut known: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    known.sort();
    assert_eq!(targets, known, "every target has a corpus and every corpus a target");
    for (name, run) in TARGETS {
        let inputs: Vec<_> = std::fs::read_dir(root.join(name)).unwrap().map(|d| d.unwrap().path()).collect();
        assert!(inputs.len() >= 3, "{name}: {} inputs", inputs.len());
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            // A panic names the input, so it can be run with `cargo fuzz run <target> <file>`.
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{name}: {} panicked", input.display());
        }
    }
}
