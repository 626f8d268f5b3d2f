//! The frame log of `hearth dev`: every WebSocket frame in and out, and every REST call, one line
//! each on stderr.
//!
//! Owns the line format: `<conn> <- REQ sub1 {"kinds":[1]}`, `<conn> -> OK 3fa2… true ""`; event
//! ids and pubkeys shortened, an event shown by its id, kind, author and content, the line cut at
//! [`MAX_LINE`] characters. A refusal (`OK false`, `CLOSED`, a prefixed `NOTICE`) gets a suffix
//! naming its prefix and, when rate-limited, the limit, so it stands out in a scrolling log; on a
//! terminal the lines are coloured by direction and refusals red.

use std::io::Write;
use std::net::SocketAddr;

use serde_json::Value;

use crate::fanout::ConnId;
use crate::protocol::{Kind, PrivateKinds, RelayMessage};

/// Characters of a frame's rendering kept on its line.
pub const MAX_LINE: usize = 200;

/// Which way a frame went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the client.
    In,
    /// To the client.
    Out,
}

/// Writes the frame log to stderr.
#[derive(Clone, Debug)]
pub struct FrameLog {
    color: bool,
    /// Events of these kinds are shown without their content and tags (NIP-42 read
    /// restrictions: the log is one more reader).
    private: PrivateKinds,
    /// Events of the private groups among these are shown without their content (NIP-29).
    groups: Option<std::sync::Arc<crate::groups::Registry>>,
}

impl FrameLog {
    /// A log; `color` = ANSI colours (stderr is a terminal).
    pub fn new(color: bool) -> FrameLog {
        FrameLog { color, private: PrivateKinds::default(), groups: None }
    }

    /// This log, showing events of the `private` kinds and of private `groups` without their
    /// content.
    pub fn withholding(self, private: PrivateKinds, groups: std::sync::Arc<crate::groups::Registry>) -> FrameLog {
        FrameLog { private, groups: Some(groups), ..self }
    }

    fn line(&self, conn: ConnId, direction: Direction, text: &str) -> String {
        render_line(conn, direction, text, &self.private, self.groups.as_deref())
    }

    /// A connection opened.
    pub fn connected(&self, conn: ConnId, peer: Option<SocketAddr>) {
        let from = peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
        self.write(&format!("c{conn} connected from {from}"), Style::Note);
    }

    /// A connection closed.
    pub fn closed(&self, conn: ConnId) {
        self.write(&format!("c{conn} closed"), Style::Note);
    }

    /// A text frame from the client, as it came.
    pub fn inbound(&self, conn: ConnId, text: &str) {
        self.write(&self.line(conn, Direction::In, text), Style::In);
    }

    /// A frame to the client.
    pub fn outbound(&self, conn: ConnId, message: &RelayMessage) {
        let Ok(text) = message.to_json() else { return };
        let text = self.line(conn, Direction::Out, &text);
        match refusal(message) {
            Some(why) => self.write(&(text + &why), Style::Refused),
            None => self.write(&text, Style::Out),
        }
    }

    /// A REST call and its status: `http POST /api/v1/events -> 200`; a refusal (4xx/5xx) with
    /// its error, when the handler gave one.
    pub fn call(&self, request: &str, status: u16, error: Option<&str>) {
        let line = format!("http {request} -> {status}");
        if status < 400 {
            return self.write(&line, Style::Out);
        }
        let why = error.map_or_else(|| format!("HTTP {status}"), refusal_of);
        self.write(&format!("{line}  !! refused: {why}"), Style::Refused);
    }

    fn write(&self, text: &str, style: Style) {
        let mut err = std::io::stderr().lock();
        let _ = if self.color {
            let code = match style {
                Style::Note => "2",
                Style::In => "36",
                Style::Out => "32",
                Style::Refused => "1;31",
            };
            writeln!(err, "\x1b[{code}m{text}\x1b[0m")
        } else {
            writeln!(err, "{text}")
        };
    }
}

/// How a line is coloured on a terminal.
#[derive(Clone, Copy)]
enum Style {
    /// Connections opening and closing: dim.
    Note,
    /// Frames from the client: cyan.
    In,
    /// Frames to the client: green.
    Out,
    /// Refusals: bold red.
    Refused,
}

/// One frame's line: `c<conn> <- ` or `c<conn> -> `, then the frame, cut at [`MAX_LINE`]; an
/// event of a `private` kind without its content.
#[cfg(test)]
fn line(conn: ConnId, direction: Direction, text: &str, private: &PrivateKinds) -> String {
    render_line(conn, direction, text, private, None)
}

/// One frame's line (see [`line`]), an event of a private group among `groups` without its
/// content too.
fn render_line(
    conn: ConnId,
    direction: Direction,
    text: &str,
    private: &PrivateKinds,
    groups: Option<&crate::groups::Registry>,
) -> String {
    let arrow = match direction {
        Direction::In => "<-",
        Direction::Out => "->",
    };
    format!("c{conn} {arrow} {}", cut(&render(text, private, groups), MAX_LINE))
}

/// The suffix that makes a refusal stand out: `  !! refused: rate-limited (messages)`.
pub fn refusal(message: &RelayMessage) -> Option<String> {
    let text = match message {
        RelayMessage::Ok { accepted: false, message, .. } | RelayMessage::Closed { message, .. } => message,
        RelayMessage::Notice(message) if message.contains(": ") => message,
        _ => return None,
    };
    Some(format!("  !! refused: {}", refusal_of(text)))
}

/// A refusal message's prefix, with the limit when it is rate-limited: `rate-limited (messages)`.
fn refusal_of(text: &str) -> String {
    let prefix = text.split_once(':').map_or(text, |(p, _)| p);
    match (prefix, text.find('('), text.find(')')) {
        ("rate-limited", Some(open), Some(close)) if open < close => format!("{prefix} ({})", &text[open + 1..close]),
        _ => prefix.to_string(),
    }
}

/// A frame as the log shows it: the verb, then each part; a text that is not a JSON array as a
/// JSON string. Control characters a client sent are always escaped: a line stays one line, and
/// no frame can send escape sequences to the developer's terminal.
fn render(text: &str, private: &PrivateKinds, groups: Option<&crate::groups::Registry>) -> String {
    let Ok(Value::Array(parts)) = serde_json::from_str::<Value>(text) else { return Value::from(text).to_string() };
    let mut out = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match part {
            // The verb, and the id after it (subscription, event or challenge), bare.
            Value::String(s) if i < 2 && !s.chars().any(char::is_control) => out.push_str(&short(s)),
            Value::Object(o) if o.contains_key("sig") => out.push_str(&event(part, private, groups)),
            other => out.push_str(&other.to_string()),
        }
    }
    out
}

/// An event by its id, kind, author and content (none for a `private` kind, nor for an event of
/// a private group).
fn event(e: &Value, private: &PrivateKinds, groups: Option<&crate::groups::Registry>) -> String {
    let text = |k: &str| e[k].as_str().unwrap_or("");
    let kind = e["kind"].as_u64().and_then(|k| u16::try_from(k).ok()).map(Kind);
    let in_private_group = || {
        let hs = e["tags"].as_array().into_iter().flatten().filter(|t| t[0] == "h").filter_map(|t| t[1].as_str());
        groups.is_some_and(|g| hs.into_iter().any(|h| g.is_private(h)))
    };
    let content = match kind {
        Some(kind) if private.contains(kind) => "(private kind: content withheld)".to_string(),
        _ if in_private_group() => "(private group: content withheld)".to_string(),
        _ => Value::from(text("content")).to_string(),
    };
    format!("{} kind {} by {} {content}", short(text("id")), e["kind"], short(text("pubkey")))
}

/// A 64-hex id or pubkey as its first four characters and an ellipsis; anything else as it is.
fn short(s: &str) -> String {
    if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) { format!("{}…", &s[..4]) } else { s.to_string() }
}

/// `s` cut to `max` characters, the last one an ellipsis when it was longer.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Keys, Timestamp};

    /// A line with no private kinds.
    fn line(conn: ConnId, direction: Direction, text: &str) -> String {
        super::line(conn, direction, text, &PrivateKinds::default())
    }

    #[test]
    fn an_event_of_a_private_kind_is_shown_without_its_content() {
        let keys = Keys::test(5);
        let private = PrivateKinds::new(&[Kind(4), Kind(1059)]);
        let wrap = keys.sign(Timestamp(1), Kind(1059), vec![vec!["p".into(), "ab".repeat(32)]], "sealed secret");
        let text = serde_json::to_string(&serde_json::json!(["EVENT", "s", wrap])).unwrap();
        let shown = super::line(2, Direction::Out, &text, &private);
        assert_eq!(
            shown,
            format!(
                "c2 -> EVENT s {}… kind 1059 by {}… (private kind: content withheld)",
                &wrap.id.to_hex()[..4],
                &keys.public_key().to_hex()[..4]
            )
        );
        let note = keys.sign(Timestamp(1), Kind(1), vec![], "public words");
        let text = serde_json::to_string(&serde_json::json!(["EVENT", note])).unwrap();
        assert!(super::line(2, Direction::In, &text, &private).ends_with("\"public words\""));
    }

    #[test]
    fn frames_are_shown_by_verb_and_short_ids() {
        assert_eq!(line(3, Direction::In, r#"["REQ","sub1",{"kinds":[1]}]"#), r#"c3 <- REQ sub1 {"kinds":[1]}"#);
        let id = format!("3fa2{}", "0".repeat(60));
        let ok = RelayMessage::ok(id.clone(), true, "");
        assert_eq!(line(3, Direction::Out, &ok.to_json().unwrap()), r#"c3 -> OK 3fa2… true """#);
        let keys = Keys::test(5);
        let e = keys.sign(Timestamp(1), Kind(1), vec![], "hi \"there\"");
        let text = serde_json::to_string(&serde_json::json!(["EVENT", e])).unwrap();
        let pk = keys.public_key().to_hex();
        assert_eq!(
            line(1, Direction::In, &text),
            format!(r#"c1 <- EVENT {}… kind 1 by {}… "hi \"there\"""#, &e.id.to_hex()[..4], &pk[..4])
        );
        // Not JSON: shown as a JSON string; control characters escaped wherever they are.
        assert_eq!(line(1, Direction::In, "hello\nthere"), r#"c1 <- "hello\nthere""#);
        assert_eq!(line(1, Direction::In, "[\"REQ\",\"a\\u001b[2J\",{}]"), r#"c1 <- REQ "a\u001b[2J" {}"#);
    }

    #[test]
    fn a_long_frame_is_cut_at_200_characters() {
        let long = format!(r#"["REQ","s",{{"search":"{}"}}]"#, "é".repeat(500));
        let shown = line(12, Direction::In, &long);
        let frame = shown.strip_prefix("c12 <- ").unwrap();
        assert_eq!(frame.chars().count(), MAX_LINE);
        assert!(frame.ends_with('…'));
    }

    #[test]
    fn refusals_name_their_prefix_and_limit() {
        let limited = RelayMessage::ok("ab", false, "rate-limited: quota exceeded (messages); retry in 3s");
        assert_eq!(refusal(&limited).as_deref(), Some("  !! refused: rate-limited (messages)"));
        let closed = RelayMessage::Closed { sub_id: "s".into(), message: "auth-required: sign in first".into() };
        assert_eq!(refusal(&closed).as_deref(), Some("  !! refused: auth-required"));
        assert_eq!(refusal(&RelayMessage::ok("ab", true, "")), None);
        assert_eq!(refusal(&RelayMessage::Eose("s".into())), None);
    }
}
