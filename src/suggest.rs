//! suggest — "did you mean …?" for names a user or a model can mistype (tools, servers): one rule,
//! used by the hub's errors and the discovery tools. A leaf: it depends on nothing of ours.

/// The candidates `wanted` is probably a typo of, best first, at most `max`. Names compare
/// case-insensitively with `-`, `.` and `_` alike (`get-sum` is `get_sum`); a candidate is close
/// when few edits away for its length, or when one abbreviates the other (`read_file` →
/// `read_text_file`). Only the best of the close ones are returned.
pub fn did_you_mean<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<&'a str> {
    let want = normalize(wanted);
    if want.is_empty() {
        return Vec::new();
    }
    let mut close: Vec<(usize, std::cmp::Reverse<u64>, &str)> = candidates
        .into_iter()
        .filter_map(|candidate| {
            let have = normalize(candidate);
            let edits = strsim::damerau_levenshtein(&want, &have);
            let similarity = strsim::jaro_winkler(&want, &have);
            let few_edits = edits <= (want.chars().count().max(have.chars().count()) / 4).max(1);
            let abbreviation = is_abbreviation(&want, &have) || is_abbreviation(&have, &want);
            (edits > 0 && (few_edits || abbreviation || similarity >= 0.9)).then_some((
                edits,
                std::cmp::Reverse((similarity * 1e6) as u64),
                candidate,
            ))
        })
        .collect();
    close.sort();
    close.dedup_by_key(|c| c.2);
    // Only the best of the close ones: one edit away beats four.
    let best = close.first().map_or(0, |c| c.0);
    close
        .into_iter()
        .take_while(|c| c.0 <= best + 1)
        .take(max)
        .map(|c| c.2)
        .collect()
}

/// `"; did you mean a, b?"`, or nothing when nothing is close.
pub fn hint<'a>(wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let close = did_you_mean(wanted, candidates, 3);
    if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", close.join(", "))
    }
}

/// `short` is `long` with letters left out (`read_file` of `read_text_file`), and not tiny.
fn is_abbreviation(short: &str, long: &str) -> bool {
    let (short_len, long_len) = (short.chars().count(), long.chars().count());
    if short_len < 4 || short_len * 2 < long_len || short_len >= long_len {
        return false;
    }
    let mut rest = long.chars();
    short.chars().all(|c| rest.any(|l| l == c))
}

fn normalize(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn close_names_and_only_those() {
        let tools = [
            "read_text_file",
            "read_media_file",
            "write_file",
            "list_directory",
            "get_file_info",
        ];
        assert_eq!(did_you_mean("read_txt_file", tools, 3), ["read_text_file"]);
        assert_eq!(did_you_mean("read_file", tools, 3)[0], "read_text_file");
        assert_eq!(did_you_mean("list_dir", tools, 3), ["list_directory"]);
        assert!(did_you_mean("delete_everything", tools, 3).is_empty());
        assert!(did_you_mean("x", tools, 3).is_empty());
        assert_eq!(
            did_you_mean("head", ["head", "heads", "tail"], 3),
            ["heads"]
        );
        assert_eq!(did_you_mean("heads", ["head", "tail", "path"], 3), ["head"]);
    }
}
