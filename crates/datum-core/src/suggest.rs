//! "Did you mean ...?" for misspelt keys, fields, kinds and references.
//!
//! This module owns one small function: the closest of a list of known words
//! to an unknown one, when it is close enough to be a typo. It knows nothing
//! about what the words are. The distance is strsim's optimal string
//! alignment: Levenshtein's, with a swap of two neighbours counted as one
//! edit (the commonest typo: `mdoe`, `Fiel`).

/// The candidate closest to `word` by edit distance, if it is close enough
/// to be a typo: one edit for a word of up to four characters, else two or a
/// third of its length, whichever is more: `requries` -> `requires`,
/// `sshd_config` -> `sshd-config`, `lable` -> `labels`, but not `owner` ->
/// `name`. Of candidates equally close, the first.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let length = word.chars().count();
    let limit = if length <= 4 { 1 } else { (length / 3).max(2) };
    candidates
        .into_iter()
        .map(|c| (strsim::osa_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_the_intended_word() {
        let keys = [
            "datum",
            "type",
            "name",
            "desired",
            "requires",
            "class",
            "sensitive",
        ];
        assert_eq!(closest("requries", keys), Some("requires"));
        assert_eq!(closest("desried", keys), Some("desired"));
        assert_eq!(closest("sensitve", keys), Some("sensitive"));
        assert_eq!(closest("typ", keys), Some("type"));
        let kinds = ["File", "Directory", "Symlink", "Service", "Package"];
        assert_eq!(closest("Fiel", kinds), Some("File"));
        assert_eq!(closest("Servce", kinds), Some("Service"));
        assert_eq!(closest("Symlnk", kinds), Some("Symlink"));
        assert_eq!(
            closest("lable", ["datum", "name", "labels"]),
            Some("labels")
        );
        assert_eq!(closest("sorse", ["path", "source"]), Some("source"));
    }

    #[test]
    fn unrelated_words_find_nothing() {
        let keys = ["datum", "type", "name", "desired"];
        assert_eq!(closest("owner", keys), None);
        assert_eq!(closest("x", keys), None);
        assert_eq!(closest("Fi", ["File"]), None);
        assert_eq!(closest("colour", ["path", "mode", "owner", "ensure"]), None);
        assert_eq!(closest("gid", ["uid", "gid"]), Some("gid"));
        assert_eq!(closest("pid", ["uid", "gid"]), Some("uid"));
    }

    #[test]
    fn a_swap_of_neighbours_is_one_edit() {
        assert_eq!(strsim::osa_distance("ab", "ba"), 1);
        assert_eq!(closest("mdoe", ["owner", "mode"]), Some("mode"));
        assert_eq!(closest("ab", ["ba"]), Some("ba"));
    }
}
