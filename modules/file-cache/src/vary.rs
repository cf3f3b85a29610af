//! `Vary` (RFC 9111 §4.1): an answer that varies on request headers is stored per variant,
//! under the route's key plus the values of those headers in the request. What a key varies
//! on is learnt from the origin's answers and kept in memory (after a restart the first
//! request of a key goes to the origin to learn it again, or to the shared store, which keeps
//! the names beside the entries). `Accept-Encoding` is left to the
//! gzip filter, which keys its variants itself.

use std::sync::Arc;

use osprey_sdk::{Request, Response};

pub struct Vary {
    /// Route key → the request headers (lower-case) its answers vary on.
    on: moka::sync::Cache<String, Arc<Vec<String>>>,
}

impl Vary {
    pub fn new() -> Vary {
        Vary {
            on: moka::sync::Cache::builder().max_capacity(100_000).build(),
        }
    }

    /// The key of the variant `req` asks for.
    pub fn key(&self, req: &Request<'_>, key: &str) -> String {
        match self.on.get(key) {
            Some(names) => variant_key(req, key, &names),
            None => key.to_owned(),
        }
    }

    /// Remember what the origin's answer for `key` varies on; the names (none: it does not
    /// vary).
    pub fn learn(&self, key: &str, resp: &Response) -> Vec<String> {
        let names = listed(resp);
        self.learn_names(key, names.clone());
        names
    }

    /// Remember that `key` varies on `names` (as another server learnt it); whether that
    /// is news.
    pub fn learn_names(&self, key: &str, names: Vec<String>) -> bool {
        if names.is_empty() {
            let known = self.on.contains_key(key);
            self.on.invalidate(key);
            known
        } else if self.on.get(key).is_none_or(|known| *known != names) {
            self.on.insert(key.to_owned(), Arc::new(names));
            true
        } else {
            false
        }
    }
}

/// The request headers a response varies on, lower-case, without `Accept-Encoding`.
fn listed(resp: &Response) -> Vec<String> {
    let mut names: Vec<String> = resp
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("vary"))
        .flat_map(|h| h.value.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty() && n != "accept-encoding")
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `key|vary:name=value&name=value`, the values of each header's lines joined by `, `
/// (a missing header and an empty one are the same variant).
fn variant_key(req: &Request<'_>, key: &str, names: &[String]) -> String {
    let mut out = format!("{key}|vary:");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        let values: Vec<&str> = req.header_all(name).map(str::trim).collect();
        out.push_str(name);
        out.push('=');
        out.push_str(&percent(&values.join(", ")));
    }
    out
}

/// Values go into a key whose parts are split on `|`, `&` and `=`: escape those.
fn percent(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '%' | '|' | '&' | '=' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_and_accept_encoding_left_to_gzip() {
        let mut resp = Response::new();
        resp.header("Vary", "X-Lang, Accept-Encoding")
            .header("vary", "cookie,x-lang");
        assert_eq!(listed(&resp), ["cookie", "x-lang"]);
        let mut plain = Response::new();
        plain.header("Vary", "Accept-Encoding");
        assert!(listed(&plain).is_empty());
    }

    #[test]
    fn separators_in_values_are_escaped() {
        assert_eq!(percent("a|b&c=d%"), "a%7Cb%26c%3Dd%25");
    }
}
