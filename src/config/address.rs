//! The `host:port` form of an address another replica is dialled at: checked here when
//! `fleet.advertise` is loaded, and again by the hop (`bridge::retry`, `bridge::forward`) before it dials a
//! requestState's owner, so both accept exactly the same addresses.

use std::net::{IpAddr, Ipv6Addr};

/// Parses `host:port` (an IPv4 address, `[IPv6]`, or a DNS name; port 1..65535). Anything
/// else is refused, so nothing but a plain address is ever dialled.
pub fn parse_host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: Ipv6Addr = v6.parse().ok()?;
        return Some((ip.to_string(), port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return ip.is_ipv4().then(|| (ip.to_string(), port));
    }
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    name_ok.then(|| (host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_host_port_addresses_are_dialled() {
        assert_eq!(
            parse_host_port("10.0.0.7:8081"),
            Some(("10.0.0.7".into(), 8081))
        );
        assert_eq!(parse_host_port("[::1]:9"), Some(("::1".into(), 9)));
        assert_eq!(
            parse_host_port("Pod-1.gw.svc:80"),
            Some(("pod-1.gw.svc".into(), 80))
        );
        for bad in [
            "",
            ":80",
            "h",
            "h:",
            "h:0",
            "h:65536",
            "h:+80",
            "::1:80",
            "a b:1",
            "h/x:1",
            "-h:1",
            "h..x:1",
            "user@h:1",
            "http://h:1",
            "h:1/path",
            "[zz]:1",
        ] {
            assert_eq!(parse_host_port(bad), None, "{bad}");
        }
    }
}
