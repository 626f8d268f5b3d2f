//! The configuration's load path: the layers, the sources, the validation and its messages.

use super::*;
use crate::config::Source;
use crate::config::{QuotaKey, Tier};

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn key(tier: Tier, key: QuotaKey) -> LimitKey {
    LimitKey { tier, key }
}

#[test]
fn embedded_relay_toml_equals_built_in_defaults() {
    let from_file: Config = config::Config::builder()
        .add_source(config::File::from_str(EMBEDDED_RELAY_TOML, config::FileFormat::Toml))
        .build()
        .unwrap()
        .try_deserialize()
        .unwrap();
    assert_eq!(from_file, Config::default());
}

#[test]
fn sync_peers_are_read_from_the_file_and_a_bad_one_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    let load = |peer: &str| {
        std::fs::write(&file, format!("[[sync.peers]]\n{peer}\n")).unwrap();
        Config::load(Some(&file), &env(&[]))
    };
    let c = load("url = \"wss://relay.example\"\ndirection = \"both\"").unwrap();
    let peer = &c.sync.peers[0];
    assert_eq!((peer.url.as_str(), peer.filter.as_str(), peer.interval_secs), ("wss://relay.example", "{}", 300));
    assert_eq!(peer.direction, super::super::Direction::Both);
    for (peer, want) in [
        ("url = \"https://relay.example\"", "`sync.peers[0].url` must start with ws:// or wss://"),
        ("url = \"ws://\"", "`sync.peers[0].url` is not a URL: empty host"),
        ("url = \"ws://a\"\nfilter = \"[]\"", "`sync.peers[0].filter` is not a filter"),
        ("url = \"ws://a\"\ninterval_secs = 0", "`sync.peers[0].interval_secs` must be a positive number"),
    ] {
        let e = load(peer).unwrap_err().to_string();
        assert!(e.contains(want), "{peer}: {e}");
    }
}

#[test]
fn media_on_s3_is_read_from_the_environment_and_a_missing_key_is_named() {
    let all = [
        ("HEARTH_MEDIA__STORE", "s3"),
        ("HEARTH_MEDIA__S3_ENDPOINT", "http://127.0.0.1:3900"),
        ("HEARTH_MEDIA__S3_BUCKET", "hearth-media"),
        ("HEARTH_MEDIA__S3_REGION", "garage"),
        ("HEARTH_MEDIA__S3_ACCESS_KEY_ID", "GK0123"),
        ("HEARTH_MEDIA__S3_SECRET_ACCESS_KEY", "s3cr3t"),
    ];
    let c = Config::load(None, &env(&all)).unwrap();
    assert_eq!(c.media.store, crate::config::MediaStore::S3);
    assert_eq!((c.media.s3_endpoint.as_str(), c.media.s3_bucket.as_str()), ("http://127.0.0.1:3900", "hearth-media"));
    assert_eq!((c.media.s3_region.as_str(), c.media.s3_access_key_id.as_str()), ("garage", "GK0123"));
    assert_eq!(c.media.s3_secret_access_key.expose(), "s3cr3t");
    assert!(!format!("{c:?}").contains("s3cr3t"));
    let without_secret: Vec<(&str, &str)> = all[..5].to_vec();
    let e = Config::load(None, &env(&without_secret)).unwrap_err().to_string();
    assert!(e.contains("`media.s3_secret_access_key` media.store is \"s3\": set the access key's secret"), "{e}");
    let e = Config::load(None, &env(&[("HEARTH_MEDIA__STORE", "ftp")])).unwrap_err().to_string();
    assert!(e.contains("media.store"), "{e}");
}

#[test]
fn env_overrides_file() {
    let c = Config::load(
        None,
        &env(&[
            ("HEARTH_SERVER__BIND", "127.0.0.1:0"),
            ("HEARTH_LIMITATION__MAX_LIMIT", "7"),
            ("HEARTH_LIMITATION__DEFAULT_LIMIT", "7"),
            ("HEARTH_ADMIN__BIND", "127.0.0.1:7778"),
            ("HEARTH_KEY", "not config"),
        ]),
    )
    .unwrap();
    assert_eq!(c.server.bind, "127.0.0.1:0".parse().unwrap());
    assert_eq!(c.admin.bind, Some("127.0.0.1:7778".parse().unwrap()));
    assert_eq!(c.limitation.max_limit, 7);
}

#[test]
fn list_keys_accept_comma_separated_env_values() {
    let a = "a".repeat(64);
    let b = "b".repeat(64);
    let c = Config::load(
        None,
        &env(&[
            ("HEARTH_LIMITS__AGENT_PUBKEYS", &format!("{a},{b}")),
            ("HEARTH_AUTH__TRUSTED_PROXIES", "127.0.0.1"),
            ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "20"),
        ]),
    )
    .unwrap();
    let parsed: Vec<String> = c.limits.agent_pubkeys.iter().map(|p| p.to_hex()).collect();
    assert_eq!(parsed, vec![a, b]);
    assert_eq!(c.auth.trusted_proxies, vec![std::net::IpAddr::from([127, 0, 0, 1])]);
    assert_eq!(c.limits.human.ws_events_per_sec, 20);
    assert_eq!(c.limits.agent.ws_events_per_sec, 10);
}

#[test]
fn private_kinds_default_to_direct_messages_and_gift_wraps_and_take_an_env_list() {
    let kinds = |c: Config| c.auth.private_kinds.iter().map(|k| k.0).collect::<Vec<u16>>();
    assert_eq!(kinds(Config::load(None, &env(&[])).unwrap()), vec![4, 1059, 21059]);
    assert_eq!(kinds(Config::default()), vec![4, 1059, 21059]);
    let c = Config::load(None, &env(&[("HEARTH_AUTH__PRIVATE_KINDS", "4,1059,14")])).unwrap();
    assert_eq!(kinds(c), vec![4, 1059, 14]);
    assert!(Config::load(None, &env(&[("HEARTH_AUTH__PRIVATE_KINDS", "4,dm")])).is_err());
}

#[test]
fn npub_is_accepted_where_a_pubkey_is() {
    let npub = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg";
    let c = Config::load(None, &env(&[("HEARTH_AUTH__MEMBERS", npub)])).unwrap();
    assert_eq!(c.auth.members[0].to_hex(), "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e");
}

#[test]
fn sources_name_env_and_default() {
    let c = Config::load(None, &env(&[("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "7")])).unwrap();
    assert_eq!(c.sources[&key(Tier::Agent, QuotaKey::MessagesPerMin)], Source::Env);
    assert_eq!(c.sources[&key(Tier::Human, QuotaKey::MessagesPerMin)], Source::Default);
    let c = Config::load(None, &env(&[("HEARTH_LIMITS__HUMAN__WS_REQS_PER_SEC", "25")])).unwrap();
    assert_eq!((c.limits.human.ws_reqs_per_sec, c.limits.human.ws_reqs_burst_window_secs), (25, 10));
    assert_eq!(c.sources[&key(Tier::Human, QuotaKey::WsReqsPerSec)], Source::Env);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.toml");
    std::fs::write(&file, "[limits.human]\nws_events_per_sec = 3\nmessages_per_min = 120\n").unwrap();
    let c = Config::load(Some(&file), &env(&[])).unwrap();
    assert_eq!(c.sources[&key(Tier::Human, QuotaKey::WsEventsPerSec)], Source::Config);
    // Set in the file, but to the default value.
    assert_eq!(c.sources[&key(Tier::Human, QuotaKey::MessagesPerMin)], Source::Default);
}

#[test]
fn bad_values_name_their_key() {
    let cases = [
        ("HEARTH_LIMITATION__MAX_SUBSCRIPTIONS", "0", "limitation.max_subscriptions"),
        ("HEARTH_SERVER__BIND", "nowhere", "server.bind"),
        ("HEARTH_SERVER__BINDD", "x", "bindd"),
        ("HEARTH_LIMITATION__MAX_LIMIT", "-3", "max_limit"),
        ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "0", "limits.human.ws_events_per_sec"),
        ("HEARTH_LIMITS__IP__WS_REQS_PER_SEC", "0", "limits.ip.ws_reqs_per_sec"),
        (
            "HEARTH_LIMITS__AGENT__WS_REQS_BURST_WINDOW_SECS",
            "3601",
            "`limits.agent.ws_reqs_burst_window_secs` must be at most 3600",
        ),
        ("HEARTH_SERVER__MAX_SUBSCRIPTIONS_PER_IP", "0", "server.max_subscriptions_per_ip"),
        ("HEARTH_SERVER__MAX_SUBSCRIPTIONS_TOTAL", "0", "server.max_subscriptions_total"),
        ("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "-1", "messages_per_min"),
        ("HEARTH_LIMITS__HANDLER_PERMITS", "0", "limits.handler_permits"),
        ("HEARTH_AUTH__MEMBERS", "nope", "auth.members"),
        ("HEARTH_AUTH__TRUSTED_PROXIES", "x.y", "auth.trusted_proxies"),
        ("HEARTH_ADMIN__BIND", "nowhere", "admin.bind"),
        ("HEARTH_INFO__PUBKEY", "ab", "info.pubkey"),
        (
            "HEARTH_LIMITS__IP__WS_EVENTS_PER_SEC",
            "18446744073709551615",
            "`limits.ip.ws_events_per_sec` must be at most 10000000",
        ),
        (
            "HEARTH_LIMITS__HUMAN__WS_BURST_WINDOW_SECS",
            "3601",
            "`limits.human.ws_burst_window_secs` must be at most 3600",
        ),
        ("HEARTH_STORAGE__COMPACT_DEAD_RATIO", "1.5", "storage.compact_dead_ratio"),
        (
            "HEARTH_STORAGE__BACKEND",
            "postgres",
            "`storage.postgres_url` storage.backend is \"postgres\": set it to postgres://",
        ),
        ("HEARTH_STORAGE__BACKEND", "mysql", "storage.backend"),
    ];
    for (k, v, named) in cases {
        let err = Config::load(None, &env(&[(k, v)])).unwrap_err().to_string();
        assert!(err.contains(named), "{k}={v}: {err}");
    }
}

#[test]
fn what_an_operator_mistypes_is_named_with_what_to_write_instead() {
    let e = Config::load(None, &env(&[("HEARTH_ACCESS__MODE", "members_only")])).unwrap_err().to_string();
    assert!(
        e.contains("`members_only` is not an access mode: use \"public\", \"members-write\" or \"members-only\""),
        "{e}"
    );
    let e = Config::load(None, &env(&[("HEARTH_RELAY__SECRET_KEY", "not-a-key")])).unwrap_err().to_string();
    assert_eq!(
        e,
        "configuration: `relay.secret_key` is not a secret key: give 64 hex characters or an nsec, or leave it \
         empty to have one generated and kept in the data directory (relay.key)"
    );
    let c = Config::load(None, &env(&[("HEARTH_SERVER__BIND", "localhost:7777")])).unwrap();
    assert!(c.server.bind.ip().is_loopback() && c.server.bind.port() == 7777, "{}", c.server.bind);
    let e = Config::load(None, &env(&[("HEARTH_SERVER__BIND", "7777")])).unwrap_err().to_string();
    assert!(e.contains("\"7777\" is not an address like 127.0.0.1:7777, [::]:7777 or localhost:7777"), "{e}");
    let upper = "AB".repeat(32);
    let c = Config::load(None, &env(&[("HEARTH_AUTH__MEMBERS", &upper)])).unwrap();
    assert_eq!(c.auth.members[0].to_hex(), "ab".repeat(32));
    let names = env(&[
        ("HEARTH_LIMITS_HUMAN_WS_EVENTS_PER_SEC", "5"),
        ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "5"),
        ("HEARTH_KEY", "the CLI's"),
        ("HEARTH_ACCESSMODE", "public"),
    ]);
    assert_eq!(misspelled(&names), ["HEARTH_ACCESSMODE", "HEARTH_LIMITS_HUMAN_WS_EVENTS_PER_SEC"]);
}
