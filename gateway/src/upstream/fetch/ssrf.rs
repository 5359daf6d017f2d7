//! Which addresses a URL from a client may make the gateway connect to:
//! public unicast only, unless the operator's allow-list
//! (`litellm_settings.user_url_allowed_hosts`, LiteLLM's name) names the
//! host. Every address a name resolves to is checked, and the connection
//! goes to a checked address, so DNS cannot rebind between check and
//! connect.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused: the kind of network it belongs to.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = ip.octets();
    let reason = match (a, b, c, d) {
        (0, ..) => "unspecified (0.0.0.0/8)",
        (127, ..) => "loopback",
        (10, ..) | (172, 16..=31, ..) | (192, 168, ..) => "private",
        (169, 254, ..) => "link-local (cloud metadata)",
        (100, 64..=127, ..) => "shared CGNAT (100.64.0.0/10, cloud metadata)",
        (168, 63, 129, 16) => "cloud metadata (Azure wire server)",
        (192, 0, 0, _) => "IETF protocol assignment (192.0.0.0/24)",
        (192, 0, 2, _) | (198, 51, 100, _) | (203, 0, 113, _) => "documentation",
        (198, 18..=19, ..) => "benchmarking (198.18.0.0/15)",
        (224..=239, ..) => "multicast",
        (240..=255, ..) => "reserved or broadcast",
        _ => return None,
    };
    Some(reason)
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    // Addresses that carry an IPv4 address are judged by it.
    if let Some(v4) = embedded_v4(ip) {
        return forbidden_v4(v4);
    }
    let s = ip.segments();
    let reason = match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback",
        _ if s[0] & 0xffc0 == 0xfe80 => "link-local",
        _ if s[0] & 0xffc0 == 0xfec0 => "site-local",
        _ if s[0] & 0xfe00 == 0xfc00 => "unique-local (cloud metadata)",
        _ if s[0] & 0xff00 == 0xff00 => "multicast",
        [0x2001, 0x0db8, ..] => "documentation",
        [0x2001, 0, ..] => "Teredo",
        [0x0100, 0, 0, 0, ..] => "discard-only",
        // Global unicast is 2000::/3; everything else is unassigned.
        _ if s[0] & 0xe000 != 0x2000 => "not global unicast",
        _ => return None,
    };
    Some(reason)
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4
/// (`2002:aabb:ccdd::`) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] => Some(low()),
        // `::` and `::1` are themselves, not IPv4 addresses.
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low()),
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(low()),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// Hosts an operator allows whatever they resolve to, LiteLLM's
/// `user_url_allowed_hosts`: `host` (any port), `host:port`, `[v6]` or
/// `[v6]:port`; names compare without case and without a trailing dot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllowedHosts(Vec<(String, Option<u16>)>);

impl AllowedHosts {
    /// Parses the entries; names the first malformed one.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut hosts = Vec::with_capacity(entries.len());
        for entry in entries {
            let e = entry.trim();
            let (host, port) = match e.strip_prefix('[') {
                Some(rest) => {
                    let (host, after) = rest
                        .split_once(']')
                        .ok_or_else(|| format!("\"{entry}\": unclosed ["))?;
                    (host, after.strip_prefix(':'))
                }
                None => match e.rsplit_once(':') {
                    Some((h, p)) if !h.contains(':') => (h, Some(p)),
                    _ => (e, None),
                },
            };
            if host.is_empty() || host.contains(['/', '@', ' ']) {
                return Err(format!(
                    "\"{entry}\" is not a host, host:port or [ipv6]:port"
                ));
            }
            let port = match port {
                Some(p) => Some(
                    p.parse::<u16>()
                        .map_err(|_| format!("\"{entry}\": bad port \"{p}\""))?,
                ),
                None => None,
            };
            hosts.push((normalize(host), port));
        }
        Ok(AllowedHosts(hosts))
    }

    /// Whether `host` (as written in the URL, IPv6 without brackets) on
    /// `port` is allowed.
    pub fn permits(&self, host: &str, port: u16) -> bool {
        let host = normalize(host.trim_start_matches('[').trim_end_matches(']'));
        self.0
            .iter()
            .any(|(h, p)| *h == host && p.is_none_or(|p| p == port))
    }
}

fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(addr: &str) -> bool {
        forbidden(addr.parse().unwrap()).is_some()
    }

    #[test]
    fn refuses_every_non_public_ipv4_range() {
        for a in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.0.1",
            "100.64.0.1",
            "100.100.100.200",
            "100.127.255.255",
            "168.63.129.16",
            "192.0.0.192",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(refused(a), "{a} should be refused");
        }
        for a in [
            "8.8.8.8",
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.0.1",
            "192.169.0.1",
            "93.184.216.34",
        ] {
            assert!(!refused(a), "{a} should be allowed");
        }
    }

    #[test]
    fn refuses_non_public_ipv6_and_v4_in_v6_forms() {
        for a in [
            "::",
            "::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "2001:db8::1",
            "2001:0::1",
            "100::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2002:c0a8:0101::1",
            "4000::1",
        ] {
            assert!(refused(a), "{a} should be refused");
        }
        for a in [
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert!(!refused(a), "{a} should be allowed");
        }
    }

    #[test]
    fn allow_list_matches_host_and_optional_port() {
        let list = AllowedHosts::parse(&[
            "Images.Internal.".into(),
            "127.0.0.1:8080".into(),
            "[::1]".into(),
            "[fd00::5]:443".into(),
        ])
        .unwrap();
        assert!(list.permits("images.internal", 80));
        assert!(list.permits("IMAGES.internal.", 9999));
        assert!(list.permits("127.0.0.1", 8080));
        assert!(!list.permits("127.0.0.1", 8081));
        assert!(list.permits("::1", 1));
        assert!(list.permits("[::1]", 1));
        assert!(list.permits("fd00::5", 443));
        assert!(!list.permits("fd00::5", 80));
        assert!(!list.permits("localhost", 8080));
        assert!(!AllowedHosts::default().permits("127.0.0.1", 80));
        for bad in ["", "http://x/y", "a:b", "[::1", "x:99999", "u@h"] {
            assert!(AllowedHosts::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
