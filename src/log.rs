//! Log lines: our one writer to stderr (stdout is the MCP channel), masking credentials wherever
//! a library names them.

use std::io::Write;

/// Stderr for log lines, with credentials masked wherever a library names them: every UUID (an
/// HTTP session's id is a credential for that session, and rmcp names it at info and in some
/// errors), a URL's query and user info (a remote server's URL may carry a key, and rmcp and
/// reqwest print whole URLs in errors), and any `Bearer` token.
pub struct RedactedStderr;

impl Write for RedactedStderr {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write_all(&redacted(line))?;
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A log line with session ids, URL queries and user info, and bearer tokens masked.
fn redacted(line: &[u8]) -> Vec<u8> {
    use regex::bytes::Regex;
    use std::sync::LazyLock;
    static UUID: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
            .expect("a valid pattern")
    });
    static URL: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"(https?://)(?:[^/\s"'@]*@)?([^\s"'?#]*)(\?[^\s"'#)]*)?"#)
            .expect("a valid pattern")
    });
    static BEARER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+").expect("a valid pattern")
    });
    let masked = UUID.replace_all(line, &b"<id>"[..]);
    let masked = URL.replace_all(&masked, |c: &regex::bytes::Captures| {
        let mut url = [&c[1], &c[2]].concat();
        if c.get(3).is_some() {
            url.extend_from_slice(b"?<query hidden>");
        }
        url
    });
    // A challenge (`Bearer error="invalid_token", scope="…"`) names no token: its parameters
    // stay readable.
    let masked = BEARER.replace_all(&masked, |c: &regex::bytes::Captures| {
        const CHALLENGE_PARAMS: &[&[u8]] = &[
            b"realm=",
            b"error=",
            b"error_description=",
            b"error_uri=",
            b"scope=",
            b"resource_metadata=",
        ];
        let word = &c[0][c[1].len()..];
        if CHALLENGE_PARAMS
            .iter()
            .any(|p| word.eq_ignore_ascii_case(p))
        {
            c[0].to_vec()
        } else {
            [&c[1], &b"<token>"[..]].concat()
        }
    });
    masked.into_owned()
}

#[cfg(test)]
mod tests {
    use super::redacted;

    fn masked(line: &str) -> String {
        String::from_utf8(redacted(line.as_bytes())).unwrap()
    }

    #[test]
    fn log_lines_lose_tokens_session_ids_and_queries_but_keep_challenges() {
        assert_eq!(
            masked("sent Authorization: Bearer eyJhbGciOi.J9x_y-z= to it"),
            "sent Authorization: Bearer <token> to it"
        );
        assert_eq!(
            masked(r#"{"Authorization": "bearer abc="}"#),
            r#"{"Authorization": "bearer <token>"}"#
        );
        assert_eq!(
            masked(r#"401: Bearer error="invalid_token", scope="files:read""#),
            r#"401: Bearer error="invalid_token", scope="files:read""#
        );
        assert_eq!(
            masked("session 0f8fad5b-d9cb-469f-a165-70867728950e closed"),
            "session <id> closed"
        );
        assert_eq!(
            masked("GET https://me:pw@example.com/mcp?key=s3cret failed"),
            "GET https://example.com/mcp?<query hidden> failed"
        );
    }
}
