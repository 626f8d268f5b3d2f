//! Unit tests of the limiter: GCRA quotas, tiers, the IP ceiling, usage reports, the bounds.

use std::net::{IpAddr, Ipv4Addr};

use super::*;

fn limiter(config: LimitsConfig) -> (Limiter, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    (Limiter::new(&config, clock.clone()), clock)
}

/// Runs one of the limiter's calls to its end: with the memory backend none of them waits.
fn block<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(call)
}

/// [`Limiter::admit`] to its end; the memory backend refuses only by a quota.
fn admit(l: &Limiter, billed: &Billed, limit_type: LimitType) -> Result<(), RateLimited> {
    block(l.admit(billed, limit_type)).map_err(|denied| match denied {
        Denied::Limited(limited) => limited,
        Denied::Unavailable => panic!("the memory backend has no shared store to miss"),
    })
}

fn ip(n: u32) -> Billed {
    Billed::ip(IpAddr::V4(Ipv4Addr::from(n)))
}

#[test]
fn limit_type_names_are_stable() {
    let names: Vec<_> = LimitType::ALL.iter().map(|l| l.as_str()).collect();
    assert_eq!(names, ["ws_events", "ws_reqs", "messages", "api_calls", "upload_bytes", "admin_auth", "unavailable"]);
}

#[test]
fn default_ws_reqs_burst_is_100_then_10_per_second_and_leaves_ws_events_alone() {
    let (l, clock) = limiter(LimitsConfig::default());
    let p = ip(3);
    for _ in 0..100 {
        admit(&l, &p, LimitType::WsReqs).unwrap();
    }
    let refused = admit(&l, &p, LimitType::WsReqs).unwrap_err();
    assert_eq!((refused.limit_type, refused.retry_after), (LimitType::WsReqs, Duration::from_millis(100)));
    // Reads spent to the last frame: writes still have their whole burst, and the other way round.
    for _ in 0..50 {
        admit(&l, &p, LimitType::WsEvents).unwrap();
    }
    assert_eq!(admit(&l, &p, LimitType::WsEvents).unwrap_err().limit_type, LimitType::WsEvents);
    clock.advance(Duration::from_secs(1));
    for _ in 0..10 {
        admit(&l, &p, LimitType::WsReqs).unwrap();
    }
    assert!(admit(&l, &p, LimitType::WsReqs).is_err());
    let usage = block(l.usage(&p.principal));
    assert_eq!((usage.limits["ws_reqs"].limit, usage.limits["ws_reqs"].window_secs), (100, 10));
    assert_eq!((usage.refusals["ws_reqs"], usage.refusals["ws_events"]), (2, 1));
}

#[test]
fn the_ip_ceiling_bills_reads_and_writes_apart() {
    let mut config = LimitsConfig::default();
    config.ip.ws_reqs_per_sec = 1;
    config.ip.ws_reqs_burst_window_secs = 3;
    let (l, _clock) = limiter(config);
    let from = IpAddr::from([10, 0, 0, 9]);
    for n in 0..3 {
        admit(&l, &Billed::new(key(n), from), LimitType::WsReqs).unwrap();
    }
    // A fresh key from the same address: its own budget is full, the address's reads are spent.
    let refused = admit(&l, &Billed::new(key(9), from), LimitType::WsReqs).unwrap_err();
    assert_eq!((refused.limit_type, refused.retry_secs()), (LimitType::WsReqs, 1));
    admit(&l, &Billed::new(key(9), from), LimitType::WsEvents).unwrap();
}

#[test]
fn default_ws_events_burst_is_50_then_10_per_second() {
    let (l, clock) = limiter(LimitsConfig::default());
    let p = ip(1);
    for _ in 0..50 {
        admit(&l, &p, LimitType::WsEvents).unwrap();
    }
    let refused = admit(&l, &p, LimitType::WsEvents).unwrap_err();
    assert_eq!(refused.retry_after, Duration::from_millis(100));
    assert_eq!(refused.retry_secs(), 1);
    clock.advance(Duration::from_secs(refused.retry_secs()));
    // One second refills ten frames.
    for _ in 0..10 {
        admit(&l, &p, LimitType::WsEvents).unwrap();
    }
    assert!(admit(&l, &p, LimitType::WsEvents).is_err());
}

#[test]
fn waiting_the_hinted_seconds_is_always_enough() {
    let mut config = LimitsConfig::default();
    config.human.messages_per_min = 7;
    let (l, clock) = limiter(config);
    let p = ip(2);
    for _ in 0..7 {
        admit(&l, &p, LimitType::Messages).unwrap();
    }
    for _ in 0..20 {
        let refused = admit(&l, &p, LimitType::Messages).unwrap_err();
        clock.advance(Duration::from_secs(refused.retry_secs()));
        admit(&l, &p, LimitType::Messages).unwrap();
    }
}

#[test]
fn quotas_are_separate_per_limit_type_and_principal() {
    let mut config = LimitsConfig::default();
    config.human.messages_per_min = 1;
    let (l, _) = limiter(config);
    admit(&l, &ip(3), LimitType::Messages).unwrap();
    assert!(admit(&l, &ip(3), LimitType::Messages).is_err());
    admit(&l, &ip(3), LimitType::ApiCalls).unwrap();
    admit(&l, &ip(4), LimitType::Messages).unwrap();
}

#[test]
fn agents_are_billed_at_the_agent_tier_and_limits_change_live() {
    let agent = crate::protocol::Keys::test(9).public_key();
    let mut config = LimitsConfig::default();
    config.agent.messages_per_min = 3;
    config.agent_pubkeys = vec![agent];
    let (l, _) = limiter(config.clone());
    let p = Billed::new(Principal::Pubkey(agent), IpAddr::from([10, 0, 0, 1]));
    assert_eq!(l.tier(&p.principal), Tier::Agent);
    for _ in 0..3 {
        admit(&l, &p, LimitType::Messages).unwrap();
    }
    assert!(admit(&l, &p, LimitType::Messages).is_err());
    config.agent.messages_per_min = 100;
    l.set_limits(config);
    admit(&l, &p, LimitType::Messages).unwrap();
}

#[test]
fn usage_reports_what_the_limiter_decides_with() {
    let (l, clock) = limiter(LimitsConfig::default());
    let p = ip(5);
    assert_eq!(block(l.usage(&p.principal)).first_seen, None);
    assert_eq!(block(l.usage(&p.principal)).limits["ws_events"].remaining, 50);
    for _ in 0..9 {
        admit(&l, &p, LimitType::WsEvents).unwrap();
    }
    let u = block(l.usage(&p.principal));
    assert_eq!(u.tier, Tier::Human);
    assert_eq!(
        u.limits["ws_events"],
        LimitUsage { used: 9, limit: 50, remaining: 41, window_secs: 5, retry_in_secs: 0 }
    );
    assert_eq!(
        u.limits["messages"],
        LimitUsage { used: 0, limit: 120, remaining: 120, window_secs: 60, retry_in_secs: 0 }
    );
    for _ in 0..41 {
        admit(&l, &p, LimitType::WsEvents).unwrap();
    }
    assert!(admit(&l, &p, LimitType::WsEvents).is_err());
    let u = block(l.usage(&p.principal));
    assert_eq!(u.limits["ws_events"].remaining, 0);
    assert_eq!(u.limits["ws_events"].retry_in_secs, 1);
    assert_eq!(u.refusals["ws_events"], 1);
    assert_eq!(u.refusals["messages"], 0);
    clock.advance(Duration::from_secs(5));
    assert_eq!(block(l.usage(&p.principal)).limits["ws_events"].used, 0);
}

#[test]
fn tracked_state_stays_within_the_bound() {
    let config = LimitsConfig { max_tracked_principals: 1000, ..LimitsConfig::default() };
    let (l, _) = limiter(config);
    for n in 0..200_000 {
        admit(&l, &ip(n), LimitType::WsEvents).unwrap();
    }
    assert!(l.tracked() <= 1000, "tracked {}", l.tracked());
}

#[tokio::test]
async fn handler_bound_refuses_after_the_wait() {
    let config = LimitsConfig { handler_permits: 1, handler_wait_ms: 20, ..LimitsConfig::default() };
    let (l, _) = limiter(config);
    let held = l.acquire_handler(&ip(6)).await.unwrap();
    let refused = l.acquire_handler(&ip(7)).await.unwrap_err();
    assert_eq!(refused.to_string(), "rate-limited: relay busy (unavailable); retry in 1s");
    assert_eq!(l.usage(&ip(7).principal).await.refusals["unavailable"], 1);
    drop(held);
    assert!(l.acquire_handler(&ip(7)).await.is_ok());
}

fn key(n: u8) -> Principal {
    Principal::Pubkey(crate::protocol::Keys::from_bytes([n + 1; 32]).unwrap().public_key())
}

#[test]
fn many_keys_from_one_ip_share_its_ceiling_and_hear_the_longer_wait() {
    let mut config = LimitsConfig::default();
    config.ip.ws_events_per_sec = 2;
    config.ip.ws_burst_window_secs = 5;
    let (l, clock) = limiter(config);
    let from = IpAddr::from([10, 0, 0, 9]);
    // The ceiling's burst of 10, spread over keys whose own bursts are 50.
    for n in 0..10 {
        admit(&l, &Billed::new(key(n), from), LimitType::WsEvents).unwrap();
    }
    let refused = admit(&l, &Billed::new(key(10), from), LimitType::WsEvents).unwrap_err();
    // The ceiling refills one frame every 500 ms: that is the wait, not the key's (none).
    assert_eq!(refused.retry_after, Duration::from_millis(500));
    // Refused by the ceiling, so not billed to the key either.
    assert_eq!(block(l.usage(&key(10))).limits["ws_events"].used, 0);
    assert_eq!(block(l.usage(&key(10))).refusals["ws_events"], 1);
    let ceiling = l.ceiling_of(from).unwrap();
    assert_eq!(block(l.usage(&ceiling)).tier, Tier::Ip);
    assert_eq!(block(l.usage(&ceiling)).limits["ws_events"].used, 10);
    // Another address has a ceiling of its own.
    admit(&l, &Billed::new(key(10), IpAddr::from([10, 0, 0, 8])), LimitType::WsEvents).unwrap();
    clock.advance(Duration::from_secs(refused.retry_secs()));
    admit(&l, &Billed::new(key(10), from), LimitType::WsEvents).unwrap();
}

#[test]
fn a_key_over_its_own_quota_is_told_the_ceilings_wait_when_that_is_longer() {
    let mut config = LimitsConfig::default();
    config.human.messages_per_min = 1;
    config.ip.messages_per_min = 2;
    let (l, _) = limiter(config);
    let from = IpAddr::from([10, 0, 0, 7]);
    admit(&l, &Billed::new(key(1), from), LimitType::Messages).unwrap();
    admit(&l, &Billed::new(key(2), from), LimitType::Messages).unwrap();
    // key(1) waits 60 s for its own quota; the ceiling (2/min) 30 s: the longer one is said.
    let refused = admit(&l, &Billed::new(key(1), from), LimitType::Messages).unwrap_err();
    assert_eq!(refused.retry_after, Duration::from_secs(60));
    // key(3) is fresh, but the ceiling waits 30 s.
    let refused = admit(&l, &Billed::new(key(3), from), LimitType::Messages).unwrap_err();
    assert_eq!(refused.retry_after, Duration::from_secs(30));
}

#[test]
fn exempt_networks_and_ipv6_neighbours() {
    let mut config = LimitsConfig::default();
    config.ip.api_calls_per_min = 1;
    config.ip_ceiling_exempt = vec!["10.9.0.0/16".parse().unwrap()];
    let (l, _) = limiter(config);
    for n in 0..5 {
        admit(&l, &Billed::new(key(n), IpAddr::from([10, 9, 1, 1])), LimitType::ApiCalls).unwrap();
    }
    assert_eq!(l.ceiling_of(IpAddr::from([10, 9, 1, 1])), None);
    let a: IpAddr = "2001:db8::1".parse().unwrap();
    let b: IpAddr = "2001:db8::2".parse().unwrap();
    admit(&l, &Billed::ip(a), LimitType::ApiCalls).unwrap();
    // The same /64: the same ceiling.
    assert!(admit(&l, &Billed::ip(b), LimitType::ApiCalls).is_err());
}

#[test]
fn admin_auth_failures_bill_the_ip_only() {
    let mut config = LimitsConfig::default();
    config.ip.ws_events_per_sec = 1;
    config.ip.ws_burst_window_secs = 1;
    let (l, _) = limiter(config);
    let p = ip(99);
    for _ in 0..super::ADMIN_AUTH_FAILURES_PER_MIN {
        admit(&l, &p, LimitType::AdminAuth).unwrap();
    }
    assert!(admit(&l, &p, LimitType::AdminAuth).is_err());
    // The ceiling was not billed by them.
    admit(&l, &p, LimitType::WsEvents).unwrap();
}
