//! Short forms of text for condition messages and Events: one line, bounded. Text from outside
//! the operator — a guest's answer, a guest command's stderr, a pod's termination message — can
//! be of any size and shape (a compromised guest chooses it); a condition carries an excerpt of
//! it, never all of it.

/// Most characters of outside text a message carries.
pub const EXCERPT_CHARS: usize = 300;

/// `text` cut to at most `max` bytes (at a character boundary), with `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `text` with every run of whitespace (line breaks included) made one space, trimmed.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The start of `text`, on one line, at most [`EXCERPT_CHARS`] bytes.
pub fn excerpt(text: &str) -> String {
    truncate(&one_line(text), EXCERPT_CHARS)
}

/// The end of `text`, on one line, at most [`EXCERPT_CHARS`] bytes: where a failing program
/// says why.
pub fn tail_excerpt(text: &str) -> String {
    let line = one_line(text);
    if line.len() <= EXCERPT_CHARS {
        return line;
    }
    let mut start = line.len() - EXCERPT_CHARS;
    while !line.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &line[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_one_bounded_line_from_either_end() {
        assert_eq!(excerpt("a\n  b\tc "), "a b c");
        let long = format!("start {} end", "é".repeat(EXCERPT_CHARS));
        let head = excerpt(&long);
        assert!(head.starts_with("start ") && head.ends_with('…'), "{head}");
        assert!(head.len() <= EXCERPT_CHARS + '…'.len_utf8());
        let tail = tail_excerpt(&long);
        assert!(tail.starts_with('…') && tail.ends_with(" end"), "{tail}");
        assert!(tail.len() <= EXCERPT_CHARS + '…'.len_utf8());
        assert_eq!(truncate("abc", 2), "ab…");
    }
}
