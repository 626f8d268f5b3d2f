#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

//! The benchmark's smoke mode, run as part of the test suite so the bench never rots: every
//! workload at a tiny size against an in-process relay, each result checked by the bench itself.

use serde_json::Value;

#[test]
fn hearth_bench_smoke_runs_every_workload_and_checks_it() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth-bench")).arg("smoke").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hearth-bench smoke failed:\n{stderr}");
    let reports: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let cmds: Vec<&str> = reports.iter().map(|r| r["cmd"].as_str().unwrap()).collect();
    assert_eq!(cmds, ["gen", "bound", "ingest", "rtt", "query", "fanout", "limiter"]);
    let ingest = &reports[2];
    assert_eq!((ingest["ok_true"].as_u64(), ingest["missing"].as_u64()), (Some(300), Some(0)));
    // Every ping of the round-trip workload was answered (the bench measures only answered ones).
    let rtt = &reports[3];
    assert_eq!(rtt["pings"], 20, "{rtt}");
    assert!(rtt["p50_ms"].as_f64().unwrap() <= rtt["p99_ms"].as_f64().unwrap(), "{rtt}");
    assert_eq!(reports[4]["mismatches"], 0);
    assert_eq!(reports[5]["completeness"], 1.0);
}
