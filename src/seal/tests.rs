use super::*;

fn claims() -> Claims {
    Claims {
        park: ParkId::random(),
        owner: "local".into(),
        principal: digest(b"p"),
        request: digest(b"r"),
        round: 1,
        expires_at_ms: 42,
        outstanding: vec!["elicitation-1".into()],
        owner_addr: Some("10.0.0.1:8081".into()),
        replay: None,
    }
}

fn ring(id: &str) -> KeyRing {
    KeyRing::new(vec![Key::generate(id).unwrap().0]).unwrap()
}

#[test]
fn sealed_claims_open_again() {
    let r = ring("k1");
    let c = claims();
    let t = r.seal(&c);
    assert!(t.starts_with("v1.k1."));
    assert_eq!(r.open(&t).unwrap(), c);
    assert_ne!(r.seal(&c), t, "a fresh nonce each time");
}

#[test]
fn any_altered_byte_is_tampering() {
    let r = ring("k1");
    let t = r.seal(&claims());
    let start = "v1.k1.".len();
    for i in start..t.len() {
        let mut b = t.clone().into_bytes();
        b[i] = if b[i] == b'A' { b'B' } else { b'A' };
        let s = String::from_utf8(b).unwrap();
        assert!(r.open(&s).is_err(), "byte {i}");
    }
}

#[test]
fn garbage_never_panics_and_is_refused() {
    let r = ring("k1");
    for bad in [
        "",
        ".",
        "v1..",
        "v1.k1.",
        "v2.k1.AAAA",
        "v1.k1.!!!",
        "v1.k1.AAAA",
        "v1.é.x",
        "v1.k1",
    ] {
        assert!(r.open(bad).is_err(), "{bad}");
    }
    assert_eq!(
        r.open(&"A".repeat(MAX_TOKEN + 1)),
        Err(Invalid(Reason::Malformed))
    );
    let t = r.seal(&claims());
    assert_ne!(r.open(&t[..t.len() - 3]).unwrap_err().0, Reason::UnknownKey);
}

#[test]
fn unknown_or_swapped_key_ids_fail() {
    let r = ring("k1");
    let t = r.seal(&claims());
    assert_eq!(ring("k2").open(&t), Err(Invalid(Reason::UnknownKey)));
    let both = KeyRing::new(vec![
        Key::generate("k2").unwrap().0,
        Key::generate("k1").unwrap().0,
    ])
    .unwrap();
    let swapped = t.replacen("v1.k1.", "v1.k2.", 1);
    assert_eq!(both.open(&swapped), Err(Invalid(Reason::Tampered)));
}

#[test]
fn rotation_keeps_old_states_open_and_seals_with_the_new_key() {
    let (old, old_secret) = Key::generate("old").unwrap();
    let before = KeyRing::new(vec![old]).unwrap();
    let t = before.seal(&claims());
    let after = KeyRing::new(vec![
        Key::generate("new").unwrap().0,
        Key::from_base64("old", &old_secret).unwrap(),
    ])
    .unwrap();
    assert!(after.open(&t).is_ok());
    assert!(after.seal(&claims()).starts_with("v1.new."));
}

#[test]
fn key_rules_and_debug_hide_secrets() {
    assert!(Key::new("k", &[0u8; 12]).is_err());
    assert!(Key::new("bad id", &[0u8; 32]).is_err());
    let (k, secret) = Key::generate("k").unwrap();
    assert!(!format!("{k:?}").contains(&secret));
    assert!(
        KeyRing::new(vec![
            Key::new("a", &[1; 32]).unwrap(),
            Key::new("a", &[2; 32]).unwrap()
        ])
        .is_err()
    );
    assert!(Key::from_base64("p", &format!("{secret}=")).is_ok());
}

fn relayed() -> Relayed {
    Relayed {
        principal: digest(b"p"),
        backend: "/modern".into(),
        request: digest(b"r"),
        expires_at_ms: 42,
        state: "the backend's own state".into(),
        child: Some(1),
    }
}

#[test]
fn relayed_states_open_again_and_only_as_relayed() {
    let r = ring("k1");
    let t = r.seal_relayed(&relayed());
    assert!(t.starts_with("r1.k1.") && KeyRing::is_relayed(&t));
    assert_eq!(r.open_relayed(&t).unwrap(), relayed());
    // Neither form opens as the other, even reframed: the frame is bound in the seal.
    assert_eq!(r.open(&t), Err(Invalid(Reason::Malformed)));
    let reframed = t.replacen("r1.", "v1.", 1);
    assert_eq!(r.open(&reframed), Err(Invalid(Reason::Tampered)));
    let parked = r.seal(&claims()).replacen("v1.", "r1.", 1);
    assert_eq!(r.open_relayed(&parked), Err(Invalid(Reason::Tampered)));
    assert_eq!(
        ring("k2").open_relayed(&t),
        Err(Invalid(Reason::UnknownKey))
    );
    for i in "r1.k1.".len()..t.len() {
        let mut b = t.clone().into_bytes();
        b[i] = if b[i] == b'A' { b'B' } else { b'A' };
        let s = String::from_utf8(b).unwrap();
        assert!(r.open_relayed(&s).is_err(), "byte {i}");
    }
}

#[test]
fn macs_verify_and_reject_flipped_bits() {
    let r = ring("k1");
    let mut tag = r.mac(b"data");
    assert!(r.verify_mac(b"data", &tag));
    tag[0] ^= 1;
    assert!(!r.verify_mac(b"data", &tag));
}

fn session() -> SessionClaims {
    SessionClaims {
        session: ParkId::random(),
        owner: "r1".into(),
        owner_addr: Some("10.0.0.1:8081".into()),
        principal: digest(b"p"),
        backend: "/mcp".into(),
        version: "2025-11-25".into(),
        capabilities: 5,
    }
}

#[test]
fn session_ids_open_again_and_only_as_session_ids() {
    let r = ring("k1");
    let c = session();
    let t = r.seal_session(&c);
    assert!(t.starts_with("s1.k1."));
    // An Mcp-Session-Id is visible ASCII only.
    assert!(t.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    assert_eq!(r.open_session(&t).unwrap(), c);
    assert!(r.open(&t).is_err());
    assert!(r.open_relayed(&t).is_err());
    let state = r.seal(&claims());
    assert!(r.open_session(&state).is_err());
    let forged = format!("s1.k1.{}", &state["v1.k1.".len()..]);
    assert_eq!(r.open_session(&forged).unwrap_err().0, Reason::Tampered);
}
