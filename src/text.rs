//! text — the one way a long string is shortened for a person to read (a log line, an error, a
//! table cell, a tool's summary): at most so many characters, then "…"; and an error with its
//! causes as one line ([`Chain`]).

pub use mcp_code_mode_sandbox::Chain;

/// `text` if it has at most `most` characters, else its first `most` characters and "…".
pub fn shorten(text: &str, most: usize) -> String {
    match text.char_indices().nth(most) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

#[cfg(test)]
mod tests {
    use super::shorten;

    #[test]
    fn long_text_is_cut_at_a_character_with_an_ellipsis() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "abc…");
        assert_eq!(shorten("ééé", 2), "éé…");
        assert_eq!(shorten("", 0), "");
        assert_eq!(shorten("a", 0), "…");
    }
}
