//! The parser and block resolution together, on files kept in a map.

use std::collections::HashMap;
use std::sync::Arc;

use crate::parse::{parse, Part, Template};
use crate::render::{render, Piece, Tree};

/// The page at `uri` among `files`, includes shown as `[uri]`; `Err` with the message.
fn page(files: &[(&str, &str)], uri: &str) -> Result<String, String> {
    let mut parsed: HashMap<String, Arc<Template>> = HashMap::new();
    let mut todo = vec![uri.to_string()];
    while let Some(u) = todo.pop() {
        if parsed.contains_key(&u) {
            continue;
        }
        let Some((_, text)) = files.iter().find(|(name, _)| *name == u) else {
            continue;
        };
        let t = parse(&u, text.as_bytes().to_vec()).map_err(|e| e.to_string())?;
        todo.extend(t.parents.iter().cloned());
        parsed.insert(u, Arc::new(t));
    }
    fn tree(parsed: &HashMap<String, Arc<Template>>, uri: &str) -> Option<Tree> {
        let template = parsed.get(uri)?.clone();
        let parents = template.parents.iter().map(|p| tree(parsed, p)).collect();
        Some(Tree { template, parents })
    }
    let pieces = render(&tree(&parsed, uri).unwrap(), 1 << 20)?;
    Ok(pieces
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => String::from_utf8(t).unwrap(),
            Piece::Include(u) => format!("[{u}]"),
        })
        .collect())
}

fn one(text: &str) -> Result<String, String> {
    page(&[("/p", text)], "/p")
}

#[test]
fn text_without_tags_is_the_page() {
    assert_eq!(one("<p>hi</p>\n").unwrap(), "<p>hi</p>\n");
    assert_eq!(one("").unwrap(), "");
    assert_eq!(one("a {% b % } {%").unwrap(), "a {% b % } {%");
}

#[test]
fn blocks_show_their_content_in_place() {
    assert_eq!(
        one("<h1>{% block title %}T{% endblock %}</h1>{%block body%}B{%endblock%}!").unwrap(),
        "<h1>T</h1>B!"
    );
    assert_eq!(
        one("{% block 'a b' %}x{% endblock %}|{% block \"c\" %}y{% endblock c %}").unwrap(),
        "x|y"
    );
}

#[test]
fn a_child_overrides_its_parents_blocks_and_keeps_its_page() {
    let files = [
        (
            "/base",
            "<html>{% block title %}Base{% endblock %}|{% block body %}-{% endblock %}</html>",
        ),
        (
            "/page",
            "{% extends \"base\" %}\n{% block title %}Page{% endblock %}\n",
        ),
    ];
    assert_eq!(page(&files, "/page").unwrap(), "<html>Page|-</html>");
}

#[test]
fn nested_blocks_are_overridden_one_by_one() {
    let files = [
        (
            "/base",
            "[{% block outer %}({% block inner %}i{% endblock %}){% endblock %}]",
        ),
        ("/a", "{% extends 'base' %}{% block inner %}I{% endblock %}"),
        (
            "/b",
            "{% extends 'base' %}{% block outer %}<{% block inner %}j{% endblock %}>{% endblock %}",
        ),
        ("/c", "{% extends 'b' %}{% block inner %}K{% endblock %}"),
    ];
    assert_eq!(page(&files, "/a").unwrap(), "[(I)]");
    assert_eq!(page(&files, "/b").unwrap(), "[<j>]");
    assert_eq!(page(&files, "/c").unwrap(), "[<K>]");
}

#[test]
fn parent_shows_the_overridden_definition() {
    let files = [
        ("/base", "{% block t %}Base{% endblock %}"),
        (
            "/mid",
            "{% extends '/base' %}{% block t %}Mid+{% parent %}{% endblock %}",
        ),
        (
            "/page",
            "{% extends 'mid' %}{% block t %}Page+{% parent %}{% endblock %}",
        ),
        ("/lone", "{% block t %}x{% parent %}{% endblock %}"),
    ];
    assert_eq!(page(&files, "/page").unwrap(), "Page+Mid+Base");
    assert_eq!(page(&files, "/lone").unwrap(), "x<!--[missing block]-->");
}

#[test]
fn several_parents_later_ones_win_and_the_child_wins_over_all() {
    let files = [
        ("/layout", "{% block a %}la{% endblock %}{% block b %}lb{% endblock %}{% block c %}lc{% endblock %}"),
        ("/theme", "{% block a %}ta{% endblock %}{% block b %}tb({% parent %}){% endblock %}"),
        ("/page", "{% use 'layout' 'theme' %}{% block a %}pa{% endblock %}"),
        ("/two", "{% extends 'layout' %}{% extends 'theme' %}"),
    ];
    assert_eq!(page(&files, "/page").unwrap(), "patb(lb)lc");
    assert_eq!(page(&files, "/two").unwrap(), "tatb(lb)lc");
}

#[test]
fn a_child_with_text_outside_blocks_replaces_the_page() {
    let files = [
        ("/base", "B{% block a %}x{% endblock %}"),
        (
            "/page",
            "{% extends 'base' %}own {% block a %}y{% endblock %}",
        ),
        (
            "/wrap",
            "{% extends 'base' %}<{% parent %}>{% block a %}z{% endblock %}",
        ),
    ];
    assert_eq!(page(&files, "/page").unwrap(), "own y");
    assert_eq!(page(&files, "/wrap").unwrap(), "<Bz>z");
}

#[test]
fn an_empty_block_overrides_with_nothing() {
    let files = [
        ("/base", "[{% block a %}x{% endblock %}]"),
        ("/page", "{% extends 'base' %}{% block a %}{% endblock %}"),
    ];
    assert_eq!(page(&files, "/page").unwrap(), "[]");
}

#[test]
fn a_block_defined_twice_in_a_file_keeps_the_last_definition() {
    assert_eq!(
        one("{% block a %}1{% endblock %}-{% block a %}2{% endblock %}").unwrap(),
        "2-2"
    );
}

#[test]
fn includes_are_resolved_and_kept_in_document_order() {
    let files = [
        (
            "/t/base",
            "{% include 'head.html' %}{% block a %}{% endblock %}{% include '/f?x=1' %}",
        ),
        (
            "/t/sub/page",
            "{% extends '../base' %}{% block a %}<{% include \"../../frag\" %}>{% endblock %}",
        ),
    ];
    assert_eq!(
        page(&files, "/t/sub/page").unwrap(),
        "[/t/head.html]<[/frag]>[/f?x=1]"
    );
}

#[test]
fn raw_keeps_tags_as_text() {
    assert_eq!(
        one("a{% raw %}{% block x %}{% include 'y' %}{% endraw %}b").unwrap(),
        "a{% block x %}{% include 'y' %}b"
    );
    assert_eq!(one("{% raw %}{% endblock %}").unwrap(), "{% endblock %}");
}

#[test]
fn unknown_tags_stay_as_text() {
    assert_eq!(
        one("a{% if x %}b{% endraw %}").unwrap(),
        "a{% if x %}b{% endraw %}"
    );
    assert_eq!(one("{%%}").unwrap(), "{%%}");
    // Not parsed, so not errors: an odd quote or bytes in a tag that is not ours, or raw.
    assert_eq!(one("{% if \"x %}").unwrap(), "{% if \"x %}");
    assert_eq!(
        one("{% raw %}{% include \"x %}{% endraw %}").unwrap(),
        "{% include \"x %}"
    );
    assert_eq!(
        page(&[("/p", "{% \u{e9} %}")], "/p").unwrap(),
        "{% \u{e9} %}"
    );
}

#[test]
fn a_missing_parent_leaves_the_childs_blocks() {
    let files = [("/page", "{% extends 'gone' %}{% block a %}A{% endblock %}")];
    assert_eq!(page(&files, "/page").unwrap(), "A");
}

#[test]
fn syntax_errors_name_the_offset() {
    let err = |t: &str| parse("/d/p", t.as_bytes().to_vec()).unwrap_err();
    let e = err("ab{% endblock %}");
    assert_eq!(
        (e.offset, e.message.as_str()),
        (2, "endblock without block")
    );
    let e = err("{% block a %}x{% block b %}");
    assert_eq!(
        (e.offset, e.message.as_str()),
        (14, "block `b` has no endblock")
    );
    assert_eq!(err("{% block %}").message, "block takes a name");
    assert_eq!(err("{% block '' %}").message, "block takes a name");
    assert_eq!(err("{% include %}").message, "include takes a URI");
    assert_eq!(err("{% include 'a' 'b' %}").message, "include takes a URI");
    assert_eq!(err("{% extends %}").message, "extends needs a URI");
    assert_eq!(
        err("{% include 'unclosed %}").message,
        "unterminated quoted argument"
    );
    assert_eq!(
        err("{% include '../../x' %}").message,
        "`../../x` climbs above the root or is empty"
    );
    assert_eq!(
        err("{% block a %}{% block a %}{% endblock %}{% endblock %}").message,
        "block `a` inside itself"
    );
    let deep: String = (0..65).map(|i| format!("{{% block b{i} %}}")).collect();
    assert_eq!(err(&deep).message, "blocks nested deeper than 64");
    assert!(parse("/p", b"{% include \xff %}".to_vec()).is_err());
    assert!(parse("/p", b"{% \xff %}".to_vec()).is_ok());
}

#[test]
fn blocks_that_show_each_other_are_an_error_not_a_hang() {
    let files = [
        ("/base", "{% block a %}{% block b %}{% endblock %}{% endblock %}"),
        ("/page", "{% extends 'base' %}{% block b %}{% block a %}{% parent %}{% endblock %}{% endblock %}"),
    ];
    // The page's `a` shows base's `a`, which shows the page's `b`, which shows the page's `a`.
    assert!(page(&files, "/page").unwrap_err().contains("shows itself"));
}

#[test]
fn output_is_bounded_even_when_parent_doubles_it_at_each_level() {
    let mut files = vec![(
        "/t0".to_string(),
        "{% block a %}0123456789{% endblock %}".to_string(),
    )];
    for i in 1..40 {
        files.push((
            format!("/t{i}"),
            format!(
                "{{% extends 't{}' %}}{{% block a %}}{{% parent %}}{{% parent %}}{{% endblock %}}",
                i - 1
            ),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert!(page(&files, "/t39").unwrap_err().contains("max_size"));
    assert_eq!(page(&files, "/t3").unwrap().len(), 80);
}

#[test]
fn parsed_parts_reference_the_file() {
    let t = parse("/p", b"x{% block a %}y{% endblock %}".to_vec()).unwrap();
    assert_eq!(
        t.blocks[0].parts,
        vec![Part::Text(0..1), Part::Block("a".into())]
    );
    assert_eq!(t.blocks[1].parts, vec![Part::Text(14..15)]);
}
