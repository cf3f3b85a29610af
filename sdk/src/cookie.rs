//! A `Set-Cookie` header builder (RFC 6265 §4.1) that refuses what a browser would drop or
//! misread: a name that is not a token, a value with spaces, quotes inside, `;` or `,`, and
//! attribute values that would end the attribute early.

use std::fmt::Write as _;
use std::time::SystemTime;

use crate::response::Response;

/// The `SameSite` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSite {
    /// Sent only with same-site requests.
    Strict,
    /// Also sent on top-level cross-site navigations (links).
    Lax,
    /// Sent on cross-site requests too; browsers require `Secure` with it.
    None,
}

/// Why a cookie could not be built: the part that is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CookieError {
    /// The name is empty or not an RFC 9110 token.
    Name,
    /// The value has a byte outside RFC 6265 `cookie-octet` (or unbalanced quotes).
    Value,
    /// The `Path` has a control byte or `;`.
    Path,
    /// The `Domain` is not a host name.
    Domain,
    /// `SameSite=None` without `Secure` (browsers drop such cookies).
    SameSiteNoneNeedsSecure,
}

impl std::fmt::Display for CookieError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CookieError::Name => "cookie name must be a non-empty token",
            CookieError::Value => "cookie value has a byte not allowed in a cookie (space, quote, comma, semicolon, backslash or control)",
            CookieError::Path => "cookie Path has a control character or ';'",
            CookieError::Domain => "cookie Domain is not a host name",
            CookieError::SameSiteNoneNeedsSecure => "SameSite=None requires Secure",
        })
    }
}

impl std::error::Error for CookieError {}

/// A `Set-Cookie` header value under construction.
///
/// ```
/// use osprey_sdk::cookie::{SameSite, SetCookie};
///
/// let header = SetCookie::new("uid", "a1b2c3")
///     .max_age(365 * 24 * 3600)
///     .path("/")
///     .secure()
///     .http_only()
///     .same_site(SameSite::Lax)
///     .build()
///     .unwrap();
/// assert_eq!(header, "uid=a1b2c3; Max-Age=31536000; Path=/; Secure; HttpOnly; SameSite=Lax");
///
/// assert!(SetCookie::new("uid", "two words").build().is_err());
/// ```
#[derive(Debug, Clone)]
pub struct SetCookie<'a> {
    name: &'a str,
    value: &'a str,
    max_age: Option<i64>,
    expires: Option<SystemTime>,
    path: Option<&'a str>,
    domain: Option<&'a str>,
    secure: bool,
    http_only: bool,
    same_site: Option<SameSite>,
}

impl<'a> SetCookie<'a> {
    /// A session cookie `name=value` with no attributes.
    pub fn new(name: &'a str, value: &'a str) -> Self {
        SetCookie {
            name,
            value,
            max_age: None,
            expires: None,
            path: None,
            domain: None,
            secure: false,
            http_only: false,
            same_site: None,
        }
    }

    /// `Max-Age` in seconds; zero or less deletes the cookie.
    pub fn max_age(mut self, seconds: i64) -> Self {
        self.max_age = Some(seconds);
        self
    }

    /// `Expires` at this time (written as an IMF-fixdate).
    pub fn expires(mut self, at: SystemTime) -> Self {
        self.expires = Some(at);
        self
    }

    /// `Path`.
    pub fn path(mut self, path: &'a str) -> Self {
        self.path = Some(path);
        self
    }

    /// `Domain`.
    pub fn domain(mut self, domain: &'a str) -> Self {
        self.domain = Some(domain);
        self
    }

    /// `Secure`: sent over TLS only.
    pub fn secure(mut self) -> Self {
        self.secure = true;
        self
    }

    /// `HttpOnly`: hidden from scripts.
    pub fn http_only(mut self) -> Self {
        self.http_only = true;
        self
    }

    /// `SameSite`.
    pub fn same_site(mut self, same_site: SameSite) -> Self {
        self.same_site = Some(same_site);
        self
    }

    /// The header value, or what is wrong with it.
    pub fn build(&self) -> Result<String, CookieError> {
        if self.name.is_empty() || !self.name.bytes().all(is_tchar) {
            return Err(CookieError::Name);
        }
        if !is_cookie_value(self.value.as_bytes()) {
            return Err(CookieError::Value);
        }
        let mut out = String::with_capacity(self.name.len() + self.value.len() + 64);
        out.push_str(self.name);
        out.push('=');
        out.push_str(self.value);
        if let Some(age) = self.max_age {
            let _ = write!(out, "; Max-Age={age}");
        }
        if let Some(at) = self.expires {
            let _ = write!(out, "; Expires={}", httpdate::fmt_http_date(at));
        }
        if let Some(domain) = self.domain {
            if !is_domain(domain) {
                return Err(CookieError::Domain);
            }
            let _ = write!(out, "; Domain={domain}");
        }
        if let Some(path) = self.path {
            if path.bytes().any(|b| b.is_ascii_control() || b == b';') {
                return Err(CookieError::Path);
            }
            let _ = write!(out, "; Path={path}");
        }
        if self.secure {
            out.push_str("; Secure");
        }
        if self.http_only {
            out.push_str("; HttpOnly");
        }
        match self.same_site {
            Some(SameSite::Strict) => out.push_str("; SameSite=Strict"),
            Some(SameSite::Lax) => out.push_str("; SameSite=Lax"),
            Some(SameSite::None) if !self.secure => {
                return Err(CookieError::SameSiteNoneNeedsSecure)
            }
            Some(SameSite::None) => out.push_str("; SameSite=None"),
            None => {}
        }
        Ok(out)
    }
}

impl Response {
    /// Add a `Set-Cookie` header (several cookies make several headers, as RFC 6265 requires).
    ///
    /// ```
    /// use osprey_sdk::{cookie::SetCookie, Response};
    ///
    /// let mut resp = Response::new();
    /// resp.set_cookie(&SetCookie::new("a", "1").path("/")).unwrap();
    /// resp.set_cookie(&SetCookie::new("b", "2")).unwrap();
    /// assert_eq!(resp.headers.len(), 2);
    /// assert_eq!(resp.get_header("set-cookie"), Some("a=1; Path=/"));
    /// ```
    pub fn set_cookie(&mut self, cookie: &SetCookie<'_>) -> Result<&mut Self, CookieError> {
        let value = cookie.build()?;
        Ok(self.header("Set-Cookie", value))
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// RFC 6265 `cookie-value`: `*cookie-octet` or the same in double quotes.
fn is_cookie_value(value: &[u8]) -> bool {
    let inner = match value {
        [b'"', inner @ .., b'"'] => inner,
        _ => value,
    };
    inner
        .iter()
        .all(|&b| matches!(b, 0x21 | 0x23..=0x2B | 0x2D..=0x3A | 0x3C..=0x5B | 0x5D..=0x7E))
}

/// A host name (RFC 1123 labels), with an optional leading dot that browsers ignore.
fn is_domain(domain: &str) -> bool {
    let domain = domain.strip_prefix('.').unwrap_or(domain);
    !domain.is_empty()
        && domain.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn writes_every_attribute() {
        let at = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let header = SetCookie::new("id", "\"x\"")
            .max_age(0)
            .expires(at)
            .domain("example.com")
            .path("/app")
            .secure()
            .http_only()
            .same_site(SameSite::None)
            .build()
            .unwrap();
        assert_eq!(
            header,
            "id=\"x\"; Max-Age=0; Expires=Sun, 06 Nov 1994 08:49:37 GMT; Domain=example.com; \
             Path=/app; Secure; HttpOnly; SameSite=None"
        );
    }

    #[test]
    fn refuses_bad_names_and_values() {
        assert_eq!(SetCookie::new("", "v").build(), Err(CookieError::Name));
        assert_eq!(SetCookie::new("a b", "v").build(), Err(CookieError::Name));
        assert_eq!(SetCookie::new("a=", "v").build(), Err(CookieError::Name));
        for bad in ["a b", "a;b", "a,b", "a\\b", "a\"b", "\"ab", "é", "a\nb"] {
            assert_eq!(
                SetCookie::new("a", bad).build(),
                Err(CookieError::Value),
                "{bad}"
            );
        }
        assert!(SetCookie::new("a", "").build().is_ok());
    }

    #[test]
    fn refuses_bad_attributes() {
        let c = SetCookie::new("a", "1");
        assert_eq!(c.clone().path("/a;b").build(), Err(CookieError::Path));
        assert_eq!(c.clone().path("/a\r\n").build(), Err(CookieError::Path));
        assert_eq!(c.clone().domain("a..b").build(), Err(CookieError::Domain));
        assert_eq!(c.clone().domain("a b").build(), Err(CookieError::Domain));
        assert!(c.clone().domain(".example.com").build().is_ok());
        assert_eq!(
            c.clone().same_site(SameSite::None).build(),
            Err(CookieError::SameSiteNoneNeedsSecure)
        );
    }
}
