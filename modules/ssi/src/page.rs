//! A document's directives carried out: text and includes in order as one composite body,
//! `set` and `echo` evaluated as they come.

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::escape::{html_into, url_component_into};
use osprey_sdk::host;
use osprey_sdk::subrequest::Parent;
use osprey_sdk::{Composite, Subrequest};
use std::borrow::Cow;

use std::ops::Range;

use crate::parse::{parse, Node};
use crate::vars::{Vars, INHERITED};

/// A document's parts, owned (text as a range of the document), so a parsed document can be
/// kept for the next request (see [`crate::layouts`]).
#[derive(Debug)]
pub enum Part {
    Text(Range<usize>),
    /// An include whose URI names no variable: resolved once, when the document is parsed.
    Include {
        uri: String,
    },
    Directive {
        command: String,
        attrs: Vec<(String, String)>,
        at: usize,
    },
    Broken {
        at: usize,
        why: &'static str,
    },
}

/// `doc`, served at `path`, split into its parts.
pub fn parts(doc: &[u8], path: &str) -> Vec<Part> {
    let start = doc.as_ptr() as usize;
    parse(doc)
        .into_iter()
        .map(|node| match node {
            Node::Text(text) => {
                let from = text.as_ptr() as usize - start;
                Part::Text(from..from + text.len())
            }
            Node::Directive { command, attrs, .. } if constant_include(command, &attrs) => {
                let uri = include_uri(&attrs).unwrap_or_default();
                Part::Include {
                    uri: resolve(path, Cow::Borrowed(uri)),
                }
            }
            Node::Directive { command, attrs, at } => Part::Directive {
                command: command.to_owned(),
                attrs: attrs.into_iter().map(|(n, v)| (n.to_owned(), v)).collect(),
                at,
            },
            Node::Broken { at, why } => Part::Broken { at, why },
        })
        .collect()
}

/// The page for `doc`, served at `path` with `vars`; includes are started for `parent`.
pub fn assemble(
    parent: &Parent,
    path: &str,
    vars: Vars<'_>,
    doc: Vec<u8>,
    marker: &str,
) -> Composite {
    let parts = parts(&doc, path);
    let doc = RArc::new(RVec::from(doc));
    assemble_parts(parent, path, vars, &doc, &parts, marker)
}

/// [`assemble`] for a document already split into `parts`. Its text goes out from `doc`
/// itself (shared, not copied into the page).
pub fn assemble_parts(
    parent: &Parent,
    path: &str,
    mut vars: Vars<'_>,
    doc: &RArc<RVec<u8>>,
    parts: &[Part],
    marker: &str,
) -> Composite {
    let mut page = Composite::with_capacity(parts.len()).error_marker(marker.as_bytes().to_vec());
    // The subrequest includes start, carrying the variables: encoded once until a `set`
    // changes them, its URI set for each include. Only their bodies go into the page.
    let mut with_vars: Option<Subrequest> = None;
    let include =
        |page: &mut Composite, with_vars: &mut Option<Subrequest>, vars: &Vars, uri: &str| {
            let sub = with_vars.get_or_insert_with(|| {
                Subrequest::get("")
                    .header(INHERITED, vars.encode())
                    .body_only()
            });
            sub.set_uri(uri);
            page.push_started(parent, sub);
        };
    for part in parts {
        match part {
            Part::Text(range) => page.push_shared(doc, range.clone()),
            Part::Include { uri } => include(&mut page, &mut with_vars, &vars, uri),
            Part::Broken { at, why } => {
                host::warn(&format!("ssi: {} at byte {at}: {why}", path));
                page.push_bytes(marker.as_bytes());
            }
            Part::Directive { command, attrs, at } => {
                let attr = |name: &str| {
                    attrs
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, v)| vars.substitute(v))
                };
                let done = match command.as_str() {
                    "include" => match include_uri(attrs) {
                        Some(uri) => {
                            let uri = resolve(path, Cow::Owned(vars.substitute(uri)));
                            include(&mut page, &mut with_vars, &vars, &uri);
                            Ok(())
                        }
                        None => Err("include needs virtual=\"/uri\"".to_owned()),
                    },
                    "set" => match (attr("var"), attr("value")) {
                        (Some(name), Some(value)) => {
                            vars.set(&name, &value);
                            with_vars = None;
                            Ok(())
                        }
                        _ => Err("set needs var and value".to_owned()),
                    },
                    "echo" => match attr("var") {
                        Some(name) => {
                            let fallback = attr("default").unwrap_or_else(|| "(none)".into());
                            let value = vars.get(&name).map(str::to_owned).unwrap_or(fallback);
                            encode(&value, attr("encoding").as_deref())
                                .map(|text| page.push_bytes(text))
                        }
                        None => Err("echo needs var".to_owned()),
                    },
                    other => Err(format!("unknown command {other:?}")),
                };
                if let Err(why) = done {
                    host::warn(&format!("ssi: {} at byte {at}: {why}", path));
                    page.push_bytes(marker.as_bytes());
                }
            }
        }
    }
    page
}

/// An include's URI as written (`virtual`, else `file`), variables not substituted.
fn include_uri<V: AsRef<str>>(attrs: &[(impl AsRef<str>, V)]) -> Option<&str> {
    let named = |name: &str| {
        attrs
            .iter()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, v)| v.as_ref())
    };
    named("virtual").or_else(|| named("file"))
}

/// An include whose URI is the same for every request: no variable (nor `\$`) in it.
fn constant_include<V: AsRef<str>>(command: &str, attrs: &[(impl AsRef<str>, V)]) -> bool {
    command == "include" && include_uri(attrs).is_some_and(|uri| !uri.contains('$'))
}

/// An include's URI: absolute (kept as it is), or relative to the including document's
/// directory.
fn resolve(doc_path: &str, uri: Cow<'_, str>) -> String {
    if uri.starts_with('/') {
        return uri.into_owned();
    }
    let dir = &doc_path[..doc_path.rfind('/').map_or(0, |i| i + 1)];
    format!("{dir}{uri}")
}

/// `echo`'s `encoding`: `entity` (the default), `url` or `none`.
fn encode(value: &str, encoding: Option<&str>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    match encoding.unwrap_or("entity") {
        "entity" => html_into(value, &mut out),
        "url" => url_component_into(value, &mut out),
        "none" => out.push_str(value),
        other => return Err(format!("unknown echo encoding {other:?}")),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::testing::{self, TestRequest};
    use osprey_sdk::Response;

    /// The page for `doc` at `uri`, with subrequests answered by `frag`.
    fn page(uri: &str, doc: &str) -> String {
        testing::install();
        testing::reset();
        testing::on_subrequest(|t| {
            let mut r = Response::new();
            match t.uri.as_str() {
                "/missing" => r.status(404),
                uri => r.text(format!("[{uri}]")),
            };
            Ok(r)
        });
        let req = TestRequest::get(uri);
        let mut resp = Response::new();
        req.with_view(|req| {
            let (parent, vars) = (Parent::of(req), Vars::for_request(req));
            resp.body_stream(assemble(
                &parent,
                &req.path,
                vars,
                doc.as_bytes().to_vec(),
                "<!--E-->",
            ))
        });
        let osprey_sdk::Body::Stream(mut stream) = resp.body else {
            unreachable!()
        };
        let mut out = Vec::new();
        while let Some(chunk) = testing::block_on(osprey_sdk::next_chunk(&mut stream)) {
            out.extend_from_slice(&chunk.unwrap());
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn includes_in_order_with_relative_uris_and_markers() {
        let out = page(
            "/dir/page.shtml",
            "a<!--#include virtual=\"/x\" -->b<!--#include virtual=\"rel?q=1\"-->\
             <!--#include virtual=\"/missing\"--><!--#bogus-->c",
        );
        assert_eq!(out, "a[/x]b[/dir/rel?q=1]<!--E--><!--E-->c");
        assert!(testing::logged(
            osprey_sdk::host::Level::Warn,
            "/dir/page.shtml at byte"
        ));
    }

    #[test]
    fn set_echo_and_escapes() {
        let out = page(
            "/p.shtml?who=a%3Cb",
            "<!--#set var=\"x\" value=\"${who}\\$1\" -->\
             <!--#echo var=\"x\"-->|<!--#echo var=\"x\" encoding=\"none\"-->|\
             <!--#echo var=\"QUERY_STRING\" encoding=\"url\"-->|<!--#echo var=\"nope\"-->\
             |<!--#echo var=\"DOCUMENT_URI\"-->",
        );
        assert_eq!(out, "a&lt;b$1|a<b$1|who%3Da%253Cb|(none)|/p.shtml");
    }

    #[test]
    fn includes_carry_the_variables_set_before_them() {
        page(
            "/p.shtml",
            "<!--#include virtual=\"/a\"--><!--#set var=\"v\" value=\"1\"-->\
             <!--#include virtual=\"/f\"--><!--#include virtual=\"/g\"-->",
        );
        let sent = testing::subrequests();
        let inherited: Vec<(&str, &str)> = sent
            .iter()
            .map(|t| {
                let h = t.headers.iter().find(|h| h.name.as_str() == INHERITED);
                (t.uri.as_str(), h.unwrap().value.as_str())
            })
            .collect();
        assert_eq!(inherited.len(), 3);
        assert_eq!(inherited[0].0, "/a");
        assert!(!inherited[0].1.contains("v=1"), "{}", inherited[0].1);
        for (uri, value) in &inherited[1..] {
            assert!(value.contains("v=1"), "{uri}: {value}");
        }
        assert_eq!((inherited[1].0, inherited[2].0), ("/f", "/g"));
    }

    #[test]
    fn constant_include_uris_are_resolved_when_parsed() {
        let doc = "<!--#include virtual=\"rel?q=1\"--><!--#include file=\"/abs\"-->\
                   <!--#include virtual=\"/v/$x\"--><!--#include-->";
        let parts = parts(doc.as_bytes(), "/dir/p.shtml");
        let uris: Vec<Option<&str>> = parts
            .iter()
            .map(|p| match p {
                Part::Include { uri } => Some(uri.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(uris, [Some("/dir/rel?q=1"), Some("/abs"), None, None]);
        // A URI with a variable is substituted for each request.
        let out = page("/dir/p.shtml?x=1", doc);
        assert_eq!(out, "[/dir/rel?q=1][/abs][/v/1]<!--E-->");
    }
}
