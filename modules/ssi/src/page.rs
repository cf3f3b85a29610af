//! A document's directives carried out: text and includes in order as one composite body,
//! `set` and `echo` evaluated as they come.

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::escape::{html_into, url_component_into};
use osprey_sdk::host;
use osprey_sdk::subrequest::Parent;
use osprey_sdk::{Composite, Subrequest};

use std::ops::Range;

use crate::parse::{parse, Node};
use crate::vars::{Vars, INHERITED};

/// A document's parts, owned (text as a range of the document), so a parsed document can be
/// kept for the next request (see [`crate::layouts`]).
#[derive(Debug)]
pub enum Part {
    Text(Range<usize>),
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

/// `doc` split into its parts.
pub fn parts(doc: &[u8]) -> Vec<Part> {
    let start = doc.as_ptr() as usize;
    parse(doc)
        .into_iter()
        .map(|node| match node {
            Node::Text(text) => {
                let from = text.as_ptr() as usize - start;
                Part::Text(from..from + text.len())
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
pub fn assemble(parent: &Parent, path: &str, vars: Vars, doc: Vec<u8>, marker: &str) -> Composite {
    let parts = parts(&doc);
    let doc = RArc::new(RVec::from(doc));
    assemble_parts(parent, path, vars, &doc, &parts, marker)
}

/// [`assemble`] for a document already split into `parts`. Its text goes out from `doc`
/// itself (shared, not copied into the page).
pub fn assemble_parts(
    parent: &Parent,
    path: &str,
    mut vars: Vars,
    doc: &RArc<RVec<u8>>,
    parts: &[Part],
    marker: &str,
) -> Composite {
    let mut page = Composite::with_capacity(parts.len()).error_marker(marker.as_bytes().to_vec());
    // The variables as includes carry them, encoded once until a `set` changes them.
    let mut encoded: Option<String> = None;
    for part in parts {
        match part {
            Part::Text(range) => page.push_shared(doc, range.clone()),
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
                    "include" => match attr("virtual").or_else(|| attr("file")) {
                        Some(uri) => {
                            let uri = resolve(path, uri);
                            let vars = encoded.get_or_insert_with(|| vars.encode());
                            let sub = Subrequest::get(uri).header(INHERITED, vars.clone());
                            page.push_fetch(parent.start(sub));
                            Ok(())
                        }
                        None => Err("include needs virtual=\"/uri\"".to_owned()),
                    },
                    "set" => match (attr("var"), attr("value")) {
                        (Some(name), Some(value)) => {
                            vars.set(&name, &value);
                            encoded = None;
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

/// An include's URI: absolute (kept as it is), or relative to the including document's
/// directory.
fn resolve(doc_path: &str, uri: String) -> String {
    if uri.starts_with('/') {
        return uri;
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
            "<!--#set var=\"v\" value=\"1\"--><!--#include virtual=\"/f\"-->",
        );
        let sent = testing::subrequests();
        let inherited = sent[0]
            .headers
            .iter()
            .find(|h| h.name.as_str() == INHERITED)
            .unwrap();
        assert!(inherited.value.contains("v=1"), "{}", inherited.value);
    }
}
