//! SSI directives in a document: `<!--#command name="value" ... -->`, found in one pass.

/// One part of a document, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Node<'a> {
    /// Bytes sent as they are.
    Text(&'a [u8]),
    /// A directive: its command and attributes (values still holding `$VARS`).
    Directive {
        command: &'a str,
        attrs: Vec<(&'a str, String)>,
        /// Byte offset of `<!--#` in the document (for error lines).
        at: usize,
    },
    /// A directive that cannot be read: where it starts and why.
    Broken { at: usize, why: &'static str },
}

const OPEN: &[u8] = b"<!--#";
const CLOSE: &[u8] = b"-->";

/// Split `doc` into text and directives.
pub fn parse(doc: &[u8]) -> Vec<Node<'_>> {
    let mut nodes = Vec::new();
    let mut pos = 0;
    while let Some(found) = find(&doc[pos..], OPEN) {
        let at = pos + found;
        if found > 0 {
            nodes.push(Node::Text(&doc[pos..at]));
        }
        let body_start = at + OPEN.len();
        let Some(len) = find(&doc[body_start..], CLOSE) else {
            // Unterminated: a marker, and the rest goes out as it is.
            nodes.push(Node::Broken {
                at,
                why: "a directive without its closing -->",
            });
            pos = body_start;
            break;
        };
        pos = body_start + len + CLOSE.len();
        nodes.push(match directive(&doc[body_start..body_start + len]) {
            Ok((command, attrs)) => Node::Directive { command, attrs, at },
            Err(why) => Node::Broken { at, why },
        });
    }
    if pos < doc.len() {
        nodes.push(Node::Text(&doc[pos..]));
    }
    nodes
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

type Parsed<'a> = (&'a str, Vec<(&'a str, String)>);

/// `include virtual="/x"`: the command and its attributes.
fn directive(text: &[u8]) -> Result<Parsed<'_>, &'static str> {
    let text = std::str::from_utf8(text).map_err(|_| "a directive that is not UTF-8")?;
    let word = |s: &str| {
        s.find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(s.len())
    };
    let n = word(text);
    if n == 0 {
        return Err("a directive without a command");
    }
    let (command, mut rest) = text.split_at(n);
    let mut attrs = Vec::new();
    loop {
        let trimmed = rest.trim_start();
        if trimmed.is_empty() {
            return Ok((command, attrs));
        }
        if trimmed.len() == rest.len() {
            return Err("attributes must be separated by spaces");
        }
        let n = word(trimmed);
        if n == 0 {
            return Err("an attribute without a name");
        }
        let (name, after) = trimmed.split_at(n);
        let after = after.trim_start();
        let Some(after) = after.strip_prefix('=') else {
            return Err("an attribute without a value");
        };
        let after = after.trim_start();
        let quote = match after.chars().next() {
            Some(q @ ('"' | '\'')) => q,
            _ => return Err("an attribute value without quotes"),
        };
        let Some(end) = after[1..].find(quote) else {
            return Err("an attribute value without its closing quote");
        };
        attrs.push((name, after[1..1 + end].to_owned()));
        rest = &after[2 + end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(list: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        list.iter().map(|(n, v)| (*n, v.to_string())).collect()
    }

    #[test]
    fn text_and_directives_in_order() {
        let doc = b"a<!--#include virtual=\"/x?y=1\" -->b<!--#echo var='Q' encoding=\"none\"-->";
        assert_eq!(
            parse(doc),
            vec![
                Node::Text(b"a"),
                Node::Directive {
                    command: "include",
                    attrs: attrs(&[("virtual", "/x?y=1")]),
                    at: 1
                },
                Node::Text(b"b"),
                Node::Directive {
                    command: "echo",
                    attrs: attrs(&[("var", "Q"), ("encoding", "none")]),
                    at: 35
                },
            ]
        );
    }

    #[test]
    fn plain_comments_are_text() {
        assert_eq!(parse(b"<!-- x -->"), vec![Node::Text(b"<!-- x -->")]);
    }

    #[test]
    fn broken_directives_say_where_and_why() {
        assert_eq!(
            parse(b"ab<!--#include virtual=/x -->c"),
            vec![
                Node::Text(b"ab"),
                Node::Broken {
                    at: 2,
                    why: "an attribute value without quotes"
                },
                Node::Text(b"c"),
            ]
        );
        assert_eq!(
            parse(b"<!--#include virtual=\"/x\""),
            vec![
                Node::Broken {
                    at: 0,
                    why: "a directive without its closing -->"
                },
                Node::Text(b"include virtual=\"/x\""),
            ]
        );
        assert!(matches!(parse(b"<!--# -->")[0], Node::Broken { .. }));
        assert!(matches!(
            parse(b"<!--#echo var=\"a\"x=\"b\" -->")[0],
            Node::Broken { .. }
        ));
    }
}
