//! SSI variables: those inherited from the including page, the query parameters, the
//! built-ins, and `set`; `$NAME` / `${NAME}` substitution with `\$` for a literal `$`.

use std::borrow::Cow;
use std::sync::OnceLock;

use osprey_sdk::escape::url_component_into;
use osprey_sdk::params::Params;
use osprey_sdk::random::os_bytes;
use osprey_sdk::Request;

/// The request header that carries a page's variables to the documents it includes.
pub const INHERITED: &str = "X-Osprey-SSI-Vars";

/// A secret of this process that starts the [`INHERITED`] header's value, so a client cannot
/// hand a page variables of its choosing (such as `REQUEST_URI`).
fn secret() -> &'static str {
    static SECRET: OnceLock<String> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut bytes = [0u8; 16];
        os_bytes(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// The built-ins every document sets for itself, whatever it inherited.
const OWN: [&str; 2] = ["QUERY_STRING", "DOCUMENT_URI"];

/// Variables by name (the built-ins' names and values not copied: the values borrow from the
/// request, for `'a`); a later entry of a name wins.
#[derive(Debug, Default, Clone)]
pub struct Vars<'a>(Vec<(Cow<'static, str>, Cow<'a, str>)>);

impl<'a> Vars<'a> {
    /// The variables a document sees: inherited ones, then its query parameters, then the
    /// built-ins `QUERY_STRING` and `DOCUMENT_URI` (its own) and `REQUEST_URI` (the client's,
    /// as nginx: an included document inherits it).
    pub fn for_request(req: &Request<'a>) -> Vars<'a> {
        let mut vars = Vars::default();
        let inherited = req.header(INHERITED).and_then(|v| v.strip_prefix(secret()));
        if let Some(inherited) = inherited.and_then(|v| v.strip_prefix('&')) {
            for (n, v) in Params::parse(inherited).iter() {
                vars.set(n, v);
            }
        }
        if !req.query.is_empty() {
            for (n, v) in Params::parse(req.query.as_str()).iter() {
                vars.set(n, v);
            }
        }
        let [query, path] = OWN;
        vars.set_named(Cow::Borrowed(query), Cow::Borrowed(req.query.as_str()));
        vars.set_named(Cow::Borrowed(path), Cow::Borrowed(req.path.as_str()));
        if vars.get("REQUEST_URI").is_none() {
            let uri = Cow::Borrowed(req.uri.as_str());
            vars.0.push((Cow::Borrowed("REQUEST_URI"), uri));
        }
        vars
    }

    pub fn set(&mut self, name: &str, value: &str) {
        self.set_named(Cow::Owned(name.to_owned()), Cow::Owned(value.to_owned()));
    }

    fn set_named(&mut self, name: Cow<'static, str>, value: Cow<'a, str>) {
        // (Most documents have no variable yet when their built-ins are set.)
        if !self.0.is_empty() {
            self.0.retain(|(n, _)| *n != name);
        }
        self.0.push((name, value));
    }

    /// The same variables, owning their values (to outlive the request).
    pub fn into_owned(self) -> Vars<'static> {
        let owned = self.0.into_iter();
        Vars(
            owned
                .map(|(n, v)| (n, Cow::Owned(v.into_owned())))
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| &**v)
    }

    /// `text` with `$NAME` and `${NAME}` replaced (an unknown name is empty) and `\$` made `$`.
    pub fn substitute(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(i) = memchr::memchr2(b'$', b'\\', rest.as_bytes()) {
            out.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("\\$") {
                out.push('$');
                rest = after;
                continue;
            }
            if let Some(after) = tail.strip_prefix('\\') {
                out.push('\\');
                rest = after;
                continue;
            }
            let (name, after) = match tail[1..].strip_prefix('{') {
                Some(braced) => match braced.find('}') {
                    Some(end) => (&braced[..end], &braced[end + 1..]),
                    None => ("", tail),
                },
                None => {
                    let n = tail[1..]
                        .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                        .unwrap_or(tail.len() - 1);
                    (&tail[1..1 + n], &tail[1 + n..])
                }
            };
            if name.is_empty() {
                // A lone `$` (or an unclosed `${`) stays as it is.
                out.push('$');
                rest = &tail[1..];
                continue;
            }
            out.push_str(self.get(name).unwrap_or(""));
            rest = after;
        }
        out.push_str(rest);
        out
    }

    /// The variables as the [`INHERITED`] header's value. A document's own built-ins replace
    /// those it would inherit ([`for_request`](Vars::for_request)): they are not sent.
    pub fn encode(&self) -> String {
        let own = |n: &str| OWN.contains(&n);
        let len: usize = self.0.iter().map(|(n, v)| n.len() + v.len() + 2).sum();
        let mut out = String::with_capacity(secret().len() + len + len / 2);
        out.push_str(secret());
        for (n, v) in self.0.iter().filter(|(n, _)| !own(n)) {
            out.push('&');
            url_component_into(n, &mut out);
            out.push('=');
            url_component_into(v, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars<'static> {
        let mut v = Vars::default();
        v.set("NAME", "osprey");
        v.set("a_1", "x");
        v
    }

    #[test]
    fn substitutes_both_forms_and_keeps_escaped_dollars() {
        let v = vars();
        assert_eq!(v.substitute("hi $NAME!"), "hi osprey!");
        assert_eq!(v.substitute("${NAME}s and $a_1"), "ospreys and x");
        assert_eq!(v.substitute("\\$NAME costs $"), "$NAME costs $");
        assert_eq!(v.substitute("$UNKNOWN|${open"), "|${open");
        assert_eq!(v.substitute("a\\b"), "a\\b");
    }

    #[test]
    fn later_values_win_and_survive_encoding() {
        let mut v = vars();
        v.set("NAME", "a&b=c d");
        assert_eq!(v.get("NAME"), Some("a&b=c d"));
        let back = Params::parse(&v.encode());
        assert_eq!(back.get("NAME"), Some("a&b=c d"));
        assert_eq!(back.get("a_1"), Some("x"));
    }

    #[test]
    fn a_documents_own_built_ins_are_not_inherited() {
        use osprey_sdk::testing::TestRequest;
        let page = TestRequest::get("/dir/page.shtml?q=1");
        let mut sent = String::new();
        page.with_view(|req| {
            let mut v = Vars::for_request(req);
            v.set("x", "1");
            sent = v.encode();
        });
        let back = Params::parse(&sent);
        assert_eq!(
            (back.get("QUERY_STRING"), back.get("DOCUMENT_URI")),
            (None, None)
        );
        // The included document: its own built-ins, the page's others and its variables.
        let included = TestRequest::get("/frag.shtml").header(INHERITED, sent);
        included.with_view(|req| {
            let v = Vars::for_request(req);
            assert_eq!(v.get("QUERY_STRING"), Some(""));
            assert_eq!(v.get("DOCUMENT_URI"), Some("/frag.shtml"));
            assert_eq!(v.get("REQUEST_URI"), Some("/dir/page.shtml?q=1"));
            assert_eq!((v.get("q"), v.get("x")), (Some("1"), Some("1")));
        });
    }

    #[test]
    fn only_the_process_own_inherited_header_is_read() {
        use osprey_sdk::testing::TestRequest;
        let forged = TestRequest::get("/p?q=1").header(INHERITED, "REQUEST_URI=/forged&x=1");
        forged.with_view(|req| {
            let v = Vars::for_request(req);
            assert_eq!((v.get("REQUEST_URI"), v.get("x")), (Some("/p?q=1"), None));
        });
        let mut parent = Vars::default();
        parent.set("x", "1");
        let real = TestRequest::get("/p").header(INHERITED, parent.encode());
        real.with_view(|req| assert_eq!(Vars::for_request(req).get("x"), Some("1")));
    }
}
