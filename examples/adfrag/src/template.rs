//! Fragment templates: literal HTML with `{{name}}` placeholders, compiled once. Each
//! placeholder is escaped for where it stands: inside a URL attribute (`href`, `src`, ...) as
//! a URL component, so a value cannot add parameters; anywhere else as HTML text.

use osprey_sdk::escape::{html_into, url_component_into};
use osprey_sdk::params::Params;

/// How a placeholder's value is escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Html,
    Url,
}

#[derive(Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Value(String, Context),
}

#[derive(Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    /// The length of the literal text: the output's starting capacity.
    text_len: usize,
}

/// Attributes whose value is a URL.
const URL_ATTRIBUTES: &[&str] = &["href", "src", "action", "formaction", "poster", "cite"];

impl Template {
    pub fn compile(source: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = source;
        let mut text_len = 0;
        while let Some(open) = rest.find("{{") {
            let close = rest[open..].find("}}").ok_or_else(|| {
                format!(
                    "`{{{{` without `}}}}` at byte {}",
                    source.len() - rest.len() + open
                )
            })?;
            let name = rest[open + 2..open + close].trim();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!(
                    "placeholder `{{{{{name}}}}}`: names are letters, digits and `_`"
                ));
            }
            let before = &source[..source.len() - rest.len() + open];
            let context = context_at(before)?;
            parts.push(Part::Text(rest[..open].to_owned()));
            parts.push(Part::Value(name.to_owned(), context));
            text_len += open;
            rest = &rest[open + close + 2..];
        }
        parts.push(Part::Text(rest.to_owned()));
        text_len += rest.len();
        parts.retain(|p| !matches!(p, Part::Text(t) if t.is_empty()));
        Ok(Template { parts, text_len })
    }

    /// The fragment with each placeholder filled from `params` (missing ones are empty).
    pub fn render(&self, params: &Params) -> String {
        let mut out = String::with_capacity(self.text_len + 64);
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Value(name, context) => {
                    let value = params.get(name).unwrap_or("");
                    match context {
                        Context::Html => html_into(value, &mut out),
                        Context::Url => url_component_into(value, &mut out),
                    }
                }
            }
        }
        out
    }
}

/// Where an HTML scan stands.
enum Scan<'a> {
    Text,
    /// Inside a tag, with the tag's name.
    Tag {
        name: &'a str,
    },
    /// Inside a quoted attribute value.
    Value {
        quote: u8,
        name: &'a str,
        attribute: &'a str,
    },
    /// Inside an unquoted attribute value of tag `name`.
    Unquoted(&'a str),
    /// Inside `<script>` or `<style>`, until its end tag.
    Raw(&'a str),
}

impl Scan<'_> {
    /// After the `>` of a tag: text, or raw text for `<script>` and `<style>`.
    fn closed(self) -> Self {
        match self {
            Scan::Tag { name }
                if name.eq_ignore_ascii_case("script") || name.eq_ignore_ascii_case("style") =>
            {
                Scan::Raw(name)
            }
            _ => Scan::Text,
        }
    }
}

/// The context at the end of `html`: inside a quoted URL attribute of a tag, or text.
/// Placeholders inside a `<script>` or `<style>`, an unquoted attribute value or a tag
/// outside any value are refused: neither escaping makes them safe there.
fn context_at(html: &str) -> Result<Context, String> {
    let bytes = html.as_bytes();
    let mut scan = Scan::Text;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        scan = match scan {
            Scan::Text if b == b'<' && bytes.get(i + 1).is_some_and(u8::is_ascii_alphabetic) => {
                let len = html[i + 1..]
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(html.len() - i - 1);
                let name = &html[i + 1..i + 1 + len];
                i += len;
                Scan::Tag { name }
            }
            Scan::Text => Scan::Text,
            tag @ Scan::Tag { .. } if b == b'>' => tag.closed(),
            Scan::Tag { name, .. } if b == b'=' => {
                let before = html[..i].trim_end();
                let start = before
                    .rfind(|c: char| c.is_ascii_whitespace())
                    .map_or(0, |s| s + 1);
                let attribute = &before[start..];
                let after = html[i + 1..].len() - html[i + 1..].trim_start().len();
                i += after;
                match bytes.get(i + 1) {
                    Some(&quote @ (b'"' | b'\'')) => {
                        i += 1;
                        Scan::Value {
                            quote,
                            name,
                            attribute,
                        }
                    }
                    _ => Scan::Unquoted(name),
                }
            }
            tag @ Scan::Tag { .. } => tag,
            Scan::Value { quote, name, .. } if b == quote => Scan::Tag { name },
            value @ Scan::Value { .. } => value,
            Scan::Unquoted(name) if b == b'>' => Scan::Tag { name }.closed(),
            Scan::Unquoted(name) if b.is_ascii_whitespace() => Scan::Tag { name },
            unquoted @ Scan::Unquoted(_) => unquoted,
            Scan::Raw(name) => {
                let end = format!("</{name}");
                if html[i..].len() >= end.len() && html[i..i + end.len()].eq_ignore_ascii_case(&end)
                {
                    i += end.len() - 1;
                    Scan::Tag { name: "" }
                } else {
                    Scan::Raw(name)
                }
            }
        };
        i += 1;
    }
    match scan {
        Scan::Text => Ok(Context::Html),
        Scan::Value { attribute, .. } => Ok(
            if URL_ATTRIBUTES
                .iter()
                .any(|a| a.eq_ignore_ascii_case(attribute))
            {
                Context::Url
            } else {
                Context::Html
            },
        ),
        Scan::Raw(name) => Err(format!("placeholder inside <{name}>: not supported")),
        Scan::Unquoted(_) => Err("placeholder in an unquoted attribute value: quote it".into()),
        Scan::Tag { .. } => Err("placeholder inside a tag but outside an attribute value".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, query: &str) -> String {
        Template::compile(template)
            .unwrap()
            .render(&Params::parse_strict(query).unwrap())
    }

    #[test]
    fn escapes_by_context() {
        let t = r#"<a href="/click?site={{site}}&amp;n=1" title="{{site}}">{{site}}</a>"#;
        assert_eq!(
            render(t, "site=a%26b%3Dc%22%3E"),
            "<a href=\"/click?site=a%26b%3Dc%22%3E&amp;n=1\" title=\"a&amp;b=c&quot;&gt;\">a&amp;b=c&quot;&gt;</a>"
        );
        assert_eq!(
            render("<img src='/p/{{ id }}.gif'>", "id=../x"),
            "<img src='/p/..%2Fx.gif'>"
        );
        assert_eq!(render("hi {{name}}!", ""), "hi !");
        // A `>` inside an earlier quoted value does not end the tag.
        assert_eq!(
            render(r#"<a title="a>b" href="/c?d={{d}}">"#, "d=x%26y"),
            r#"<a title="a>b" href="/c?d=x%26y">"#
        );
        assert_eq!(render("<p>1 < 2 {{x}}</p>", "x=<"), "<p>1 < 2 &lt;</p>");
    }

    #[test]
    fn refuses_what_it_cannot_make_safe() {
        for bad in [
            "<script>var x = '{{x}}'</script>",
            "<a href={{x}}>",
            "<a href=\"x\" title={{x}}>",
            "<style>p { color: {{x}} }</style>",
            "<script type=module>{{x}}</script>",
            "<a {{x}}>",
            "{{x",
            "{{a-b}}",
        ] {
            assert!(Template::compile(bad).is_err(), "{bad}");
        }
        assert!(Template::compile("<script>x</script><b>{{x}}</b>").is_ok());
    }
}
