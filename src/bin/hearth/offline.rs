//! The subcommands that work on the configured data directory (or, for `backup` and `sync`,
//! through the running relay that holds it): their arguments handed to `hearth::offline`, their
//! output printed, their exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use super::load_config;

/// The subcommands that work on the data directory of the configuration, not on a relay.
pub(crate) enum Offline {
    Export {
        filter: Option<String>,
        media: Option<PathBuf>,
    },
    Import {
        file: Option<PathBuf>,
        media: Option<PathBuf>,
    },
    Sync {
        peer: String,
        local: Option<String>,
        filter: Option<String>,
        direction: hearth::config::Direction,
        dry_run: bool,
        allow_public: bool,
    },
    Compact,
    Backup {
        dir: PathBuf,
        relay: Option<String>,
    },
    Restore {
        dir: PathBuf,
    },
    Check {
        repair: bool,
    },
    Migrate,
    ToPostgres,
    SearchReindex,
}

impl Offline {
    /// The subcommand's name.
    fn name(&self) -> &'static str {
        match self {
            Offline::Export { .. } => "export",
            Offline::Import { .. } => "import",
            Offline::Sync { .. } => "sync",
            Offline::Compact => "compact",
            Offline::Backup { .. } => "backup",
            Offline::Restore { .. } => "restore",
            Offline::Check { .. } => "check",
            Offline::Migrate | Offline::ToPostgres => "migrate",
            Offline::SearchReindex => "search-reindex",
        }
    }
}

/// `export`, `import`, `compact`, `check` and `migrate` on the configured data directory.
pub(crate) async fn offline(command: Offline, config: Option<&std::path::Path>) -> ExitCode {
    use hearth::offline;
    let config = match load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let name = command.name();
    let outcome = match command {
        Offline::Export { filter, media } => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let done = offline::export(config, filter.as_deref(), media.as_deref(), &mut out).await;
            done.map(|(_, blobs)| offline::exported_media(blobs, media.as_deref()))
        }
        Offline::Import { file, media } => {
            let input: Box<dyn std::io::BufRead + Send> = match &file {
                Some(path) => match std::fs::File::open(path) {
                    Ok(f) => Box::new(std::io::BufReader::new(f)),
                    Err(e) => {
                        eprintln!("hearth: {}: {e}", path.display());
                        return ExitCode::from(offline::UNUSABLE);
                    }
                },
                None => Box::new(std::io::BufReader::new(std::io::stdin())),
            };
            offline::import(config, input, media.as_deref()).await.map(|summary| {
                println!("{}", serde_json::to_string(&summary).unwrap_or_default());
                let blobs_invalid = summary.media.as_ref().map_or(0, |m| m.invalid);
                if summary.invalid == 0 && blobs_invalid == 0 { offline::OK } else { offline::INVALID }
            })
        }
        Offline::Sync { peer, local, filter, direction, dry_run, allow_public } => {
            let filter = match filter.as_deref().map(serde_json::from_str).transpose() {
                Ok(filter) => filter.unwrap_or_default(),
                Err(e) => {
                    eprintln!("hearth: --filter: {e}");
                    return ExitCode::from(offline::UNUSABLE);
                }
            };
            let planned = hearth::sync::Round { url: peer, filter, direction, dry_run, allow_public };
            let (outcome, summary) = match offline::sync(config, planned, local).await {
                Ok(summary) => (Ok(if summary.refused == 0 { offline::OK } else { offline::INVALID }), Some(summary)),
                Err((e, summary)) => (Err(e), summary),
            };
            if let Some(summary) = summary {
                println!("{}", serde_json::to_string(&summary).unwrap_or_default());
            }
            outcome
        }
        Offline::Migrate => offline::migrate(config).await.map(|done| {
            println!("{}", serde_json::to_string(&done).unwrap_or_default());
            match &done.import {
                Some(summary) if summary.invalid > 0 => offline::INVALID,
                _ => offline::OK,
            }
        }),
        Offline::ToPostgres => offline::to_postgres(config).await.map(|moved| {
            println!("{}", serde_json::to_string(&moved).unwrap_or_default());
            if moved.stored == moved.events { offline::OK } else { offline::INVALID }
        }),
        Offline::Backup { dir, relay } => offline::backup(config, &dir, relay.as_deref()).await.map(|manifest| {
            println!("{}", serde_json::to_string(&manifest).unwrap_or_default());
            offline::OK
        }),
        Offline::Restore { dir } => offline::restore(config, &dir).await.map(|restored| {
            println!("{}", serde_json::to_string(&restored).unwrap_or_default());
            if restored.stored == restored.events { offline::OK } else { offline::INVALID }
        }),
        Offline::Compact => offline::compact(config).await.map(|done| {
            println!("{}", serde_json::to_string(&done).unwrap_or_default());
            offline::OK
        }),
        Offline::SearchReindex => offline::search_reindex(config).await.map(|done| {
            println!("{}", serde_json::to_string(&done).unwrap_or_default());
            offline::OK
        }),
        Offline::Check { repair } => offline::check(config, repair).await.map(|checked| {
            let (lines, code) = offline::check_report(&checked, repair);
            for line in lines {
                println!("{line}");
            }
            code
        }),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("hearth: {e}{}", e.while_running(name));
            ExitCode::from(e.exit_code())
        }
    }
}
