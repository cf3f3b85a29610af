//! One template file parsed into blocks (NXWEB's syntax). Tags are `{% ... %}`:
//!
//! - `{% extends "uri" %}` / `{% use "a" "b" %}`: parents, in order (a later one overrides an
//!   earlier one's blocks, the file itself overrides them all);
//! - `{% block name %}...{% endblock %}`: a named block, nested at will; the text around it
//!   shows whichever definition of `name` wins;
//! - `{% parent %}`: inside a block, the definition it overrides;
//! - `{% include "uri" %}`: the answer of a subrequest, inserted as it is;
//! - `{% raw %}...{% endraw %}`: tags inside are text.
//!
//! Any other tag (`{% foo %}`, a stray `{% endraw %}`) stays in the output as text. URIs are
//! resolved against the template's own URI. Arguments are quoted (`"x"`, `'x'`) or bare words.

use std::ops::Range;

use crate::uri;

/// Blocks nested deeper than this in one file are an error (NXWEB's limit).
pub const MAX_NESTING: usize = 64;

/// A parsed template: the file's bytes and what its tags say about them.
#[derive(Debug)]
pub struct Template {
    /// The URI it was fetched from (relative URIs in it resolve against this).
    pub uri: String,
    /// The file as fetched; `Part::Text` ranges index it.
    pub text: Vec<u8>,
    /// Parent URIs (resolved), in the order they appear.
    pub parents: Vec<String>,
    /// The top level first (name `""`), then each named block once (a block defined twice in
    /// one file keeps its last definition, shown at both places).
    pub blocks: Vec<Block>,
}

/// One block's content.
#[derive(Debug)]
pub struct Block {
    pub name: String,
    pub parts: Vec<Part>,
}

/// A piece of a block.
#[derive(Debug, PartialEq, Eq)]
pub enum Part {
    /// Bytes of the file.
    Text(Range<usize>),
    /// Whichever definition of this block wins.
    Block(String),
    /// The definition this block overrides.
    Parent,
    /// A subrequest's answer (the URI is resolved).
    Include(String),
}

/// A mistake in a template, with the byte offset of the tag at fault.
#[derive(Debug, PartialEq, Eq)]
pub struct SyntaxError {
    pub offset: usize,
    pub message: String,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.message)
    }
}

impl Template {
    /// Whether the file has no tags this syntax acts on (it is sent as it is).
    pub fn is_plain(&self) -> bool {
        self.parents.is_empty()
            && self.blocks.len() == 1
            && self.blocks[0]
                .parts
                .iter()
                .all(|p| matches!(p, Part::Text(_)))
    }

    /// Whether the top level holds only white space between its tags: a child whose top level
    /// is empty keeps its parent's page around its blocks.
    pub fn top_is_blank(&self) -> bool {
        self.blocks[0].parts.iter().all(|p| match p {
            Part::Text(r) => self.text[r.clone()].iter().all(u8::is_ascii_whitespace),
            _ => true,
        })
    }
}

/// Parse `text`, fetched from `uri`.
pub fn parse(uri: &str, text: Vec<u8>) -> Result<Template, SyntaxError> {
    let mut p = Parser {
        uri,
        t: Template {
            uri: uri.to_string(),
            text: Vec::new(),
            parents: Vec::new(),
            blocks: vec![Block {
                name: String::new(),
                parts: Vec::new(),
            }],
        },
        stack: Vec::new(),
        cur: 0,
    };
    let mut pos = 0;
    let mut text_start = 0;
    let mut raw = false;
    while let Some(open) = find(&text, b"{%", pos) {
        let Some(close) = find(&text, b"%}", open + 2) else {
            break;
        };
        let inner = &text[open + 2..close];
        let name = tag_name(inner);
        pos = close + 2;
        if raw && name != b"endraw" {
            pos = open + 2; // text; a `%}` in it may close a later tag
            continue;
        }
        if !raw && !Tag::KNOWN.iter().any(|k| k.as_bytes() == name) {
            continue; // not ours: stays as text
        }
        p.text(text_start..open);
        text_start = pos;
        if raw {
            raw = false;
            continue;
        }
        let tag = Tag::read(inner, open)?;
        raw = tag.name == "raw";
        p.apply(&tag, open)?;
    }
    p.text(text_start..text.len());
    if let Some(&(_, offset)) = p.stack.last() {
        return Err(SyntaxError {
            offset,
            message: format!("block `{}` has no endblock", p.t.blocks[p.cur].name),
        });
    }
    p.t.text = text;
    Ok(p.t)
}

struct Parser<'a> {
    uri: &'a str,
    t: Template,
    /// The enclosing blocks and where each opened.
    stack: Vec<(usize, usize)>,
    /// The block being filled.
    cur: usize,
}

impl Parser<'_> {
    fn text(&mut self, range: Range<usize>) {
        if !range.is_empty() {
            self.t.blocks[self.cur].parts.push(Part::Text(range));
        }
    }

    /// Act on one of this syntax's tags, found at `offset` (the text before it is flushed).
    fn apply(&mut self, tag: &Tag, offset: usize) -> Result<(), SyntaxError> {
        let err = |message: String| SyntaxError { offset, message };
        match tag.name {
            "raw" => {} // the caller reads what follows as text
            "block" => {
                let name = tag.one("block", "a name").map_err(err)?;
                self.open_block(name, offset)?;
            }
            "endblock" => {
                if tag.args.len() > 1 {
                    return Err(err("endblock takes at most a name".into()));
                }
                let (outer, _) = self
                    .stack
                    .pop()
                    .ok_or_else(|| err("endblock without block".into()))?;
                self.cur = outer;
            }
            "parent" => self.push(Part::Parent),
            "include" => {
                let target = tag.one("include", "a URI").map_err(err)?;
                let resolved = self.resolve(target).map_err(err)?;
                self.push(Part::Include(resolved));
            }
            _ => {
                // extends, use
                if tag.args.is_empty() {
                    return Err(err(format!("{} needs a URI", tag.name)));
                }
                for target in &tag.args {
                    let parent = self.resolve(target).map_err(err)?;
                    self.t.parents.push(parent);
                }
            }
        }
        Ok(())
    }

    fn push(&mut self, part: Part) {
        self.t.blocks[self.cur].parts.push(part);
    }

    /// Start filling block `name`, leaving a reference to it where the tag was.
    fn open_block(&mut self, name: &str, offset: usize) -> Result<(), SyntaxError> {
        let err = |message: String| SyntaxError { offset, message };
        if self.stack.len() >= MAX_NESTING {
            return Err(err(format!("blocks nested deeper than {MAX_NESTING}")));
        }
        let open = |b: usize| b != 0 && self.t.blocks[b].name == name;
        if open(self.cur) || self.stack.iter().any(|&(b, _)| open(b)) {
            return Err(err(format!("block `{name}` inside itself")));
        }
        self.push(Part::Block(name.to_string()));
        let index = match self.t.blocks.iter().position(|b| b.name == name) {
            Some(i) => {
                self.t.blocks[i].parts.clear(); // a later definition in one file wins
                i
            }
            None => {
                self.t.blocks.push(Block {
                    name: name.to_string(),
                    parts: Vec::new(),
                });
                self.t.blocks.len() - 1
            }
        };
        self.stack.push((self.cur, offset));
        self.cur = index;
        Ok(())
    }

    fn resolve(&self, target: &str) -> Result<String, String> {
        uri::resolve(self.uri, target)
            .ok_or_else(|| format!("`{target}` climbs above the root or is empty"))
    }
}

/// A tag's name and arguments.
struct Tag<'a> {
    name: &'a str,
    args: Vec<&'a str>,
}

impl<'a> Tag<'a> {
    /// The tags this syntax acts on.
    const KNOWN: &'static [&'static str] = &[
        "raw", "block", "endblock", "parent", "include", "extends", "use",
    ];

    fn read(inner: &'a [u8], offset: usize) -> Result<Tag<'a>, SyntaxError> {
        let err = |message: &str| SyntaxError {
            offset,
            message: message.into(),
        };
        let s = std::str::from_utf8(inner).map_err(|_| err("tag is not UTF-8"))?;
        let s = s.trim_start();
        let name_end = s.find(char::is_whitespace).unwrap_or(s.len());
        let (name, mut rest) = s.split_at(name_end);
        let mut args = Vec::new();
        loop {
            rest = rest.trim_start();
            let Some(q) = rest.chars().next() else { break };
            if q == '"' || q == '\'' {
                let end = rest[1..]
                    .find(q)
                    .ok_or_else(|| err("unterminated quoted argument"))?;
                args.push(&rest[1..1 + end]);
                rest = &rest[end + 2..];
            } else {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                args.push(&rest[..end]);
                rest = &rest[end..];
            }
        }
        Ok(Tag { name, args })
    }

    /// The one argument of `tag`, described as `what` in the error.
    fn one(&self, tag: &str, what: &str) -> Result<&'a str, String> {
        match self.args.as_slice() {
            [a] if !a.is_empty() => Ok(a),
            _ => Err(format!("{tag} takes {what}")),
        }
    }
}

/// The first word of a tag's inside.
fn tag_name(inner: &[u8]) -> &[u8] {
    let inner = inner.trim_ascii_start();
    let end = inner
        .iter()
        .position(u8::is_ascii_whitespace)
        .unwrap_or(inner.len());
    &inner[..end]
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}
