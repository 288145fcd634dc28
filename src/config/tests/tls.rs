//! The TLS files of an `https` backend, read and checked when the config is loaded.

use crate::config::{Config, Transport};

#[test]
fn a_private_ca_file_is_read_and_checked_with_the_config() {
    let dir = std::env::temp_dir().join(format!("mrtr-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pem = |name: &str| {
        rcgen::generate_simple_self_signed(vec![name.to_owned()])
            .unwrap()
            .cert
            .pem()
    };
    let write = |file: &str, text: &str| {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        path
    };
    let two = write("two.pem", &(pem("a.internal") + &pem("b.internal")));
    let none = write("none.pem", "no certificate here\n");
    let garbled = write(
        "garbled.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let parse = |url: &str, kind: &str, ca: &std::path::Path| {
        Config::parse(
            &format!(
                "[[backend]]\nname = \"h\"\nkind = \"{kind}\"\nurl = \"{url}\"\nca_file = {:?}\n",
                ca.display().to_string()
            ),
            None,
        )
    };
    let ok = parse("https://mcp.internal/mcp", "http", &two).unwrap();
    let Transport::Http(h) = &ok.backends[0].transport else {
        panic!("an http backend")
    };
    assert_eq!(h.ca.as_ref().map(|ca| ca.roots.len()), Some(2));
    let described = ok.describe();
    assert!(
        described.contains(&format!("trusting {} (2 roots)", two.display())),
        "{described}"
    );
    let public = Config::parse(
        "[[backend]]\nname = \"h\"\nkind = \"http\"\nurl = \"https://x/mcp\"\n",
        None,
    )
    .unwrap();
    assert!(public.describe().contains("trusting the bundled roots"));
    let ok = parse("https://mcp.internal/sse", "sse", &two).unwrap();
    assert!(matches!(&ok.backends[0].transport, Transport::Sse(h) if h.ca.is_some()));
    let cases = [
        (dir.join("missing.pem"), "https://x/mcp", "cannot read it"),
        (none, "https://x/mcp", "no PEM certificate"),
        (garbled, "https://x/mcp", "certificate 1"),
        (two.clone(), "http://x/mcp", "https:// url"),
    ];
    for (path, url, says) in cases {
        let err = parse(url, "http", &path).unwrap_err();
        assert_eq!(err.field, "backend[0].ca_file", "{path:?}");
        assert!(err.to_string().contains(says), "{path:?}: {err}");
    }
    // Not for a backend that is not reached over HTTP.
    let err = Config::parse(
        &format!(
            "[[backend]]\nname = \"s\"\ncommand = \"srv\"\nca_file = {:?}\n",
            two.display().to_string()
        ),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("ca_file"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_certificate_and_its_key_are_read_and_matched_with_the_config() {
    let dir = std::env::temp_dir().join(format!("mrtr-client-cert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |file: &str, text: &str| {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        path
    };
    let made = rcgen::generate_simple_self_signed(vec!["gateway".to_owned()]).unwrap();
    let cert = write("client.pem", &made.cert.pem());
    let key = write("client.key", &made.signing_key.serialize_pem());
    let other = write(
        "other.key",
        &rcgen::KeyPair::generate().unwrap().serialize_pem(),
    );
    let nothing = write("nothing.key", "no key here\n");
    let parse = |url: &str, cert: Option<&std::path::Path>, key: Option<&std::path::Path>| {
        let mut text = format!("[[backend]]\nname = \"h\"\nkind = \"http\"\nurl = \"{url}\"\n");
        for (name, path) in [("client_cert_file", cert), ("client_key_file", key)] {
            if let Some(path) = path {
                text += &format!("{name} = {:?}\n", path.display().to_string());
            }
        }
        Config::parse(&text, None)
    };
    let ok = parse("https://mcp.internal/mcp", Some(&cert), Some(&key)).unwrap();
    let Transport::Http(h) = &ok.backends[0].transport else {
        panic!("an http backend")
    };
    assert_eq!(h.client_cert.as_ref().map(|c| c.key.cert.len()), Some(1));
    let described = ok.describe();
    assert!(
        described.contains(&format!("showing {}", cert.display())),
        "{described}"
    );
    let cases = [
        (
            "https://x/mcp",
            Some(&cert),
            None,
            "backend[0].client_key_file",
            "required",
        ),
        (
            "https://x/mcp",
            None,
            Some(&key),
            "backend[0].client_cert_file",
            "required",
        ),
        (
            "http://x/mcp",
            Some(&cert),
            Some(&key),
            "backend[0].client_cert_file",
            "https://",
        ),
        (
            "https://x/mcp",
            Some(&cert),
            Some(&other),
            "backend[0].client_key_file",
            "does not go with",
        ),
        (
            "https://x/mcp",
            Some(&cert),
            Some(&nothing),
            "backend[0].client_key_file",
            "no PEM private key",
        ),
        (
            "https://x/mcp",
            Some(&key),
            Some(&key),
            "backend[0].client_cert_file",
            "no PEM certificate",
        ),
    ];
    for (url, cert, key, field, says) in cases {
        let err = parse(url, cert.map(|p| p.as_path()), key.map(|p| p.as_path())).unwrap_err();
        assert_eq!(err.field, field, "{url} {cert:?} {key:?}: {err}");
        assert!(err.to_string().contains(says), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
