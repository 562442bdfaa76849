//! The egress allow-list of the built-in HTTP task (`--http-allow`): which
//! hosts `orbit.http` may call. A pattern is a host name or an IP address,
//! optionally followed by `:port`; in a host name, a `*` label stands for
//! exactly one DNS label. Without a port any port is allowed. Nothing is
//! allowed by default.

use std::net::IpAddr;

/// One parsed `--http-allow` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowPattern {
    host: Host,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// Lower-case labels; `*` matches one label.
    Name(Vec<String>),
    Ip(IpAddr),
}

impl AllowPattern {
    /// Parses `api.example.com`, `*.example.com:443`, `10.0.0.7`,
    /// `127.0.0.1:8080`, `[::1]:8080`.
    pub fn parse(text: &str) -> Result<AllowPattern, String> {
        let bad = |why: &str| format!("--http-allow `{text}`: {why}");
        let t = text.trim();
        if t.is_empty() {
            return Err(bad("empty pattern"));
        }
        if t.contains("://") || t.contains('/') {
            return Err(bad(
                "give a host or IP address, optionally with :port, not a URL",
            ));
        }
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let (ip, after) = rest
                .split_once(']')
                .ok_or_else(|| bad("unclosed `[` around an IPv6 address"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected `:port` after `]`"))?,
                ),
            };
            (ip, port)
        } else if t.matches(':').count() > 1 {
            // A bare IPv6 address, no port.
            (t, None)
        } else {
            match t.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (t, None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?,
            ),
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(AllowPattern {
                host: Host::Ip(ip),
                port,
            });
        }
        let labels: Vec<String> = host
            .trim_end_matches('.')
            .split('.')
            .map(str::to_ascii_lowercase)
            .collect();
        for l in &labels {
            let valid = l == "*"
                || (!l.is_empty()
                    && l.len() <= 63
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
            if !valid {
                return Err(bad(&format!(
                    "`{l}` is not a DNS label (letters, digits, `-`; `*` for any one label)"
                )));
            }
        }
        if labels.iter().all(|l| l == "*") {
            return Err(bad("a pattern of wildcards only would allow every host"));
        }
        Ok(AllowPattern {
            host: Host::Name(labels),
            port,
        })
    }

    /// Does this pattern allow `url`?
    pub fn allows(&self, url: &reqwest::Url) -> bool {
        let Some(port) = url.port_or_known_default() else {
            return false;
        };
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, url.host()) {
            (Host::Ip(ip), Some(url::Host::Ipv4(a))) => *ip == IpAddr::V4(a),
            (Host::Ip(ip), Some(url::Host::Ipv6(a))) => *ip == IpAddr::V6(a),
            (Host::Name(labels), Some(url::Host::Domain(d))) => {
                let got: Vec<String> = d
                    .trim_end_matches('.')
                    .split('.')
                    .map(str::to_ascii_lowercase)
                    .collect();
                got.len() == labels.len()
                    && labels.iter().zip(&got).all(|(p, g)| p == "*" || p == g)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for AllowPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Host::Name(l) => write!(f, "{}", l.join("."))?,
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]")?,
            Host::Ip(a) => write!(f, "{a}")?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// True when some pattern in `list` allows `url`.
pub fn allowed(list: &[AllowPattern], url: &reqwest::Url) -> bool {
    list.iter().any(|p| p.allows(url))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ok(p: &str, url: &str) -> bool {
        AllowPattern::parse(p)
            .unwrap()
            .allows(&reqwest::Url::parse(url).unwrap())
    }

    #[test]
    fn names_wildcards_ports_and_addresses() {
        assert!(ok("api.example.com", "https://api.example.com/x"));
        assert!(ok("API.example.com", "http://api.EXAMPLE.com:8080/x"));
        assert!(!ok("api.example.com", "https://example.com/"));
        assert!(ok("*.example.com", "https://a.example.com/"));
        assert!(!ok("*.example.com", "https://a.b.example.com/"));
        assert!(!ok("*.example.com", "https://example.com/"));
        assert!(ok("*.example.com:443", "https://a.example.com/"));
        assert!(!ok("*.example.com:443", "http://a.example.com/"));
        assert!(ok("127.0.0.1:8080", "http://127.0.0.1:8080/"));
        assert!(!ok("127.0.0.1:8080", "http://127.0.0.1:8081/"));
        assert!(!ok("127.0.0.1", "http://localhost/"));
        assert!(!ok("localhost", "http://127.0.0.1/"));
        assert!(ok("[::1]:80", "http://[::1]/"));
        assert!(ok("::1", "http://[::1]:9/"));
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for p in [
            "",
            "*",
            "*.*",
            "http://x.com",
            "x.com:0",
            "x.com:http",
            "a..b",
            "[::1",
            "x y",
        ] {
            assert!(AllowPattern::parse(p).is_err(), "{p}");
        }
    }
}
