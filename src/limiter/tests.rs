use std::net::{IpAddr, Ipv4Addr};

use super::*;

fn limiter(config: LimitsConfig) -> (Limiter, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    (Limiter::new(&config, clock.clone()), clock)
}

fn ip(n: u32) -> Principal {
    Principal::Ip(IpAddr::V4(Ipv4Addr::from(n)))
}

#[test]
fn limit_type_names_are_stable() {
    let names: Vec<_> = LimitType::ALL.iter().map(|l| l.as_str()).collect();
    assert_eq!(names, ["ws_events", "messages", "api_calls", "admin_auth", "unavailable"]);
}

#[test]
fn default_ws_events_burst_is_50_then_10_per_second() {
    let (l, clock) = limiter(LimitsConfig::default());
    let p = ip(1);
    for _ in 0..50 {
        l.admit(&p, LimitType::WsEvents).unwrap();
    }
    let refused = l.admit(&p, LimitType::WsEvents).unwrap_err();
    assert_eq!(refused.retry_after, Duration::from_millis(100));
    assert_eq!(refused.retry_secs(), 1);
    clock.advance(Duration::from_secs(refused.retry_secs()));
    // One second refills ten frames.
    for _ in 0..10 {
        l.admit(&p, LimitType::WsEvents).unwrap();
    }
    assert!(l.admit(&p, LimitType::WsEvents).is_err());
}

#[test]
fn waiting_the_hinted_seconds_is_always_enough() {
    let mut config = LimitsConfig::default();
    config.human.messages_per_min = 7;
    let (l, clock) = limiter(config);
    let p = ip(2);
    for _ in 0..7 {
        l.admit(&p, LimitType::Messages).unwrap();
    }
    for _ in 0..20 {
        let refused = l.admit(&p, LimitType::Messages).unwrap_err();
        clock.advance(Duration::from_secs(refused.retry_secs()));
        l.admit(&p, LimitType::Messages).unwrap();
    }
}

#[test]
fn quotas_are_separate_per_limit_type_and_principal() {
    let mut config = LimitsConfig::default();
    config.human.messages_per_min = 1;
    let (l, _) = limiter(config);
    l.admit(&ip(3), LimitType::Messages).unwrap();
    assert!(l.admit(&ip(3), LimitType::Messages).is_err());
    l.admit(&ip(3), LimitType::ApiCalls).unwrap();
    l.admit(&ip(4), LimitType::Messages).unwrap();
}

#[test]
fn agents_are_billed_at_the_agent_tier_and_limits_change_live() {
    let agent = crate::protocol::Keys::from_bytes([9; 32]).unwrap().public_key();
    let mut config = LimitsConfig::default();
    config.agent.messages_per_min = 3;
    config.agent_pubkeys = vec![agent];
    let (l, _) = limiter(config.clone());
    let p = Principal::Pubkey(agent);
    assert_eq!(l.tier(&p), Tier::Agent);
    for _ in 0..3 {
        l.admit(&p, LimitType::Messages).unwrap();
    }
    assert!(l.admit(&p, LimitType::Messages).is_err());
    config.agent.messages_per_min = 100;
    l.set_limits(config);
    l.admit(&p, LimitType::Messages).unwrap();
}

#[test]
fn usage_reports_what_the_limiter_decides_with() {
    let (l, clock) = limiter(LimitsConfig::default());
    let p = ip(5);
    assert_eq!(l.usage(&p).first_seen, None);
    assert_eq!(l.usage(&p).limits["ws_events"].remaining, 50);
    for _ in 0..9 {
        l.admit(&p, LimitType::WsEvents).unwrap();
    }
    let u = l.usage(&p);
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
        l.admit(&p, LimitType::WsEvents).unwrap();
    }
    assert!(l.admit(&p, LimitType::WsEvents).is_err());
    let u = l.usage(&p);
    assert_eq!(u.limits["ws_events"].remaining, 0);
    assert_eq!(u.limits["ws_events"].retry_in_secs, 1);
    assert_eq!(u.refusals["ws_events"], 1);
    assert_eq!(u.refusals["messages"], 0);
    clock.advance(Duration::from_secs(5));
    assert_eq!(l.usage(&p).limits["ws_events"].used, 0);
}

#[test]
fn tracked_state_stays_within_the_bound() {
    let config = LimitsConfig { max_tracked_principals: 1000, ..LimitsConfig::default() };
    let (l, _) = limiter(config);
    for n in 0..200_000 {
        l.admit(&ip(n), LimitType::WsEvents).unwrap();
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
    assert_eq!(l.usage(&ip(7)).refusals["unavailable"], 1);
    drop(held);
    assert!(l.acquire_handler(&ip(7)).await.is_ok());
}
