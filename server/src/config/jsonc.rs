//! JSON with comments and trailing commas, turned into plain JSON without moving any byte, so
//! that serde_json's line and column numbers still point into the original file.

/// Blank out `//` and `/* */` comments and commas that precede `}` or `]`.
pub fn to_json(text: &str) -> String {
    let mut out: Vec<u8> = text.as_bytes().to_vec();
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    // Position of a comma that may turn out to be trailing.
    let mut pending_comma: Option<usize> = None;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                pending_comma = None;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let start = i;
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                let end = (i + 2).min(bytes.len());
                for (k, byte) in out.iter_mut().enumerate().take(end).skip(start) {
                    if bytes[k] != b'\n' {
                        *byte = b' ';
                    }
                }
                i = end;
                continue;
            }
            b',' => pending_comma = Some(i),
            b'}' | b']' => {
                if let Some(at) = pending_comma.take() {
                    out[at] = b' ';
                }
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => pending_comma = None,
        }
        i += 1;
    }
    // Only ASCII bytes were replaced with ASCII spaces, so the text is still UTF-8.
    String::from_utf8(out).expect("blanking ASCII keeps UTF-8")
}

/// 1-based line of a byte offset.
pub fn line_at(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_comments_and_trailing_commas_in_place() {
        let src = "{\n  // note\n  \"a\": [1, 2,], /* x\n y */ \"b\": \"//not, a comment,}\",\n}";
        let json = to_json(src);
        assert_eq!(json.len(), src.len());
        assert_eq!(json.lines().count(), src.lines().count());
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["a"], serde_json::json!([1, 2]));
        assert_eq!(v["b"], "//not, a comment,}");
    }

    #[test]
    fn keeps_escaped_quotes() {
        let v: serde_json::Value = serde_json::from_str(&to_json(r#"{"a": "x\"//y",}"#)).unwrap();
        assert_eq!(v["a"], "x\"//y");
    }

    #[test]
    fn counts_lines() {
        assert_eq!(line_at("a\nb\nc", 0), 1);
        assert_eq!(line_at("a\nb\nc", 2), 2);
        assert_eq!(line_at("a\nb\nc", 4), 3);
    }
}
