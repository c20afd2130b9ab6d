//! JSON with comments, as Xray reads it: `//`, `/* */` and `#` outside strings are removed
//! (replaced by spaces so that line and column numbers stay right).

/// Strips comments, keeping newlines and string contents intact.
pub fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' {
            // Copy the whole string, honouring escapes.
            out.push(c);
            i += 1;
            while i < b.len() {
                out.push(b[i]);
                if b[i] == b'\\' && i + 1 < b.len() {
                    out.push(b[i + 1]);
                    i += 2;
                    continue;
                }
                i += 1;
                if b[i - 1] == b'"' {
                    break;
                }
            }
        } else if c == b'#' || (c == b'/' && b.get(i + 1) == Some(&b'/')) {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            out.extend_from_slice(b"  ");
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                i += 1;
            }
            if i < b.len() {
                out.extend_from_slice(b"  ");
                i += 2;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    // Only ASCII bytes were replaced, and only outside strings, so this stays valid UTF-8
    // except inside a comment holding multi-byte text, whose bytes all became spaces.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Parses JSON with comments; errors carry line and column.
pub fn parse(src: &str) -> Result<serde_json::Value, String> {
    let clean = strip_comments(src);
    serde_json::from_str(&clean)
        .map_err(|e| format!("line {} column {}: {}", e.line(), e.column(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_stripped_outside_strings() {
        let src = "{\n // note\n \"a\": \"x//y#z\", /* b\n c */ \"b\": 1 # tail\n}";
        let v = parse(src).unwrap();
        assert_eq!(v["a"], "x//y#z");
        assert_eq!(v["b"], 1);
        assert_eq!(strip_comments(src).lines().count(), src.lines().count());
        let e = parse("{\n\"a\": }").unwrap_err();
        assert!(e.starts_with("line 2 column"), "{e}");
        assert_eq!(parse(r#"{"a": "q\"//"}"#).unwrap()["a"], "q\"//");
    }
}
