//! The hostile-input matrix: frames and requests an attacker or a broken client sends, each with
//! the exact answer it gets. Over WebSocket every case goes down one connection (a bad frame must
//! leave it usable: a barrier COUNT after each case is answered, and nothing else comes before
//! it), except the ones that end the connection, which get their own; over REST each case is one
//! request. Afterwards nothing was stored and a bystander's subscription still delivers.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

/// What a case must be answered with (message texts are prefixes unless the case is `Exact`).
#[derive(Debug)]
enum Want {
    /// Exactly this frame.
    Exact(Value),
    /// `["NOTICE", "<prefix>…"]`.
    Notice(&'static str),
    /// `["OK", <id>, false, "<prefix>…"]`.
    Refused(String, &'static str),
    /// `["CLOSED", <sub>, "<prefix>…"]`.
    Closed(String, &'static str),
    /// The relay closes the connection with this close code.
    CloseCode(u16),
}

enum Input {
    Text(String),
    Binary(Vec<u8>),
    /// A raw text frame's payload (the client library only sends valid UTF-8).
    RawText(Vec<u8>),
}

struct Case {
    name: &'static str,
    input: Input,
    want: Want,
}

fn text(name: &'static str, frame: impl Into<String>, want: Want) -> Case {
    Case { name, input: Input::Text(frame.into()), want }
}

/// A signed event's JSON with `edit` applied (the signature is left as it was).
fn edited(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> (String, Value) {
    let e = sign(&keys(41), now(), 1, &[&["t", "hostile"]], "hostile");
    let mut v = json!(e);
    let map = v.as_object_mut().unwrap();
    edit(map);
    let id = map.get("id").and_then(Value::as_str).unwrap_or("").to_string();
    (id, v)
}

/// `["EVENT", <edited event>]`, refused with `prefix` against the id as sent.
fn event_case(
    name: &'static str,
    prefix: &'static str,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> Case {
    let (id, v) = edited(edit);
    text(name, json!(["EVENT", v]).to_string(), Want::Refused(id, prefix))
}

/// `["REQ", "h", <filter>]`, closed with `prefix`.
fn filter_case(name: &'static str, filter: &str, prefix: &'static str) -> Case {
    text(name, format!(r#"["REQ","h",{filter}]"#), Want::Closed("h".into(), prefix))
}

fn hex64(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

fn ws_cases(max_message: usize) -> Vec<Case> {
    let malformed = "invalid: malformed event: ";
    let mut cases = vec![
        // Not a frame at all.
        text("not JSON", "{not json", Want::Notice("invalid: frame is not a JSON array: ")),
        text("empty text", "", Want::Notice("invalid: frame is not a JSON array: ")),
        text("null", "null", Want::Notice("invalid: frame is not a JSON array: ")),
        text("a number", "42", Want::Notice("invalid: frame is not a JSON array: ")),
        text("a string", r#""EVENT""#, Want::Notice("invalid: frame is not a JSON array: ")),
        text("an object", r#"{"EVENT":{}}"#, Want::Notice("invalid: frame is not a JSON array: ")),
        text(
            "trailing garbage",
            r#"["CLOSE","x"] ["CLOSE","y"]"#,
            Want::Notice("invalid: frame is not a JSON array: "),
        ),
        text("deep nesting", "[".repeat(100_000), Want::Notice("invalid: frame is not a JSON array: ")),
        text(
            "lone surrogate",
            r#"["REQ","\ud800",{}]"#,
            Want::Exact(json!(["NOTICE", "invalid: REQ needs a string id"])),
        ),
        text(
            "empty array",
            "[]",
            Want::Exact(json!(["NOTICE", "invalid: frame must start with a message type string"])),
        ),
        text(
            "type not a string",
            "[1]",
            Want::Exact(json!(["NOTICE", "invalid: frame must start with a message type string"])),
        ),
        text("unknown type", r#"["NOPE"]"#, Want::Exact(json!(["NOTICE", "invalid: unknown message type \"NOPE\""]))),
        text(
            "lower-case type",
            r#"["event",{}]"#,
            Want::Exact(json!(["NOTICE", "invalid: unknown message type \"event\""])),
        ),
        text(
            "a 100k-character type",
            json!([("X".repeat(100_000))]).to_string(),
            Want::Notice("invalid: unknown message type \"XXXX"),
        ),
        // EVENT: arity and types.
        text(
            "EVENT without an event",
            r#"["EVENT"]"#,
            Want::Exact(json!(["OK", "", false, "invalid: EVENT takes exactly one event"])),
        ),
        text(
            "EVENT with two events",
            r#"["EVENT",{"id":"ab"},{}]"#,
            Want::Exact(json!(["OK", "ab", false, "invalid: EVENT takes exactly one event"])),
        ),
        text("EVENT of a number", r#"["EVENT",17]"#, Want::Refused(String::new(), malformed)),
        text("EVENT of an array", r#"["EVENT",[]]"#, Want::Refused(String::new(), malformed)),
        text("EVENT of a partial object", r#"["EVENT",{"id":"abc","kind":1}]"#, Want::Refused("abc".into(), malformed)),
        text("EVENT whose id is a number", r#"["EVENT",{"id":5}]"#, Want::Refused(String::new(), malformed)),
        event_case("kind as a string", malformed, |e| {
            e.insert("kind".into(), json!("1"));
        }),
        event_case("kind past u16", malformed, |e| {
            e.insert("kind".into(), json!(65_536));
        }),
        event_case("kind negative", malformed, |e| {
            e.insert("kind".into(), json!(-1));
        }),
        text_event_number("kind past 2^64", "kind", "18446744073709551616", malformed),
        text_event_number("kind in exponent form", "kind", "1e0", malformed),
        text_event_number("created_at past 2^64", "created_at", "18446744073709551616", malformed),
        text_event_number("created_at in exponent form", "created_at", "1.7e9", malformed),
        text_event_number("created_at fractional", "created_at", "1700000000.5", malformed),
        event_case("created_at negative", malformed, |e| {
            e.insert("created_at".into(), json!(-1));
        }),
        event_case("tags not an array", malformed, |e| {
            e.insert("tags".into(), json!("t"));
        }),
        event_case("a tag not an array", malformed, |e| {
            e.insert("tags".into(), json!(["t"]));
        }),
        event_case("a tag value not a string", malformed, |e| {
            e.insert("tags".into(), json!([["t", 1]]));
        }),
        event_case("an empty tag", "invalid: tag 0 is empty", |e| {
            e.insert("tags".into(), json!([[]]));
        }),
        event_case("content not a string", malformed, |e| {
            e.insert("content".into(), json!({"a": 1}));
        }),
        event_case("sig missing", malformed, |e| {
            e.remove("sig");
        }),
        event_case("pubkey missing", malformed, |e| {
            e.remove("pubkey");
        }),
        // Hex of every wrong shape.
        event_case("id upper-case", malformed, |e| {
            let id = e["id"].as_str().unwrap().to_uppercase();
            e.insert("id".into(), json!(id));
        }),
        event_case("id 63 characters", malformed, |e| {
            let id = e["id"].as_str().unwrap()[..63].to_string();
            e.insert("id".into(), json!(id));
        }),
        event_case("id 65 characters", malformed, |e| {
            let id = format!("{}0", e["id"].as_str().unwrap());
            e.insert("id".into(), json!(id));
        }),
        event_case("id not hex", malformed, |e| {
            e.insert("id".into(), json!(hex64('g')));
        }),
        event_case("pubkey empty", malformed, |e| {
            e.insert("pubkey".into(), json!(""));
        }),
        event_case("pubkey not hex", malformed, |e| {
            e.insert("pubkey".into(), json!(hex64('z')));
        }),
        event_case("sig 127 characters", malformed, |e| {
            let sig = e["sig"].as_str().unwrap()[..127].to_string();
            e.insert("sig".into(), json!(sig));
        }),
        event_case("sig upper-case", malformed, |e| {
            let sig = e["sig"].as_str().unwrap().to_uppercase();
            e.insert("sig".into(), json!(sig));
        }),
        // Well-formed, but not what it claims.
        event_case("content changed after signing", "invalid: event id does not match its content", |e| {
            e.insert("content".into(), json!("changed"));
        }),
        event_case("signature of another event", "invalid: signature does not verify", |e| {
            let other = sign(&keys(41), now(), 1, &[], "other");
            e.insert("sig".into(), json!(other.sig.to_hex()));
        }),
        event_case("pubkey not on the curve", "invalid: ", |e| {
            e.insert("pubkey".into(), json!(hex64('f')));
        }),
        // REQ / COUNT / CLOSE.
        text("REQ without an id", r#"["REQ"]"#, Want::Exact(json!(["NOTICE", "invalid: REQ needs a string id"]))),
        text(
            "REQ with a number id",
            r#"["REQ",5,{}]"#,
            Want::Exact(json!(["NOTICE", "invalid: REQ needs a string id"])),
        ),
        text(
            "REQ with an empty id",
            r#"["REQ","",{}]"#,
            Want::Exact(json!(["CLOSED", "", "invalid: subscription id must not be empty"])),
        ),
        text(
            "REQ without filters",
            r#"["REQ","h"]"#,
            Want::Exact(json!(["CLOSED", "h", "invalid: REQ needs at least one filter"])),
        ),
        filter_case("a filter that is a number", "5", "invalid: filter 0: "),
        filter_case("a filter that is null", "null", "invalid: filter 0: "),
        filter_case(
            "ids of 4 characters",
            r#"{"ids":["abcd"]}"#,
            "invalid: filter 0: id must be 64 lowercase hex characters",
        ),
        filter_case("ids upper-case", &format!(r#"{{"ids":["{}"]}}"#, hex64('A')), "invalid: filter 0: "),
        filter_case("ids not a list", r#"{"ids":"abcd"}"#, "invalid: filter 0: "),
        filter_case(
            "authors of 63 characters",
            &format!(r#"{{"authors":["{}"]}}"#, &hex64('a')[..63]),
            "invalid: filter 0: ",
        ),
        filter_case("kinds negative", r#"{"kinds":[-1]}"#, "invalid: filter 0: "),
        filter_case("kinds past u16", r#"{"kinds":[65536]}"#, "invalid: filter 0: "),
        filter_case("kinds as strings", r#"{"kinds":["1"]}"#, "invalid: filter 0: "),
        filter_case("kinds in exponent form", r#"{"kinds":[1e2]}"#, "invalid: filter 0: "),
        filter_case("since past 2^64", r#"{"since":18446744073709551616}"#, "invalid: filter 0: "),
        filter_case("until fractional", r#"{"until":1.5}"#, "invalid: filter 0: "),
        filter_case("limit negative", r#"{"limit":-1}"#, "invalid: filter 0: "),
        filter_case("limit past 2^64", r#"{"limit":99999999999999999999999}"#, "invalid: filter 0: "),
        filter_case("a tag filter not a list", r##"{"#e":"x"}"##, "invalid: filter 0: "),
        filter_case("a tag filter of numbers", r##"{"#t":[1]}"##, "invalid: filter 0: "),
        filter_case(
            "an unknown field",
            r#"{"searches":"x"}"#,
            "invalid: filter 0: unsupported filter field `searches`",
        ),
        filter_case("a search of nothing", r#"{"search":" -x "}"#, "invalid: search has no word to look for"),
        text(
            "eleven filters",
            format!(r#"["REQ","h"{}]"#, ",{}".repeat(11)),
            Want::Exact(json!(["CLOSED", "h", "error: 11 filters, the limit is 10"])),
        ),
        text(
            "five thousand filters",
            format!(r#"["REQ","h"{}]"#, ",{}".repeat(5_000)),
            Want::Exact(json!(["CLOSED", "h", "error: 5000 filters, the limit is 10"])),
        ),
        text(
            "a 100k-character subscription id",
            json!(["REQ", "s".repeat(100_000), {}]).to_string(),
            Want::Exact(json!([
                "CLOSED",
                "s".repeat(100_000),
                "error: subscription id is 100000 characters, the limit is 64"
            ])),
        ),
        text(
            "a subscription id past max_subid_length",
            json!(["REQ", "s".repeat(65), {}]).to_string(),
            Want::Exact(json!(["CLOSED", "s".repeat(65), "error: subscription id is 65 characters, the limit is 64"])),
        ),
        text(
            "COUNT without filters",
            r#"["COUNT","c"]"#,
            Want::Exact(json!(["CLOSED", "c", "invalid: COUNT needs at least one filter"])),
        ),
        text(
            "COUNT with a bad filter",
            r#"["COUNT","c",{"kinds":"x"}]"#,
            Want::Closed("c".into(), "invalid: filter 0: "),
        ),
        text(
            "CLOSE without an id",
            r#"["CLOSE"]"#,
            Want::Exact(json!(["NOTICE", "invalid: CLOSE takes exactly one subscription id"])),
        ),
        text(
            "CLOSE with a number",
            r#"["CLOSE",5]"#,
            Want::Exact(json!(["NOTICE", "invalid: CLOSE takes exactly one subscription id"])),
        ),
        text(
            "CLOSE with two ids",
            r#"["CLOSE","a","b"]"#,
            Want::Exact(json!(["NOTICE", "invalid: CLOSE takes exactly one subscription id"])),
        ),
        // AUTH.
        text(
            "AUTH without an event",
            r#"["AUTH"]"#,
            Want::Exact(json!(["OK", "", false, "invalid: AUTH takes exactly one event"])),
        ),
        text("AUTH with a challenge string", r#"["AUTH","challenge"]"#, Want::Refused(String::new(), malformed)),
        {
            let e = sign(&keys(42), now(), 1, &[], "not an auth event");
            text(
                "AUTH with a kind 1 event",
                json!(["AUTH", e]).to_string(),
                Want::Refused(e.id.to_hex(), "invalid: AUTH needs a kind 22242 event"),
            )
        },
        {
            let e = sign(&keys(42), now(), 22242, &[["challenge", "wrong"].as_slice(), &["relay", "ws://x"]], "");
            text(
                "AUTH with a wrong challenge",
                json!(["AUTH", e]).to_string(),
                Want::Refused(e.id.to_hex(), "auth-required: the challenge tag does not match"),
            )
        },
        // Size.
        {
            let e = sign(&keys(43), now(), 1, &[], &"x".repeat(max_message));
            text(
                "an event past max_message_length",
                json!(["EVENT", e]).to_string(),
                Want::Refused(e.id.to_hex(), "invalid: message is "),
            )
        },
        text(
            "a frame past max_message_length",
            format!(r#"["NOPE","{}"]"#, "x".repeat(max_message)),
            Want::Notice("invalid: message is "),
        ),
        Case {
            name: "a binary frame",
            input: Input::Binary(vec![0, 159, 146, 150]),
            want: Want::Exact(json!(["NOTICE", "invalid: binary frames are not supported; send text"])),
        },
        // These end the connection.
        text("a frame past twice max_message_length", "x".repeat(max_message * 3), Want::CloseCode(1009)),
        Case {
            name: "a text frame that is not UTF-8",
            input: Input::RawText(b"[\"REQ\",\"\xff\xfe\",{}]".to_vec()),
            want: Want::CloseCode(1007),
        },
    ];
    // Thousands of ids and tag values are a valid (if large) query: answered, empty.
    let ids: Vec<String> = (0..1_500).map(|i| format!("{i:064x}")).collect();
    cases.push(text(
        "1,500 ids",
        json!(["COUNT", "many", {"ids": ids}]).to_string(),
        Want::Exact(json!(["COUNT", "many", {"count": 0}])),
    ));
    let tags: Vec<String> = (0..10_000).map(|i| format!("v{i}")).collect();
    cases.push(text(
        "10,000 tag values",
        json!(["COUNT", "many", {"#t": tags}]).to_string(),
        Want::Exact(json!(["COUNT", "many", {"count": 0}])),
    ));
    cases
}

/// An EVENT whose `field` is the literal number text `number` (beyond what `json!` can write).
fn text_event_number(name: &'static str, field: &str, number: &str, prefix: &'static str) -> Case {
    let (id, mut v) = edited(|_| {});
    v[field] = json!("PLACEHOLDER");
    let frame = json!(["EVENT", v]).to_string().replace("\"PLACEHOLDER\"", number);
    text(name, frame, Want::Refused(id, prefix))
}

fn matches(want: &Want, got: &Value) -> bool {
    let starts = |v: &Value, p: &str| v.as_str().is_some_and(|s| s.starts_with(p));
    match want {
        Want::Exact(v) => got == v,
        Want::Notice(p) => got[0] == "NOTICE" && starts(&got[1], p) && got.as_array().map(Vec::len) == Some(2),
        Want::Refused(id, p) => got[0] == "OK" && got[1] == id.as_str() && got[2] == false && starts(&got[3], p),
        Want::Closed(sub, p) => got[0] == "CLOSED" && got[1] == sub.as_str() && starts(&got[2], p),
        Want::CloseCode(_) => false,
    }
}

/// A text frame with an arbitrary payload, masked as a client's must be (RFC 6455 §5.2).
fn raw_text_frame(payload: &[u8]) -> Vec<u8> {
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// Sends a raw text frame on a fresh connection and returns the close code the relay answers with.
async fn raw_close_code(relay: &TestRelay, payload: &[u8]) -> Option<u16> {
    let mut tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let handshake = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        relay.addr
    );
    tcp.write_all(handshake.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tokio::time::timeout(STEP, tcp.read_exact(&mut byte)).await.unwrap().unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    tcp.write_all(&raw_text_frame(payload)).await.unwrap();
    // Server frames are unmasked: read them until the close frame (opcode 8).
    loop {
        let mut h = [0u8; 2];
        if tokio::time::timeout(STEP, tcp.read_exact(&mut h)).await.ok()?.is_err() {
            return None;
        }
        let len = match h[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                tcp.read_exact(&mut l).await.ok()?;
                u16::from_be_bytes(l) as usize
            }
            127 => {
                let mut l = [0u8; 8];
                tcp.read_exact(&mut l).await.ok()?;
                u64::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut body = vec![0u8; len];
        tcp.read_exact(&mut body).await.ok()?;
        if h[0] & 0x0f == 8 {
            return body.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]));
        }
    }
}

/// The close code of a connection the relay ends after `input`.
async fn close_code(relay: &TestRelay, input: &Input) -> Option<u16> {
    let mut c = relay.connect().await;
    let sent = match input {
        Input::Text(t) => c.ws.send(Message::text(t.clone())).await,
        Input::Binary(b) => c.ws.send(Message::binary(b.clone())).await,
        Input::RawText(payload) => return raw_close_code(relay, payload).await,
    };
    sent.ok()?;
    loop {
        match tokio::time::timeout(STEP, c.ws.next()).await.ok()? {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

#[tokio::test]
async fn every_hostile_websocket_frame_gets_its_exact_answer_and_nothing_is_stored() {
    let relay = TestRelay::start(generous).await;
    let max = relay.nip11().await["limitation"]["max_message_length"].as_u64().unwrap() as usize;
    let cases = ws_cases(max);
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let mut bystander = relay.connect().await;
    bystander.req("watch", vec![json!({})]).await;
    let mut c = relay.connect().await;
    let mut wrong = Vec::new();
    for case in &cases {
        if let Want::CloseCode(code) = case.want {
            let got = close_code(&relay, &case.input).await;
            if got != Some(code) {
                wrong.push(format!("{}: want close {code}, got {got:?}", case.name));
            }
            continue;
        }
        match &case.input {
            Input::Text(t) => c.send_text(t).await,
            Input::Binary(b) => c.ws.send(Message::binary(b.clone())).await.unwrap(),
            Input::RawText(_) => unreachable!("raw frames are for closing cases"),
        }
        let got = c.recv().await;
        if !matches(&case.want, &got) {
            let shown: String = got.to_string().chars().take(300).collect();
            wrong.push(format!("{}: want {:?}, got {shown}", case.name, case.want));
        }
        // The connection is still usable, and the case had exactly one answer.
        c.assert_nothing_before_barrier(case.name).await;
    }
    assert!(wrong.is_empty(), "{} of {} cases answered wrongly:\n{}", wrong.len(), cases.len(), wrong.join("\n"));
    // Nothing was stored, and the bystander saw nothing but still gets live events.
    assert_eq!(c.req("all", vec![json!({})]).await, Vec::<Value>::new());
    bystander.assert_nothing_before_barrier("the bystander").await;
    // A field NIP-01 does not define is not part of the signed content: the event is taken, and
    // stored and served without it.
    let extra = sign(&keys(44), now(), 1, &[], "with an extra field");
    let mut sent = json!(extra);
    sent["extra"] = json!({"a": [1, 2]});
    c.send(json!(["EVENT", sent])).await;
    assert_eq!(c.recv().await, json!(["OK", extra.id.to_hex(), true, ""]));
    assert_eq!(bystander.recv().await, json!(["EVENT", "watch", extra]));
    assert_eq!(c.recv().await, json!(["EVENT", "all", extra]), "the first REQ is still live");
    assert_eq!(c.req("again", vec![json!({})]).await, vec![json!(extra)]);
    let e = sign(&keys(44), now(), 1, &[], "after the matrix");
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    assert_eq!(bystander.recv().await, json!(["EVENT", "watch", e]));
}

const ADMIN_TOKEN: &str = "hostile-admin-token";

/// One hostile HTTP request and the exact answer: status, and the body (an exact JSON document,
/// or the start of its `error` text).
struct HttpCase {
    name: &'static str,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    status: u16,
    want: HttpWant,
}

enum HttpWant {
    Exact(Value),
    Error(&'static str),
    /// Any body with this top-level field (an answer that is not a refusal).
    Field(&'static str),
    /// A refused publish: `accepted` false, the id as sent, `message` (= `error`) starting so.
    Refused(String, &'static str),
}

fn http_case(
    name: &'static str,
    method: &'static str,
    path: &str,
    body: impl Into<Vec<u8>>,
    status: u16,
    want: HttpWant,
) -> HttpCase {
    let headers = vec![("content-type", "application/json".to_string())];
    HttpCase { name, method, path: path.to_string(), headers, body: body.into(), status, want }
}

fn admin_case(
    name: &'static str,
    method: &'static str,
    path: &str,
    body: &str,
    status: u16,
    want: HttpWant,
) -> HttpCase {
    let mut case = http_case(name, method, path, body, status, want);
    case.headers.push(("authorization", format!("Bearer {ADMIN_TOKEN}")));
    case
}

fn http_cases(max_message: usize) -> Vec<HttpCase> {
    use HttpWant::{Error, Exact};
    let e = sign(&keys(45), now(), 1, &[], "over REST");
    let mut changed = json!(e);
    changed["content"] = json!("changed");
    let mut bad_sig = json!(e);
    bad_sig["sig"] = json!(sign(&keys(45), now(), 1, &[], "another").sig.to_hex());
    let refused = |prefix: &'static str| HttpWant::Refused(e.id.to_hex(), prefix);
    let unsupported = || Exact(json!({"error": "content type must be application/json"}));
    let mut cases = vec![
        {
            let mut c =
                http_case("no content type", "POST", "/api/v1/events", json!(e).to_string(), 415, unsupported());
            c.headers.clear();
            c
        },
        {
            let mut c = http_case("text/plain", "POST", "/api/v1/events", json!(e).to_string(), 415, unsupported());
            c.headers = vec![("content-type", "text/plain".into())];
            c
        },
        {
            let mut c =
                http_case("application/jsonfoo", "POST", "/api/v1/query", r#"{"filters":[{}]}"#, 415, unsupported());
            c.headers = vec![("content-type", "application/jsonfoo".into())];
            c
        },
        http_case(
            "a body that is not UTF-8",
            "POST",
            "/api/v1/events",
            b"{\"id\":\"\xff\"}".to_vec(),
            400,
            HttpWant::Refused(String::new(), "invalid: body is not UTF-8"),
        ),
        http_case(
            "a body that is not JSON",
            "POST",
            "/api/v1/events",
            "{not json",
            400,
            HttpWant::Refused(String::new(), "invalid: malformed event: "),
        ),
        http_case(
            "an empty body",
            "POST",
            "/api/v1/events",
            "",
            400,
            HttpWant::Refused(String::new(), "invalid: malformed event: "),
        ),
        http_case(
            "an array",
            "POST",
            "/api/v1/events",
            "[]",
            400,
            HttpWant::Refused(String::new(), "invalid: malformed event: "),
        ),
        http_case("deep nesting", "POST", "/api/v1/query", "[".repeat(50_000), 400, Error("malformed JSON body: ")),
        http_case(
            "a body past max_message_length",
            "POST",
            "/api/v1/events",
            "x".repeat(max_message + 1),
            413,
            Error(""),
        ),
        http_case(
            "content changed after signing",
            "POST",
            "/api/v1/events",
            changed.to_string(),
            400,
            refused("invalid: event id does not match its content"),
        ),
        http_case(
            "a signature of another event",
            "POST",
            "/api/v1/events",
            bad_sig.to_string(),
            400,
            refused("invalid: signature does not verify"),
        ),
        http_case(
            "query without filters",
            "POST",
            "/api/v1/query",
            "{}",
            400,
            Error("malformed JSON body: missing field `filters`"),
        ),
        http_case(
            "a body that is an array, not an object",
            "POST",
            "/api/v1/query",
            r#"[[{}]]"#,
            400,
            Exact(json!({"error": "malformed JSON body: it must be a JSON object"})),
        ),
        http_case(
            "query with an empty list",
            "POST",
            "/api/v1/query",
            r#"{"filters":[]}"#,
            400,
            Exact(json!({"error": "at least one filter is required"})),
        ),
        http_case(
            "query with a string",
            "POST",
            "/api/v1/query",
            r#"{"filters":"x"}"#,
            400,
            Error("malformed JSON body: "),
        ),
        http_case(
            "query with an unknown field",
            "POST",
            "/api/v1/query",
            r#"{"filters":[{}],"x":1}"#,
            400,
            Error("malformed JSON body: unknown field `x`"),
        ),
        http_case(
            "a negative kind",
            "POST",
            "/api/v1/count",
            r#"{"filters":[{"kinds":[-1]}]}"#,
            400,
            Error("malformed JSON body: "),
        ),
        http_case(
            "a limit past 2^64",
            "POST",
            "/api/v1/query",
            r#"{"filters":[{"limit":18446744073709551616}]}"#,
            400,
            Error("malformed JSON body: "),
        ),
        http_case(
            "eleven filters",
            "POST",
            "/api/v1/count",
            format!(r#"{{"filters":[{{}}{}]}}"#, ",{}".repeat(10)),
            400,
            Exact(json!({"error": "11 filters, the limit is 10"})),
        ),
        http_case(
            "an id of 3 characters",
            "GET",
            "/api/v1/events/abc",
            "",
            400,
            Exact(json!({"error": "event id must be 64 lowercase hex characters"})),
        ),
        http_case(
            "an upper-case id",
            "GET",
            &format!("/api/v1/events/{}", hex64('A')),
            "",
            400,
            Exact(json!({"error": "event id must be 64 lowercase hex characters"})),
        ),
        http_case(
            "a percent-escape that decodes to nothing",
            "GET",
            "/api/v1/events/%ZZ",
            "",
            400,
            Exact(json!({"error": "event id must be 64 lowercase hex characters"})),
        ),
        {
            let mut c = http_case(
                "Authorization of garbage",
                "POST",
                "/api/v1/count",
                r#"{"filters":[{}]}"#,
                401,
                Error("auth: malformed header"),
            );
            c.headers.push(("authorization", "Nostr !!!".into()));
            c
        },
        {
            let mut c = http_case(
                "Authorization of base64 that is not an event",
                "POST",
                "/api/v1/count",
                r#"{"filters":[{}]}"#,
                401,
                Error("auth: malformed header"),
            );
            c.headers.push(("authorization", "Nostr bm90IGFuIGV2ZW50".into()));
            c
        },
        http_case(
            "a method the path does not have",
            "DELETE",
            "/api/v1/events",
            "",
            405,
            Exact(json!({"error": "method not allowed"})),
        ),
        http_case("an unknown path", "GET", "/api/v2/events", "", 404, Exact(json!({"error": "not found"}))),
        // The admin API.
        {
            let mut c = http_case("admin without a token", "GET", "/admin/v1/limits", "", 401, Error(""));
            c.headers.clear();
            c
        },
        {
            let mut c = http_case("admin with a wrong token", "GET", "/admin/v1/limits", "", 401, Error(""));
            c.headers.push(("authorization", "Bearer wrong".into()));
            c
        },
        admin_case(
            "a quota past u64",
            "PATCH",
            "/admin/v1/limits",
            r#"{"human":{"messages_per_min":18446744073709551616}}"#,
            400,
            Error(""),
        ),
        admin_case(
            "a quota of u64::MAX",
            "PATCH",
            "/admin/v1/limits",
            r#"{"human":{"messages_per_min":18446744073709551615}}"#,
            400,
            Error(""),
        ),
        admin_case(
            "a quota of zero",
            "PATCH",
            "/admin/v1/limits",
            r#"{"human":{"messages_per_min":0}}"#,
            400,
            Error(""),
        ),
        admin_case(
            "a quota as a string",
            "PATCH",
            "/admin/v1/limits",
            r#"{"human":{"messages_per_min":"10"}}"#,
            400,
            Error(""),
        ),
        admin_case(
            "a quota fractional",
            "PATCH",
            "/admin/v1/limits",
            r#"{"human":{"messages_per_min":1.5}}"#,
            400,
            Error(""),
        ),
        admin_case(
            "an unknown tier",
            "PATCH",
            "/admin/v1/limits",
            r#"{"robot":{"messages_per_min":10}}"#,
            400,
            Error(""),
        ),
        admin_case("an unknown quota", "PATCH", "/admin/v1/limits", r#"{"human":{"bananas":10}}"#, 400, Error("")),
        admin_case("limits not an object", "PATCH", "/admin/v1/limits", "[]", 400, Error("")),
        admin_case(
            "?limit=-5 on usage",
            "GET",
            "/admin/v1/usage?limit=-5",
            "",
            400,
            Exact(json!({"error": "limit must be a whole number"})),
        ),
        admin_case(
            "?limit=-5 on audit",
            "GET",
            "/admin/v1/audit?limit=-5",
            "",
            400,
            Exact(json!({"error": "limit must be a whole number"})),
        ),
        admin_case(
            "?limit=1e3 on audit",
            "GET",
            "/admin/v1/audit?limit=1e3",
            "",
            400,
            Exact(json!({"error": "limit must be a whole number"})),
        ),
        admin_case(
            "?limit past u64, clamped",
            "GET",
            "/admin/v1/audit?limit=99999999999999999999999",
            "",
            200,
            HttpWant::Field("entries"),
        ),
        admin_case(
            "a percent-encoded IPv6 address",
            "GET",
            "/admin/v1/usage/ip/%3A%3A1",
            "",
            200,
            HttpWant::Field("connections"),
        ),
        admin_case(
            "a percent-encoding that is not UTF-8",
            "GET",
            "/admin/v1/usage/ip/%FF",
            "",
            400,
            Exact(json!({"error": "`\u{fffd}` is not an IP address"})),
        ),
        admin_case(
            "NIP-86 as application/json",
            "POST",
            "/",
            r#"{"method":"supportedmethods","params":[]}"#,
            415,
            Exact(json!({"error": "content type must be application/nostr+json+rpc"})),
        ),
        admin_case("usage of a bad pubkey", "GET", "/admin/v1/usage/xyz", "", 400, Error("")),
        admin_case("usage of a bad address", "GET", "/admin/v1/usage/ip/999.1.1.1", "", 400, Error("")),
        admin_case(
            "a tier for a bad pubkey",
            "PUT",
            "/admin/v1/pubkeys/xyz/tier",
            r#"{"tier":"agent"}"#,
            400,
            Error(""),
        ),
        admin_case(
            "an unknown tier for a pubkey",
            "PUT",
            &format!("/admin/v1/pubkeys/{}/tier", keys(46).public_key().to_hex()),
            r#"{"tier":"robot"}"#,
            400,
            Error(""),
        ),
        admin_case("an export filter that is not JSON", "GET", "/admin/v1/export?filter=%7B", "", 400, Error("")),
    ];
    // Thousands of ids are a valid (if large) query.
    let ids: Vec<String> = (0..1_500).map(|i| format!("{i:064x}")).collect();
    cases.push(http_case(
        "1,500 ids",
        "POST",
        "/api/v1/count",
        json!({"filters": [{"ids": ids}]}).to_string(),
        200,
        Exact(json!({"count": 0})),
    ));
    cases
}

/// The limits document as the admin API serves it.
async fn limits_document(relay: &TestRelay) -> String {
    let resp = web().get(relay.http_url("/admin/v1/limits")).bearer_auth(ADMIN_TOKEN).send().await;
    resp.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn every_hostile_http_request_gets_its_exact_status_and_body_and_nothing_is_stored() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.admin.token = ADMIN_TOKEN.into();
    })
    .await;
    let max = relay.nip11().await["limitation"]["max_message_length"].as_u64().unwrap() as usize;
    let limits_before = limits_document(&relay).await;
    let cases = http_cases(max);
    let http = web();
    let mut wrong = Vec::new();
    for case in &cases {
        let mut req = http.request(case.method.parse().unwrap(), relay.http_url(&case.path)).body(case.body.clone());
        for (name, value) in &case.headers {
            req = req.header(*name, value);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let got: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        let body_ok = match &case.want {
            HttpWant::Exact(v) => &got == v,
            HttpWant::Error(p) => got["error"].as_str().is_some_and(|s| s.starts_with(p)),
            HttpWant::Field(name) => got.get(name).is_some(),
            HttpWant::Refused(id, p) => {
                got["accepted"] == false
                    && got["id"] == id.as_str()
                    && got["message"].as_str().is_some_and(|s| s.starts_with(p))
                    && got["error"] == got["message"]
            }
        };
        if status != case.status || !body_ok {
            let shown: String = got.to_string().chars().take(300).collect();
            wrong.push(format!("{}: want {}, got {status} {shown}", case.name, case.status));
        }
    }
    assert!(wrong.is_empty(), "{} of {} cases answered wrongly:\n{}", wrong.len(), cases.len(), wrong.join("\n"));
    // Nothing was stored and no quota changed.
    assert_eq!(relay.connect().await.req("all", vec![json!({})]).await, Vec::<Value>::new());
    assert_eq!(limits_before, limits_document(&relay).await);
}
