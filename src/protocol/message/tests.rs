//! Tests of the client frames' parsing, correlation and serialisation.

use super::*;

#[test]
fn client_frames_written_are_read_back_the_same() {
    let keys = crate::protocol::Keys::test(3);
    let event = keys.sign(crate::protocol::Timestamp(1), crate::protocol::Kind(1), vec![], "a \"quoted\" note");
    let filter: Filter = serde_json::from_str(r##"{"kinds":[1],"#t":["x"],"limit":2}"##).unwrap();
    for message in [
        ClientMessage::Event(Box::new(event.clone())),
        ClientMessage::Auth(Box::new(event)),
        ClientMessage::Req { sub_id: "s\n1".into(), filters: vec![filter.clone(), filter.clone()] },
        ClientMessage::Count { sub_id: "c".into(), filters: vec![filter] },
        ClientMessage::Close("s".into()),
        ClientMessage::NegOpen {
            sub_id: "n".into(),
            filter: Box::new(Filter::default()),
            message: vec![0x61, 0, 0, 2, 0],
        },
        ClientMessage::NegMsg { sub_id: "n".into(), message: vec![0x61] },
        ClientMessage::NegClose("n".into()),
    ] {
        let text = serde_json::to_string(&message).unwrap();
        assert_eq!(ClientMessage::parse(&text).unwrap(), message, "{text}");
    }
}

#[test]
fn garbage_is_uncorrelated() {
    assert!(matches!(ClientMessage::parse("nope"), Err(ParseError::Uncorrelated(_))));
    assert!(matches!(ClientMessage::parse("{}"), Err(ParseError::Uncorrelated(_))));
    assert!(matches!(ClientMessage::parse("[1]"), Err(ParseError::Uncorrelated(_))));
    assert!(matches!(ClientMessage::parse(r#"["HELLO"]"#), Err(ParseError::Uncorrelated(_))));
}

#[test]
fn bad_event_keeps_its_id_for_the_ok() {
    let err = ClientMessage::parse(r#"["EVENT",{"id":"abc","kind":"x"}]"#).unwrap_err();
    match err.reply() {
        RelayMessage::Ok { id, accepted, message } => {
            assert_eq!(id, "abc");
            assert!(!accepted);
            assert!(message.starts_with("invalid: "), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_filter_is_closed_with_its_sub_id() {
    let err = ClientMessage::parse(r#"["REQ","s1",{"ids":["ab"]}]"#).unwrap_err();
    assert_eq!(
        err.reply().to_json().unwrap(),
        r#"["CLOSED","s1","invalid: filter 0: id must be 64 lowercase hex characters"]"#
    );
}

#[test]
fn an_error_never_repeats_more_than_200_characters_of_the_input() {
    let long = "x".repeat(100_000);
    let frames = [
        format!(r#"["{long}"]"#),
        format!(r#"["REQ","s",{{"authors":["{long}"]}}]"#),
        format!(r#"["EVENT",{{"id":"ab","content":{{"{long}":1}}}}]"#),
        format!(r#"["REQ","s",{{"kinds":["{long}"]}}]"#),
    ];
    for frame in frames {
        let message = match ClientMessage::parse(&frame).unwrap_err().reply() {
            RelayMessage::Ok { message, .. } | RelayMessage::Closed { message, .. } | RelayMessage::Notice(message) => {
                message
            }
            other => panic!("{other:?}"),
        };
        assert!(message.chars().filter(|c| *c == 'x').count() <= 200, "{}", &message[..300.min(message.len())]);
        assert!(message.starts_with("invalid: "), "{message}");
    }
}

#[test]
fn a_bad_neg_frame_is_answered_with_its_neg_err() {
    let cases = [
        (
            r#"["NEG-OPEN","n",{},"zz"]"#,
            r#"["NEG-ERR","n","invalid: the negentropy message is not hex: Invalid character 'z' at position 0"]"#,
        ),
        (r#"["NEG-OPEN","n",{}]"#, r#"["NEG-ERR","n","invalid: NEG-OPEN takes an id, one filter and a hex message"]"#),
        (
            r#"["NEG-OPEN","n",[{}],"61"]"#,
            r#"["NEG-ERR","n","invalid: filter: invalid type: sequence, expected a filter object"]"#,
        ),
        (r#"["NEG-MSG","n",7]"#, r#"["NEG-ERR","n","invalid: the negentropy message must be a hex string"]"#),
    ];
    for (frame, want) in cases {
        assert_eq!(ClientMessage::parse(frame).unwrap_err().reply().to_json().unwrap(), want, "{frame}");
    }
    assert!(matches!(ClientMessage::parse(r#"["NEG-CLOSE"]"#), Err(ParseError::Uncorrelated(_))));
    let open = ClientMessage::parse(r#"["NEG-OPEN","n",{"kinds":[1]},"6100000200"]"#).unwrap();
    assert!(matches!(open, ClientMessage::NegOpen { ref message, .. } if message == &[0x61, 0, 0, 2, 0]));
}

#[test]
fn req_parses_several_filters() {
    let msg = ClientMessage::parse(r#"["REQ","s",{"kinds":[1]},{"limit":2}]"#).unwrap();
    match msg {
        ClientMessage::Req { sub_id, filters } => {
            assert_eq!(sub_id, "s");
            assert_eq!(filters.len(), 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn relay_messages_serialize_exactly() {
    assert_eq!(RelayMessage::ok("ab", true, "").to_json().unwrap(), r#"["OK","ab",true,""]"#);
    assert_eq!(RelayMessage::Eose("s\"1".into()).to_json().unwrap(), r#"["EOSE","s\"1"]"#);
    let count = RelayMessage::Count { sub_id: "q".into(), count: 3 };
    assert_eq!(count.to_json().unwrap(), r#"["COUNT","q",{"count":3}]"#);
    let e = crate::protocol::Keys::test(5).sign(
        crate::protocol::Timestamp(1),
        crate::protocol::Kind(1),
        vec![],
        "a \"quoted\" line\n",
    );
    let frame = RelayMessage::Event { sub_id: "s\"1".into(), event: e.to_shared_json().unwrap() };
    let want = format!(r#"["EVENT","s\"1",{}]"#, e.to_json().unwrap());
    assert_eq!(frame.to_json().unwrap(), want);
    // The spliced frame is what serde writes for the same message.
    assert_eq!(serde_json::to_string(&frame).unwrap(), want);
}
