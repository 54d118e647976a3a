//! "Did you mean ...?" for misspelt keys and references.
//!
//! This module owns one small function: the closest of a list of known words
//! to an unknown one, when it is close enough to be a typo. It knows nothing
//! about what the words are.

/// The candidate closest to `word` by edit distance, if it is within a third
/// of the word's length (at least one edit): `requries` -> `requires`,
/// `sshd_config` -> `sshd-config`, but not `owner` -> `name`.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance in characters, with a swap of two neighbours
/// counted as one edit (the commonest typo).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev2 = vec![0usize; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(prev2[j - 2] + 1);
            }
            cur[j] = best;
        }
        prev2 = std::mem::replace(&mut prev, cur);
    }
    prev[b.len()]
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
    }

    #[test]
    fn unrelated_words_find_nothing() {
        let keys = ["datum", "type", "name", "desired"];
        assert_eq!(closest("owner", keys), None);
        assert_eq!(closest("x", keys), None);
    }

    #[test]
    fn transpositions_count_once() {
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("mode", "mdoe"), 1);
        assert_eq!(distance("", "abc"), 3);
    }
}
